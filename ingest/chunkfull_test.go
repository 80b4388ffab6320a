package ingest

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestChunksCarryFewRecords: a chunk of small records ends just past a
// whole number of shards, so that the part-full shard it carries to the
// next chunk holds a few records, for records of any size a chunk of
// streamChunkRecords leaves under readWindow. Ending at streamChunkRecords
// itself, 8,192 records of 126 bytes (1.97 shards of 512 KiB) carried a
// shard 99% full, 4,000 records, from every chunk to the next.
func TestChunksCarryFewRecords(t *testing.T) {
	const shardSize = 512 << 10
	for _, c := range []struct {
		name   string
		lo, hi int
	}{{"126 bytes", 126, 126}, {"60 to 140 bytes", 60, 140}, {"1 to 200 bytes", 1, 200}, {"200 to 255 bytes", 200, 255}, {"2 to 60 bytes", 2, 60}} {
		t.Run(c.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(c.lo), uint64(c.hi)))
			var items []Item
			var bytes int64
			for !chunkFull(len(items), bytes, shardSize) {
				size := int64(c.lo + rng.IntN(c.hi-c.lo+1))
				items = append(items, Item{Key: fmt.Sprint(len(items)), Size: size})
				bytes += size
			}
			order := make([]int, len(items))
			for i := range order {
				order[i] = i
			}
			rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
			shards := cutShards(items, order, shardSize)
			last := shards[len(shards)-1]
			var lastBytes int64
			for _, i := range last {
				lastBytes += items[i].Size
			}
			if len(shards) < 2 || len(last) > 64 || lastBytes > shardSize/8 {
				t.Fatalf("a chunk of %d records, %d bytes, cut into %d shards, carries %d records (%d bytes) in its part-full last: want at most 64", len(items), bytes, len(shards), len(last), lastBytes)
			}
		})
	}
}
