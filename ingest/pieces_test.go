package ingest

import (
	"archive/tar"
	"bytes"
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/internal/busy"
)

// writePiecesShards writes shards of per records each (a .txt of 900 to 1,020
// bytes and a .json of fields) into dir, and returns the records by key.
// odd, when set, changes record odd's first header: a PAX comment (which
// plainTarHeaders declines, so archive/tar reads the shard again), or a
// .json member that is no JSON object.
func writePiecesShards(t *testing.T, dir string, shards, per int, odd int, oddKind string) map[string]map[string][]byte {
	t.Helper()
	rng := rand.New(rand.NewPCG(uint64(shards), uint64(per)))
	want := map[string]map[string][]byte{}
	for s := range shards {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for r := range per {
			n := s*per + r
			key := fmt.Sprintf("%07d", n)
			txt := make([]byte, 900+rng.IntN(121))
			for i := range txt {
				txt[i] = byte('a' + rng.IntN(26))
			}
			js := []byte(fmt.Sprintf(`{"source":"s%d"}`, n%3))
			if n == odd && oddKind == "bad json" {
				js = []byte("not json")
			}
			want[key] = map[string][]byte{"txt": txt, "json": js}
			for i, m := range []struct {
				name string
				body []byte
			}{{"json", js}, {"txt", txt}} {
				h := &tar.Header{Name: key + "." + m.name, Mode: 0o644, Size: int64(len(m.body)), Typeflag: tar.TypeReg}
				if n == odd && i == 0 && oddKind == "pax" {
					h.PAXRecords, h.Format = map[string]string{"comment": "made by hand"}, tar.FormatPAX
				}
				if err := tw.WriteHeader(h); err != nil {
					t.Fatal(err)
				}
				tw.Write(m.body)
			}
		}
		tw.Close()
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("shard-%04d.tar", s)), buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return want
}

// streamPieces ingests the shards in dir as dataset "ds" into 3 local
// stores, streamed at --shard-size 16KiB (windows of 64 KiB, so shards of
// more than 32 KiB are read in pieces); the stream is closed when the
// test ends.
func streamPieces(t *testing.T, dir string) (*Stream, []backend.Store, *Result, error) {
	t.Helper()
	st, err := OpenStream(dir, ScanOptions{Strata: []string{"source"}})
	if err != nil || st == nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	stores := localStores(t, t.TempDir(), 3)
	res, err := RunStream(context.Background(), st, Options{Name: "ds", Stores: stores, Data: 2, Parity: 1, ShardSize: piecesShardSize, BlockSize: 4096})
	return st, stores, res, err
}

const piecesShardSize = 16 << 10

// TestStreamReadsLargeShardsInPieces: source shards far larger than a
// window are read once, in pieces, their members' bytes kept as they are
// read: the stream holds about a chunk of records' bytes and a few pieces,
// not a shard (a shard here holds more than twice the bound), with every
// core kept busy, and every record comes back byte for byte.
func TestStreamReadsLargeShardsInPieces(t *testing.T) {
	dir := t.TempDir()
	busy.Burn(t, runtime.NumCPU())
	const shards, per = 2, 700
	want := writePiecesShards(t, dir, shards, per, -1, "")
	st, stores, res, err := streamPieces(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	const shardSize = piecesShardSize
	var shardBytes int64
	for _, r := range want {
		shardBytes += int64(len(r["txt"]) + len(r["json"]))
	}
	shardBytes /= shards
	if st.pieces < shards*2 {
		t.Fatalf("%d pieces read from %d shards of %d bytes of members: want the shards read in pieces (of %d bytes)", st.pieces, shards, shardBytes, pieceBytes(shardSize))
	}
	// A chunk's records and those it carries, a piece ahead of it for each
	// scan under way and one being taken, and 16 bytes an extent: a record
	// here is two members of at least 900 bytes in all.
	bytesBound := readWindow(shardSize) + shardSize + int64(st.activeScans()+1)*pieceBytes(shardSize)
	bound := bytesBound + bytesBound*2*16/900
	if st.keptPeak == 0 || st.keptPeak > bound || bound*2 > shardBytes {
		t.Fatalf("kept at most %d bytes of source shards of %d bytes of members in memory: want some, and at most %d (%d chunks)", st.keptPeak, shardBytes, bound, res.Chunks)
	}
	recordsBack(t, stores, "ds", want)
}

// TestStreamScansFewShardsAtOnce: a node of many cores reads a group of
// shards at once, one a core; of those read in pieces, at most two are
// scanned at once, so what the scans hold (a scan buffer and a piece
// ahead each) does not grow with the cores. All of a group's at once took
// a 1,000,000-record ingest from 56 MB at GOMAXPROCS=2 to 92 at 16. On 2
// cores, local shards are scanned one at a time: a second scan took the
// core the upload needs, and held a scan buffer and a piece ahead of its
// own.
func TestStreamScansFewShardsAtOnce(t *testing.T) {
	for _, c := range []struct{ cores, shards, scans int }{{16, 16, 2}, {2, 6, 1}} {
		t.Run(fmt.Sprintf("%d cores", c.cores), func(t *testing.T) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(c.cores))
			dir := t.TempDir()
			want := writePiecesShards(t, dir, c.shards, 150, -1, "")
			st, stores, _, err := streamPieces(t, dir)
			if err != nil {
				t.Fatal(err)
			}
			if st.pieces < c.shards*2 || st.scans.peak.Load() != int32(c.scans) {
				t.Fatalf("%d shards read in %d pieces, at most %d scans at once on %d cores: want them in pieces, and %d scans at once at most, and at some time", c.shards, st.pieces, st.scans.peak.Load(), c.cores, c.scans)
			}
			recordsBack(t, stores, "ds", want)
		})
	}
}

// TestStreamPiecesReadAgainByArchiveTar: a header plainTarHeaders declines
// part way through a shard read in pieces has archive/tar read it again
// from its start; the records handed on already are not handed on again,
// and none is lost.
func TestStreamPiecesReadAgainByArchiveTar(t *testing.T) {
	dir := t.TempDir()
	const per = 400
	want := writePiecesShards(t, dir, 2, per, per+300, "pax")
	st, stores, _, err := streamPieces(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	if st.pieces < 4 {
		t.Fatalf("%d pieces: want the shard with the PAX comment read in pieces before it", st.pieces)
	}
	recordsBack(t, stores, "ds", want)
}

// TestStreamPiecesStopWithARefusal: a record refused part way through a
// shard read in pieces fails the ingest, naming the shard and the offset,
// and the shards' scans end with it: no goroutine is left reading.
func TestStreamPiecesStopWithARefusal(t *testing.T) {
	dir := t.TempDir()
	const per = 400
	writePiecesShards(t, dir, 3, per, 300, "bad json")
	before := runtime.NumGoroutine()
	st, _, _, err := streamPieces(t, dir)
	if err == nil || !strings.Contains(err.Error(), "shard-0000.tar at offset") || !strings.Contains(err.Error(), "not a JSON object") {
		t.Fatalf("ingest of a shard with a record of bad JSON: %v, want its refusal naming the shard and offset", err)
	}
	st.Close()
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines after the refused ingest, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestStreamReadsLargeStoreShardsOnce: source shards on a store, larger
// than their share of a window and than a scan buffer, are read in pieces
// by ranged reads that cover each shard once, with no byte read twice
// (the windows read every record's bytes again before), and every record
// comes back byte for byte.
func TestStreamReadsLargeStoreShardsOnce(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	want := writeShards(t, dir, 2, 1300)
	raw, err := backend.Open("file://"+dir, backend.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	src := &countingStore{Store: raw, reads: map[string][][2]int64{}}
	st, err := OpenStoreStream(ctx, ScanOptions{Store: src, Strata: []string{"source"}})
	if err != nil || st == nil {
		t.Fatal(err)
	}
	defer st.Close()
	stores := localStores(t, t.TempDir(), 3)
	if _, err := RunStream(ctx, st, Options{Name: "ds", Stores: stores, Data: 2, Parity: 1, ShardSize: 64 << 10, BlockSize: 4096}); err != nil {
		t.Fatal(err)
	}
	if len(src.reads) != 2 || st.pieces < 4 {
		t.Fatalf("%d source shards read, in %d pieces: want 2, in pieces", len(src.reads), st.pieces)
	}
	for key, reads := range src.reads {
		size, err := raw.Stat(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		slices.SortFunc(reads, func(a, b [2]int64) int { return cmp.Compare(a[0], b[0]) })
		at := int64(0)
		for _, r := range reads {
			if r[0] != at {
				t.Fatalf("%s (%d bytes) read as %v: want reads that cover it once, each byte once", key, size, reads)
			}
			at = r[1]
		}
		if at != size || len(reads) < 2 {
			t.Fatalf("%s (%d bytes) read as %v: want ranged reads that cover it once", key, size, reads)
		}
	}
	recordsBack(t, stores, "ds", want)
}
