package ingest

import (
	"bufio"
	"context"
	"errors"
	"io"
	"runtime"
	"slices"
	"sync/atomic"
)

// A stream reads a source shard larger than its share of a window in
// pieces (shardPieces): one goroutine scans it front to back, once, and
// keeps the members' bytes as they stream by its records' checksums. It
// hands on a piece, a batch of records and their members' bytes, each
// time it holds pieceRecords records or pieceBytes of members, and waits
// until the stream takes it before it reads on. So a stream holds the
// records of the chunk it makes, and a piece ahead of them for each shard
// of the group it reads at once (one a core, readShards), whatever the
// size of its source shards.
//
// Before pieces, such a shard was scanned whole (the records' metadata of
// the whole shard in memory; two shards at once on 2 cores), and every
// window then read its records' bytes from the source again (an arena a
// window, the next window read while one uploads). At --shard-size 512KiB
// a 1,000,000-record ingest of 10,000-record shards held 2.8 MB of scanned
// records and 4 MB of windows' bytes at its peak, and spent 2.5 CPU s of
// its 12 reading the source a second time. In pieces, that ingest (file://
// stores on tmpfs, 3 runs each, medians) peaks at 63.1 MB where it peaked
// at 68.7, in 10.4 CPU s where it took 12.7.

// pieceRecords bounds the records of a piece: a sixteenth of a chunk's.
//
// It was a quarter, and pieceBytes a quarter of a window. A piece ahead of
// the chunk is memory the chunk does not need yet: each shard scanned in
// pieces holds the one it fills and the one it waits to hand on. Smaller
// pieces lowered the peak RSS of an ingest of 10,000-record shards at
// --shard-size 512KiB (file:// stores on tmpfs, this machine): 1,000,000
// records 56.1 -> 52.1 MB (medians of 3), 5,000,000 59.1 -> 53.8 (one run
// each), 10,000 unchanged at 41-44. Its CPU per GB did not move (the bench's
// ingestcpu, 3 repetitions, alternated: 8.6 and 10.0 against 9.2-10.2). A
// sixty-fourth gave no more (51.7 MB at 1,000,000).
const pieceRecords = streamChunkRecords / 16

// pieceBytes bounds the members' bytes of a piece: a sixteenth of a
// window, and at least 64 KiB.
func pieceBytes(shardSize int64) int64 { return max(readWindow(shardSize)/16, 64<<10) }

// piece is a part of a source shard, records in order, with their
// members' bytes.
type piece struct {
	batch recordBatch
	kept  *keptShard
}

// pieceCut is what scanShardRecords needs to scan in pieces: where the
// members' bytes go, when a piece is full, and where it goes then.
type pieceCut struct {
	size       int64 // the shard's
	maxRecords int
	maxBytes   int64
	kept       *keptShard
	// given is the header offset of the last record handed on, -1 before
	// the first: a rescan by archive/tar reads past those.
	given int64
	emit  func(piece) error
	// last is the piece before's members' bytes and extents: the next is
	// given room for about as many, where growth by append left a
	// quarter of each piece's room empty on average, and made garbage.
	lastBytes, lastMembers, lastRecords int
}

// member starts keeping a member whose bytes begin at off in the shard,
// returning where to append them.
func (c *pieceCut) member(off int64) *[]byte {
	k := c.kept
	if len(k.offs) > 0 {
		k.at = append(k.at, int64(len(k.members))) // the member before ends here
	}
	k.offs = append(k.offs, off)
	return &k.members
}

// full says batch and the members kept with it make a piece.
func (c *pieceCut) full(batch *recordBatch) bool {
	return len(batch.records) >= c.maxRecords || int64(len(c.kept.members)) >= c.maxBytes
}

// give hands batch and its members on as a piece (last: its last record's
// header offset), and starts the next piece.
func (c *pieceCut) give(batch *recordBatch, last int64) error {
	k := c.kept
	if len(k.offs) > 0 {
		k.at = append(k.at, int64(len(k.members)))
	}
	batch.doneReading()
	if err := c.emit(piece{batch: *batch, kept: k}); err != nil {
		return err
	}
	c.given = last
	c.lastBytes, c.lastMembers, c.lastRecords = len(k.members), len(k.offs), len(batch.records)
	*batch = recordBatch{file: batch.file, records: make([]wdsRecord, 0, min(c.maxRecords, c.lastRecords+c.lastRecords/16+1))}
	c.kept = c.newKept()
	return nil
}

func (c *pieceCut) newKept() *keptShard {
	// A little more than the piece before: the last record may pass the
	// bound by its members.
	n := c.lastMembers + c.lastMembers/16 + 1
	return &keptShard{size: c.size, offs: make([]int64, 0, n), at: append(make([]int64, 0, n+1), 0), members: make([]byte, 0, c.lastBytes+c.lastBytes/16)}
}

// errPiecesStopped ends a shard's scan that nobody reads on (Stream.Close).
var errPiecesStopped = errors.New("the stream stopped reading the shard")

// shardPieces is one source shard being scanned in pieces.
type shardPieces struct {
	name string
	out  chan piece
	quit chan struct{}
	// start lets the scan begin (Stream.startScans): at most
	// Stream.activeScans of a stream's shards read in pieces are read at
	// once, whatever the number of cores.
	start   chan struct{}
	started bool
	// cancel ends the reads of the shard (their context).
	cancel context.CancelFunc

	// err is what ended the scan, read once out is closed.
	err error
}

// scanInPieces starts the scan of shard (size bytes, through f) in pieces
// bounded by maxRecords and maxBytes, once begin lets it; release is
// called when the scan is done with f, and cancel ends the context f
// reads under (when the scan ends, or is stopped part way); scans counts
// it while it reads.
func scanInPieces(shard string, f io.ReaderAt, size, limit int64, maxRecords int, maxBytes int64, release func(), cancel context.CancelFunc, scans *scanCount) *shardPieces {
	p := &shardPieces{name: shard, out: make(chan piece), quit: make(chan struct{}), start: make(chan struct{}), cancel: cancel}
	go func() {
		defer close(p.out)
		defer cancel()
		defer release()
		select {
		case <-p.start:
		case <-p.quit:
			p.err = errPiecesStopped
			return
		}
		scans.add(1)
		defer scans.add(-1)
		cut := &pieceCut{size: size, maxRecords: maxRecords, maxBytes: maxBytes, given: -1}
		cut.emit = func(pc piece) error {
			select {
			case p.out <- pc:
				return nil
			case <-p.quit:
				return errPiecesStopped
			}
		}
		p.err = scanPieces(shard, f, size, limit, cut)
	}()
	return p
}

// scanPieces is readShardRecords in pieces (cut's).
func scanPieces(shard string, f io.ReaderAt, size, limit int64, cut *pieceCut) error {
	pool := scanReadersFor(f)
	br := pool.Get().(*bufio.Reader)
	defer func() {
		br.Reset(nil)
		pool.Put(br)
	}()
	batch := recordBatch{file: shard}
	cut.kept = cut.newKept()
	br.Reset(io.NewSectionReader(f, 0, size))
	err := scanShardRecords(&plainTarHeaders{br: br}, size, limit, &batch, cut)
	if errors.Is(err, errNotPlain) {
		// archive/tar reads it again from its start: the records handed
		// on already are read past (cut.given), the rest anew.
		batch = recordBatch{file: shard}
		cut.kept = cut.newKept()
		br.Reset(io.NewSectionReader(f, 0, size))
		err = scanShardRecords(newStdTarHeaders(br), size, limit, &batch, cut)
	}
	if err != nil {
		return err
	}
	if len(batch.records) == 0 {
		return nil
	}
	return cut.give(&batch, batch.records[len(batch.records)-1].off)
}

// activeScans bounds the shards the stream reads in pieces at once: each
// holds a scan buffer (4 MiB for a store's object, 256 KiB for a local
// file) and a piece ahead. All of a group's shards at once, one a core
// (readShards), took the peak RSS of a 1,000,000-record ingest at 512KiB
// from 56 MB at GOMAXPROCS=2 to 92 at 16.
//
// A store's objects: two, so that one scan parses while the other waits
// on its ranged GET. Local files: a scan a core beyond the one that
// plans and uploads, at most two. A local scan waits on no request, and
// on 2 cores a second took the core the upload needs: it was 0.7 MB of
// the peak RSS of 1,000,000 WebDataset records at --shard-size 512KiB
// (41.1 -> 40.4 MB, medians of 4, file:// stores on tmpfs), a piece and
// a scan buffer that only a source of many shards holds, for no
// throughput (the same wall time, the same CPU).
func (st *Stream) activeScans() int {
	if st.store != nil {
		return 2
	}
	return max(1, min(2, runtime.GOMAXPROCS(0)-1))
}

// scanCount counts a stream's scans in pieces under way, and their most.
type scanCount struct{ now, peak atomic.Int32 }

func (c *scanCount) add(d int32) {
	n := c.now.Add(d)
	for {
		p := c.peak.Load()
		if n <= p || c.peak.CompareAndSwap(p, n) {
			return
		}
	}
}

// begin lets the scan start, once.
func (p *shardPieces) begin() {
	if !p.started {
		p.started = true
		close(p.start)
	}
}

// next is the shard's next piece; false when the scan has ended (with its
// error, if it failed).
func (p *shardPieces) next(ctx context.Context) (piece, bool, error) {
	p.begin()
	select {
	case pc, ok := <-p.out:
		if !ok {
			return piece{}, false, p.err
		}
		return pc, true, nil
	case <-ctx.Done():
		return piece{}, false, ctx.Err()
	}
}

// stop ends the scan, if it still runs, without waiting for it: a read
// under way ends too (a store's that hangs).
func (p *shardPieces) stop() {
	select {
	case <-p.quit:
	default:
		close(p.quit)
	}
	p.cancel()
}

// keptPieces are the pieces of one source shard a stream holds, in the
// order of their offsets, which do not overlap.
type keptPieces []*keptShard

// of is the piece that would hold a member at off.
func (ps keptPieces) of(off int64) *keptShard {
	i, _ := slices.BinarySearchFunc(ps, off, func(k *keptShard, off int64) int {
		if k.offs[0] <= off {
			return -1
		}
		return 1
	})
	if i == 0 {
		return ps[0]
	}
	return ps[i-1]
}

// ReadAt reads a span of the shard that lies in one piece, as that
// piece's keptShard.ReadAt reads it.
func (ps keptPieces) ReadAt(p []byte, off int64) (int, error) {
	return ps.of(off).ReadAt(p, off)
}

// record is keptShard.record of the piece that holds it.
func (ps keptPieces) record(it *Item) ([]byte, bool) {
	if len(it.Members) == 0 {
		return nil, false
	}
	return ps.of(it.Members[0].Off).record(it)
}

func (ps keptPieces) bytes() int64 {
	var n int64
	for _, k := range ps {
		n += k.bytes()
	}
	return n
}
