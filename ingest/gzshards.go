package ingest

import (
	"bufio"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/klauspost/compress/gzip"
)

// Compressed WebDataset shards: a .tar.gz or .tgz shard is a gzip stream
// of a tar, as WebDataset writes and reads them. Its records lie at
// offsets in the decompressed tar, so the scan and the upload read it as
// an io.ReaderAt over those bytes (gzShard): a cursor that decompresses
// forward, once for a pass front to back, and starts again from the
// beginning only when asked for bytes behind it. The checksums written at
// ingest are over the members' bytes, decompressed: what the source means.

// compressedShard reports whether name is a gzip-compressed tar shard.
func compressedShard(name string) bool {
	return strings.HasSuffix(name, ".tar.gz") || strings.HasSuffix(name, ".tgz")
}

// isShardName reports whether name is a WebDataset shard: a tar, plain or
// gzip-compressed.
func isShardName(name string) bool {
	return strings.HasSuffix(name, ".tar") || compressedShard(name)
}

// gzSizes are the decompressed sizes of a source's compressed shards,
// learned by the scan (one counting pass each), so that the upload does
// not count again.
type gzSizes struct {
	mu sync.Mutex
	m  map[string]int64
}

func (z *gzSizes) get(name string) (int64, bool) {
	z.mu.Lock()
	defer z.mu.Unlock()
	n, ok := z.m[name]
	return n, ok
}

func (z *gzSizes) set(name string, n int64) {
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.m == nil {
		z.m = map[string]int64{}
	}
	z.m[name] = n
}

// gzShard is a compressed shard's decompressed bytes as an io.ReaderAt;
// safe for concurrent use (one read at a time).
type gzShard struct {
	name string
	raw  io.ReaderAt // the compressed bytes
	rawN int64
	size int64 // decompressed

	mu  sync.Mutex
	zr  *gzip.Reader
	br  *bufio.Reader
	pos int64 // the decompressed offset zr is at
}

// openGzShard opens the compressed shard name (raw, rawN bytes), learning
// its decompressed size from sizes or, the first time, from a counting pass.
func openGzShard(name string, raw io.ReaderAt, rawN int64, sizes *gzSizes) (*gzShard, error) {
	g := &gzShard{name: name, raw: raw, rawN: rawN}
	if n, ok := sizes.get(name); ok {
		g.size = n
		return g, nil
	}
	if err := g.restart(); err != nil {
		return nil, err
	}
	n, err := io.Copy(io.Discard, g.zr)
	if err != nil {
		return nil, g.damaged(n, err)
	}
	g.size, g.pos = n, n
	sizes.set(name, n)
	return g, nil
}

// damaged words a failure to decompress at decompressed offset at.
func (g *gzShard) damaged(at int64, err error) error {
	return fmt.Errorf("shard %s: gzip stream damaged or cut short, %d bytes into its tar (%v): re-create the shard, or leave it out of the source", g.name, at, err)
}

// restart starts decompressing from the beginning.
func (g *gzShard) restart() error {
	if g.br == nil {
		g.br = bufio.NewReaderSize(nil, 1<<20) // reads of 1 MiB: ranged GETs from a store
	}
	g.br.Reset(io.NewSectionReader(g.raw, 0, g.rawN))
	var err error
	if g.zr == nil {
		g.zr, err = gzip.NewReader(g.br)
	} else {
		err = g.zr.Reset(g.br)
	}
	if err != nil {
		return fmt.Errorf("shard %s: not a gzip stream (%v): a .tar.gz or .tgz shard is a gzip-compressed tar; rename a plain tar to .tar", g.name, err)
	}
	g.pos = 0
	return nil
}

func (g *gzShard) ReadAt(p []byte, off int64) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if off >= g.size {
		return 0, io.EOF
	}
	if off < g.pos || g.zr == nil {
		if err := g.restart(); err != nil {
			return 0, err
		}
	}
	if off > g.pos {
		n, err := io.CopyN(io.Discard, g.zr, off-g.pos)
		g.pos += n
		if err != nil {
			return 0, g.damaged(g.pos, err)
		}
	}
	want := p[:min(int64(len(p)), g.size-off)]
	n, err := io.ReadFull(g.zr, want)
	g.pos += int64(n)
	if err != nil {
		// The stream ended before the size the scan counted: the shard
		// changed since, or is damaged.
		return n, g.damaged(g.pos, err)
	}
	if len(want) < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// release frees the decompressor and its buffer, until the next ReadAt.
func (g *gzShard) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.zr, g.br, g.pos = nil, nil, 0
}

// releaseShard frees what reading a shard through f holds, when f is a
// compressed shard: the scan and the upload read a shard's records, then
// move on, and a decompressor and its 1 MiB buffer per shard of the
// source would add up.
func releaseShard(f io.ReaderAt) {
	if g, ok := f.(*gzShard); ok {
		g.release()
	}
}
