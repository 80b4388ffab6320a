package ingest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"
	"github.com/shardfs/shardfs/backend"
)

// Issue 55 item 3: a source rewritten between the scan and the upload.
// A WebDataset shard rewritten so was uploaded from the old shard's
// offsets: 3,328 members matched neither shard, checksummed as read, and
// verify said OK. Each record's bytes are now summed as the scan reads
// them, and the upload's checksum must equal it, or the ingest is refused,
// naming the record and its file. Cases: a WebDataset shard rewritten in
// place with the same layout and other bytes, one replaced with another
// layout, one read from a store (an object overwritten), a JSONL corpus
// with a line rewritten to the same length, and a Parquet file rewritten
// with other values. Untouched, each ingests.
func TestSourceRewrittenSinceTheScanIsRefused(t *testing.T) {
	ctx := context.Background()
	records := func(tag string, sizes ...int) []byte {
		var members [][2]string
		for i, n := range sizes {
			members = append(members,
				[2]string{fmt.Sprintf("%06d.bin", i), strings.Repeat(tag, n)},
				[2]string{fmt.Sprintf("%06d.json", i), fmt.Sprintf(`{"source": "s%d"}`, i%2)})
		}
		return goTar(t, 0, members...)
	}
	old := records("a", 700, 900, 1100, 1300)
	sameLayout := records("b", 700, 900, 1100, 1300)
	otherLayout := records("c", 1300, 1100, 900, 700)
	if len(sameLayout) != len(old) || len(otherLayout) != len(old) {
		t.Fatal("the rewritten shards must be as long as the old one")
	}
	type rowT struct {
		ID   string `parquet:"id"`
		Body []byte `parquet:"body"`
		Src  string `parquet:"source"`
	}
	parquetOf := func(tag string) []byte {
		var buf bytes.Buffer
		var rows []rowT
		for i := range 6 {
			rows = append(rows, rowT{fmt.Sprintf("r%d", i), []byte(strings.Repeat(tag, 500+i)), fmt.Sprint("s", i%2)})
		}
		if err := parquet.Write(&buf, rows); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	jsonlOf := func(tag string) []byte {
		var b bytes.Buffer
		for i := range 6 {
			fmt.Fprintf(&b, `{"id": "r%d", "text": %q, "source": "s%d"}`+"\n", i, strings.Repeat(tag, 300+i), i%2)
		}
		return b.Bytes()
	}
	cases := []struct {
		name, file    string
		before, after []byte
		opts          ScanOptions
		store         bool
	}{
		{"webdataset same layout", "shard-000.tar", old, sameLayout, ScanOptions{Strata: []string{"source"}}, false},
		{"webdataset other layout", "shard-000.tar", old, otherLayout, ScanOptions{Strata: []string{"source"}}, false},
		{"webdataset from a store", "shard-000.tar", old, sameLayout, ScanOptions{Strata: []string{"source"}}, true},
		{"jsonl corpus", "corpus.jsonl", jsonlOf("x"), jsonlOf("y"), ScanOptions{Strata: []string{"source"}, Members: []MemberField{{"text", "txt"}}}, false},
		{"parquet", "table.parquet", parquetOf("x"), parquetOf("y"), ScanOptions{Strata: []string{"source"}}, false},
	}
	for _, tc := range cases {
		for _, rewrite := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s rewritten %v", tc.name, rewrite), func(t *testing.T) {
				dir := t.TempDir()
				srcDir := filepath.Join(dir, "src")
				os.MkdirAll(srcDir, 0o755)
				p := filepath.Join(srcDir, tc.file)
				if err := os.WriteFile(p, tc.before, 0o644); err != nil {
					t.Fatal(err)
				}
				var src *Source
				var err error
				if tc.store {
					st, err2 := backend.Open("file://"+srcDir, backend.OpenOptions{})
					if err2 != nil {
						t.Fatal(err2)
					}
					o := tc.opts
					o.Store = st
					src, err = ScanStore(ctx, o)
				} else {
					src, err = ScanWith(p, tc.opts)
				}
				if err != nil {
					t.Fatal(err)
				}
				if rewrite {
					// In place, as a writer that truncates and writes does.
					if err := os.WriteFile(p, tc.after, 0o644); err != nil {
						t.Fatal(err)
					}
				}
				stores := localStores(t, filepath.Join(dir, "stores"), 3)
				_, err = Run(ctx, src, Options{Name: "ds", Stores: stores, Data: 2, Parity: 1, ShardSize: 64 << 10, BlockSize: 4096})
				switch {
				case !rewrite && err != nil:
					t.Fatalf("an untouched source: %v", err)
				case rewrite && (err == nil || !strings.Contains(err.Error(), "changed since the scan read it") || !strings.Contains(err.Error(), tc.file)):
					t.Fatalf("a source rewritten after the scan: %v; want it refused, naming %s", err, tc.file)
				}
			})
		}
	}
}

// Issue 55: ingest --force from a WebDataset URL inside NAME/data/
// committed, then its purge of orphans deleted the source objects. A
// source in a dataset's namespace on a destination store (the one being
// ingested, another the store holds, or the whole store; read from a
// store or from a local directory) is refused before anything is written,
// and every source byte is still there. A source elsewhere in a store's
// directory is ingested, and left whole.
func TestSourceInsideAStoreIsRefused(t *testing.T) {
	ctx := context.Background()
	shard := goTar(t, 0, [2]string{"000001.bin", "x"}, [2]string{"000001.json", `{"source": "a"}`}, [2]string{"000002.bin", "y"}, [2]string{"000002.json", `{"source": "b"}`})
	for _, tc := range []struct{ rel, refusal string }{
		{"stores/s0/ds/data", "lies in dataset ds's own namespace on store 0"},
		{"stores/s1", "is store 1"},
		{"stores/s2/other/data/raw", "lies in dataset other's namespace on store 2"},
		{"stores/s2/raw", ""},
	} {
		for _, fromStore := range []bool{true, false} {
			if tc.rel == "stores/s1" && !fromStore {
				continue // a store's directory is no WebDataset directory: the scan refuses it
			}
			root := t.TempDir()
			stores := localStores(t, filepath.Join(root, "stores"), 3)
			otherSrc := filepath.Join(root, "other-src")
			os.MkdirAll(otherSrc, 0o755)
			os.WriteFile(filepath.Join(otherSrc, "o.tar"), goTar(t, 0, [2]string{"9.bin", "z"}, [2]string{"9.json", `{"source": "c"}`}), 0o644)
			osrc, err := ScanWith(otherSrc, ScanOptions{Strata: []string{"source"}})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := Run(ctx, osrc, Options{Name: "other", Stores: stores, Data: 2, Parity: 1, ShardSize: 64 << 10, BlockSize: 4096}); err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join(root, tc.rel)
			os.MkdirAll(dir, 0o755)
			p := filepath.Join(dir, "shard-000.tar")
			if err := os.WriteFile(p, shard, 0o644); err != nil {
				t.Fatal(err)
			}
			var src *Source
			if fromStore {
				st, err := backend.Open("file://"+dir, backend.OpenOptions{})
				if err != nil {
					t.Fatal(err)
				}
				src, err = ScanStore(ctx, ScanOptions{Strata: []string{"source"}, Store: st})
			} else {
				src, err = ScanWith(dir, ScanOptions{Strata: []string{"source"}})
			}
			if err != nil {
				t.Fatal(err)
			}
			_, err = Run(ctx, src, Options{Name: "ds", Stores: stores, Data: 2, Parity: 1, ShardSize: 64 << 10, BlockSize: 4096, Force: true})
			switch {
			case tc.refusal == "" && err != nil:
				t.Fatalf("a source in %s, outside the stores' datasets (from a store: %v): %v", tc.rel, fromStore, err)
			case tc.refusal != "" && (err == nil || !strings.Contains(err.Error(), tc.refusal) || !strings.Contains(err.Error(), "keep the source outside the stores' datasets")):
				t.Fatalf("ingest --force of a source in %s (from a store: %v): %v; want it refused: %q", tc.rel, fromStore, err, tc.refusal)
			}
			if b, err := os.ReadFile(p); err != nil || !bytes.Equal(b, shard) {
				t.Fatalf("the source shard in %s after the ingest: %v", tc.rel, err)
			}
		}
	}
}
