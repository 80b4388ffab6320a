package repository_test

import (
	"bytes"
	"context"
	"fmt"
	"github.com/shardfs/shardfs/erasure"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/ingest"
	"github.com/shardfs/shardfs/internal/synth"
	"github.com/shardfs/shardfs/repository"
)

// TestReadRangeWholeSamplesAndFallback reads runs of whole samples (exact
// reads verified by sample checksums), partial ranges (block-verified), and
// the same after corrupting every fragment on one store.
func TestReadRangeWholeSamplesAndFallback(t *testing.T) {
	ctx := context.Background()
	base := t.TempDir()
	src := filepath.Join(base, "src")
	if _, err := synth.Write(src, synth.Spec{Counts: []int{60, 30, 10}, MinSize: 1000, MaxSize: 9000, Seed: 4}); err != nil {
		t.Fatal(err)
	}
	var stores []backend.Store
	for i := 0; i < 6; i++ {
		s, _ := backend.NewLocal(filepath.Join(base, fmt.Sprint("s", i)))
		stores = append(stores, s)
	}
	source, err := ingest.Scan(src, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ingest.Run(ctx, source, ingest.Options{Name: "ds", Stores: stores, Data: 4, Parity: 2, ShardSize: 200_000, BlockSize: 4096}); err != nil {
		t.Fatal(err)
	}
	check := func(label string, damaged int) {
		ds, err := repository.Open(ctx, stores, "ds", repository.Options{})
		if err != nil {
			t.Fatal(err)
		}
		m := ds.Manifest
		for sh := range m.Shards {
			first := m.Shards[sh].FirstSample
			last := first + m.Shards[sh].NumSamples
			var shard []byte
			for i := first; i < last; i++ {
				b, _ := os.ReadFile(filepath.Join(src, m.Samples.Key(i)))
				shard = append(shard, b...)
			}
			for _, rg := range [][2]int{{first, first + 1}, {first, last}, {first + 2, first + 5}} {
				off := int64(m.Samples.Offset[rg[0]])
				end := int64(m.Shards[sh].Size)
				if rg[1] < last {
					end = int64(m.Samples.Offset[rg[1]])
				}
				got, err := ds.ReadRange(ctx, sh, off, end-off)
				if !served(err, sh, damaged) || !bytes.Equal(got, shard[off:end]) {
					t.Fatalf("%s: shard %d samples %v: err %v", label, sh, rg, err)
				}
			}
			// A range that cuts samples goes through the block path.
			got, err := ds.ReadRange(ctx, sh, 17, 5000)
			if !served(err, sh, damaged) || !bytes.Equal(got, shard[17:5017]) {
				t.Fatalf("%s: shard %d partial range: %v", label, sh, err)
			}
		}
	}
	check("healthy", -1)
	// Corrupt every fragment on store 2 in place (same size): exact reads now
	// fail their sample checksums when they touch it and must fall back.
	filepath.Walk(filepath.Join(base, "s2", "ds", "data"), func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() && fi.Size() > 0 {
			b, _ := os.ReadFile(p)
			for i := 0; i < len(b); i += 97 {
				b[i] ^= 0x5a
			}
			os.WriteFile(p, b, 0o644)
		}
		return nil
	})
	check("store 2 corrupt", 2)
}

// served reports whether a read of shard served every byte: err is nil, or
// a HealNeeded for that shard naming the damaged store alone.
func served(err error, shard, damaged int) bool {
	h := erasure.Heal(err)
	return err == nil || h != nil && h.Shard == shard && slices.Equal(h.Stores, []int{damaged})
}
