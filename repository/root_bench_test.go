package repository

import (
	"context"
	"testing"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/internal/synth"
	"github.com/shardfs/shardfs/layout"
	"github.com/shardfs/shardfs/manifest"
)

// BenchmarkGroupLocate: fetch, check and decode one group object of 1,024
// shards in 100 strata, and locate 170 samples in it (a rank of W=16,384
// at 10 billion samples locates about 42 a group; W=4,096 at 1 billion,
// about 170). The rank's start pays this once per group.
func BenchmarkGroupLocate(b *testing.B) {
	top := synth.BigTop(1024*671, 1024, 100)
	root, objs, err := manifest.RootOf(top, 1024)
	if err != nil {
		b.Fatal(err)
	}
	st, err := backend.NewLocal(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if err := st.Put(ctx, GroupKey(root.Name, root.IngestID, 0), objs[0]); err != nil {
		b.Fatal(err)
	}
	in, err := RootInput(root)
	if err != nil {
		b.Fatal(err)
	}
	var samples layout.Positions
	for i := range 170 {
		samples.Append(int64(i) * 4041)
	}
	b.SetBytes(int64(len(objs[0])))
	b.ReportAllocs()
	for b.Loop() {
		gr, err := NewGroupReader(root, in, []backend.Store{st}, 2)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := gr.LocateAll(ctx, samples, 1, nil, nil); err != nil || gr.Fetches.Load() != 1 {
			b.Fatalf("%v, %d fetches", err, gr.Fetches.Load())
		}
	}
}
