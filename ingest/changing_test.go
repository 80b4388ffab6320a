package ingest

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/internal/miniotest"
)

// A source shard larger than its share of a window is read by many
// requests (in pieces, issue 59): its first bytes by one GET, the rest by
// ranged reads, or a local file by many reads. A shard rewritten between
// two of them was read as a mix of two versions: records before the
// change from the old one, after it from the new one, and the record at
// the change part old and part new, bytes that neither version holds. The
// scan checksummed what it read, so the mix was committed and verified.
// Now every read of a shard is held to the version its first read saw
// (S3's If-Match on the ETag; a file's identity, size, mtime and ctime),
// and the ingest is refused, naming the shard. Cases: a local shard
// rewritten in place, and an object replaced on a file:// store and on
// MinIO, each once a scan has read part of it. Untouched, each ingests
// every record byte for byte.
func TestSourceChangedWhileReadIsRefused(t *testing.T) {
	ctx := context.Background()
	srv := miniotest.Start(t, "source")
	creds := &backend.Credentials{AccessKeyID: miniotest.AccessKey, SecretAccessKey: miniotest.SecretKey}
	for _, where := range []string{"local", "file store", "MinIO"} {
		for _, change := range []bool{false, true} {
			name := where
			if change {
				name += ", changed part way"
			}
			t.Run(name, func(t *testing.T) {
				dir := t.TempDir()
				// A shard past its share of a window (128 KiB here) is
				// read in pieces: 150 records, about 450 kB, on a store.
				// A local one behind changingFiles is scanned through a
				// 4 MiB buffer (scanReadersFor does not know the
				// wrapper), so it takes 1,300 records (5.9 MB) to be
				// read more than once.
				per := 150
				if where == "local" {
					per = 1300
				}
				want := writeShards(t, dir, 2, per)
				shard := "shard-0001.tar"
				old, err := os.ReadFile(filepath.Join(dir, shard))
				if err != nil {
					t.Fatal(err)
				}
				other := otherPayloads(t, old)
				var st *Stream
				var changed sync.Once
				done := new(bool)
				switch where {
				case "local":
					if st, err = OpenStream(dir, ScanOptions{Strata: []string{"source"}}); err != nil {
						t.Fatal(err)
					}
					if change {
						st.files = &changingFiles{sourceFiles: st.files, name: filepath.Join(dir, shard), change: func() {
							changed.Do(func() { rewriteInPlace(t, filepath.Join(dir, shard), other); *done = true })
						}}
					}
				default:
					var raw backend.Store
					if where == "MinIO" {
						prefix := "source/" + strings.ReplaceAll(t.Name(), "/", "-")
						if raw, err = backend.Open(srv.URL(prefix), backend.OpenOptions{Credentials: creds}); err != nil {
							t.Fatal(err)
						}
						for _, s := range []string{"shard-0000.tar", shard} {
							b, _ := os.ReadFile(filepath.Join(dir, s))
							if err := raw.Put(ctx, s, b); err != nil {
								t.Fatal(err)
							}
						}
					} else if raw, err = backend.Open("file://"+dir, backend.OpenOptions{}); err != nil {
						t.Fatal(err)
					}
					src := backend.Store(raw)
					if change {
						src = &changingStore{Store: raw, key: shard, change: func() {
							changed.Do(func() {
								if err := raw.Put(ctx, shard, other); err != nil {
									t.Error(err)
								}
								*done = true
							})
						}}
					}
					if st, err = OpenStoreStream(ctx, ScanOptions{Store: src, Strata: []string{"source"}}); err != nil {
						t.Fatal(err)
					}
				}
				defer st.Close()
				ingestChanging(t, st, change, done, shard, want)
			})
		}
	}
}

// ingestChanging ingests st, and checks that every record comes back
// byte for byte when its source was left alone, and that an ingest whose
// source file changed part way (changed: true once it did) is refused,
// naming the file, saying it changed while it was read and to rerun, with
// nothing of it left on the stores.
func ingestChanging(t *testing.T, st *Stream, change bool, changed *bool, file string, want map[string]map[string][]byte) {
	t.Helper()
	ctx := context.Background()
	stores := localStores(t, t.TempDir(), 3)
	_, err := RunStream(ctx, st, Options{Name: "ds", Stores: stores, Data: 2, Parity: 1, ShardSize: 64 << 10, BlockSize: 4096})
	if !change {
		if err != nil {
			t.Fatal(err)
		}
		recordsBack(t, stores, "ds", want)
		return
	}
	if !*changed {
		t.Fatalf("%s was never changed: the test did not reach a read past its first bytes", file)
	}
	if err == nil {
		t.Fatalf("%s, rewritten while it was read, was ingested: want a refusal naming it", file)
	}
	t.Logf("refused: %v", err)
	if msg := err.Error(); !strings.Contains(msg, file) || !strings.Contains(msg, "changed while") || !strings.Contains(msg, "rerun") {
		t.Fatalf("refusal %q: want it to name %s, say it changed while it was read, and to rerun", msg, file)
	}
	for i, s := range stores {
		keys, err := s.List(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if strings.HasPrefix(k, "ds/") || strings.Contains(k, "manifest") {
				t.Fatalf("store %d holds %s after the refused ingest: want the stores as they were", i, k)
			}
		}
	}
}

// otherPayloads is tarBytes with every .bin member's bytes changed and
// every header kept: a shard of the same layout, the same keys and
// strata, and other bytes.
func otherPayloads(t *testing.T, tarBytes []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	tr, tw := tar.NewReader(bytes.NewReader(tarBytes)), tar.NewWriter(&out)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		if strings.HasSuffix(h.Name, ".bin") {
			for i := range b {
				b[i] ^= 0x5a
			}
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		tw.Write(b)
	}
	tw.Close()
	if out.Len() != len(tarBytes) || bytes.Equal(out.Bytes(), tarBytes) {
		t.Fatalf("the other shard is %d bytes (equal: %v), the old %d: want as long, and other bytes", out.Len(), bytes.Equal(out.Bytes(), tarBytes), len(tarBytes))
	}
	return out.Bytes()
}

// rewriteInPlace writes b over the file at path, from its start, as an
// editor that rewrites a file in place does: same inode, no truncation.
func rewriteInPlace(t *testing.T, path string, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, 0); err != nil {
		t.Fatal(err)
	}
}

// changingStore calls change before the first read of key that begins
// past its start: once a scan has read the object's first bytes.
type changingStore struct {
	backend.Store
	key    string
	change func()
}

func (c *changingStore) ReadAt(ctx context.Context, key string, p []byte, off int64) error {
	if key == c.key && off > 0 {
		c.change()
	}
	return c.Store.ReadAt(ctx, key, p, off)
}

func (c *changingStore) ReadAtV(ctx context.Context, key string, bufs [][]byte, off int64) error {
	if key == c.key && off > 0 {
		c.change()
	}
	return c.Store.ReadAtV(ctx, key, bufs, off)
}

// changingFiles calls change before the first read of the file name that
// begins past its start.
type changingFiles struct {
	sourceFiles
	name   string
	change func()
}

func (c *changingFiles) open(ctx context.Context, name string) (io.ReaderAt, int64, error) {
	f, size, err := c.sourceFiles.open(ctx, name)
	if err != nil || name != c.name {
		return f, size, err
	}
	return changingReader{f, c.change}, size, nil
}

type changingReader struct {
	io.ReaderAt
	change func()
}

func (c changingReader) ReadAt(p []byte, off int64) (int, error) {
	if off > 0 {
		c.change()
	}
	return c.ReaderAt.ReadAt(p, off)
}

// The same for a JSONL corpus, read a buffer at a time: rewritten in
// place (a line's text changed, at the same length) once its first
// buffer is read, the ingest is refused, naming the corpus; untouched,
// it ingests every document byte for byte.
func TestCorpusChangedWhileReadIsRefused(t *testing.T) {
	for _, change := range []bool{false, true} {
		t.Run(fmt.Sprint("changed part way: ", change), func(t *testing.T) {
			corpus := filepath.Join(t.TempDir(), "c.jsonl")
			var body bytes.Buffer
			want := map[string]map[string][]byte{}
			for i := range 30_000 { // about 2.4 MB: more than one read of 1 MiB
				text := fmt.Sprintf("document %06d %s", i, strings.Repeat("abcdefgh", 6))
				fmt.Fprintf(&body, "{\"id\":\"d%06d\",\"text\":%q,\"source\":\"s%d\"}\n", i, text, i%3)
				want[fmt.Sprintf("d%06d", i)] = map[string][]byte{"txt": []byte(text), "json": []byte(fmt.Sprintf(`{"id":"d%06d","source":"s%d"}`, i, i%3))}
			}
			if err := os.WriteFile(corpus, body.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			other := bytes.ReplaceAll(body.Bytes(), []byte("abcdefgh"), []byte("ABCDEFGH"))
			var changed sync.Once
			done := new(bool)
			if change {
				wrapCorpora(t, func(f corpusFile) corpusFile {
					return changingCorpus{f, func() {
						changed.Do(func() { rewriteInPlace(t, corpus, other); *done = true })
					}}
				})
			}
			st, err := OpenStream(corpus, ScanOptions{Members: []MemberField{{"text", "txt"}}, KeyField: "id", Strata: []string{"source"}})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			ingestChanging(t, st, change, done, corpus, want)
		})
	}
}

// changingCorpus calls change before the first read past the corpus's
// start.
type changingCorpus struct {
	corpusFile
	change func()
}

func (c changingCorpus) ReadAt(p []byte, off int64) (int, error) {
	if off > 3 { // past the byte order mark's check
		c.change()
	}
	return c.corpusFile.ReadAt(p, off)
}
