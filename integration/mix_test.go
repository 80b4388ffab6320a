package integration

import (
	"archive/tar"
	"bytes"
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shardfs/shardfs/internal/synth"
)

// Issue 12 item 3: a mount of three datasets on the same stores mixed by
// weight. Every batch tar holds each dataset in floor(B w)..ceil(B w), every
// member is named <dataset>/<class>/<file> and holds that source file's
// bytes, index.csv agrees, and samples/<dataset>/<class>/<file> serves the
// same bytes.
func TestMixedDatasetsThroughAMount(t *testing.T) {
	_, urls := localStores(t, 6)
	stores := "--stores=" + strings.Join(urls, ",")
	srcs := map[string]string{
		"web":   writeSource(t, synth.Imbalanced(300, 4, 0.7, 1_000, 20_000, 41)),
		"books": writeSource(t, synth.Imbalanced(120, 3, 0.6, 1_000, 20_000, 42)),
		"code":  writeSource(t, synth.Imbalanced(40, 2, 0.5, 1_000, 20_000, 43)), // runs out: recycled
	}
	for name, src := range srcs {
		if r := run(t, 2*time.Minute, nil, "ingest", stores, "--data=4", "--parity=2", "--shard-size=1MiB", src, name); r.code != 0 {
			t.Fatalf("ingest %s: %v", name, r)
		}
	}
	weights := map[string]float64{"web": 0.5, "books": 0.3, "code": 0.2}
	const batch = 20
	mnt := mountShardfs(t, stores, "--mix=web:0.5,books:0.3,code:0.2", fmt.Sprintf("--batch-size=%d", batch), "--epochs=2")
	for e := 0; e < 2; e++ {
		dir := filepath.Join(mnt, "epochs", fmt.Sprintf("%04d", e), "rank-000")
		f, err := os.Open(filepath.Join(dir, "index.csv"))
		if err != nil {
			t.Fatal(err)
		}
		rows, err := csv.NewReader(f).ReadAll()
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		rows = rows[1:]
		nb := len(rows) / batch
		if nb != 460/batch {
			t.Fatalf("epoch %d: %d batches, want %d", e, nb, 460/batch)
		}
		codeSeen := map[string]int{}
		for b := 0; b < nb; b++ {
			data := mustRead(t, filepath.Join(dir, fmt.Sprintf("batch-%06d.tar", b)))
			tr := tar.NewReader(bytes.NewReader(data))
			per := map[string]int{}
			i := 0
			for {
				hdr, err := tr.Next()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(tr)
				if strings.HasSuffix(hdr.Name, ".cls") {
					continue
				}
				key := rows[b*batch+i][2]
				i++
				ds, rel, _ := strings.Cut(key, "/")
				want, err := os.ReadFile(filepath.Join(srcs[ds], rel))
				if err != nil || !bytes.Equal(body, want) {
					t.Fatalf("epoch %d batch %d: member %s (key %s) differs from %s's %s: %v", e, b, hdr.Name, key, ds, rel, err)
				}
				if !strings.HasPrefix(hdr.Name, ds+"/") {
					t.Fatalf("member %s of key %s does not carry its dataset", hdr.Name, key)
				}
				per[ds]++
				if ds == "code" {
					codeSeen[rel]++
				}
			}
			if i != batch {
				t.Fatalf("epoch %d batch %d: %d samples, want %d", e, b, i, batch)
			}
			for ds, w := range weights {
				lo, hi := int(math.Floor(batch*w)), int(math.Ceil(batch*w))
				if per[ds] < lo || per[ds] > hi {
					t.Fatalf("epoch %d batch %d holds %d of %s, want %d..%d (%v)", e, b, per[ds], ds, lo, hi, per)
				}
			}
		}
		// code has 40 samples and 0.2 of 460 slots: all of them, recycled.
		if len(codeSeen) != 40 {
			t.Fatalf("epoch %d: %d distinct samples of code read, want all 40 (recycled)", e, len(codeSeen))
		}
	}
	// samples/<dataset>/<class>/<file>
	n := 0
	for ds, src := range srcs {
		filepath.Walk(src, func(p string, fi os.FileInfo, err error) error {
			if err != nil || fi.IsDir() {
				return err
			}
			rel, _ := filepath.Rel(src, p)
			got, err := os.ReadFile(filepath.Join(mnt, "samples", ds, rel))
			want, _ := os.ReadFile(p)
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("samples/%s/%s: %v (equal %v)", ds, rel, err, bytes.Equal(got, want))
			}
			n++
			return nil
		})
	}
	if n != 460 {
		t.Fatalf("%d sample files compared, want 460", n)
	}
	ents, _ := os.ReadDir(filepath.Join(mnt, "samples"))
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if strings.Join(names, ",") != "books,code,web" { // os.ReadDir sorts
		t.Fatalf("samples/ lists %v, want the datasets web, books, code", names)
	}
}
