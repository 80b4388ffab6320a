package ingest

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardfs/shardfs/internal/busy"
)

// The commit's checks of shards hold at most their budget of weight at
// once (the indexes' bytes, in checkIndexes), however many shards run at
// once and whatever their weights; a shard heavier than the whole budget
// runs alone, and every shard is checked. With every core busy and
// GOMAXPROCS 16, so that the 32 goroutines run in parallel. Before the
// bound, 32 shards' indexes were checked at once whatever their size:
// 32 × every copy of a 13 MB index is over a GB.
func TestCheckShardsHoldAtMostTheirBudget(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(16))
	busy.Burn(t, runtime.NumCPU())
	const budget = 100
	weights := []int64{10, 40, 40, 40, 1, 1, 1, 1, 250, 30, 30, 30, 30, 99, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 60, 60, 0}
	var mu sync.Mutex
	var now, most int64
	checked := map[int]int{}
	heavyAlone := false
	err := checkShards(context.Background(), "ds", 0, len(weights), 1, func(int) int { return 0 }, "checked",
		func(si int) int64 { return weights[si] }, budget,
		func(ctx context.Context, si int) []string {
			w := min(weights[si], budget)
			mu.Lock()
			now += w
			most = max(most, now)
			if weights[si] > budget {
				heavyAlone = now == budget
			}
			checked[si]++
			mu.Unlock()
			time.Sleep(time.Millisecond)
			mu.Lock()
			now -= w
			mu.Unlock()
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
	if most > budget {
		t.Fatalf("checks held %d of weight at once, budget %d", most, budget)
	}
	if !heavyAlone {
		t.Fatal("the shard heavier than the budget did not run alone")
	}
	for si := range weights {
		if checked[si] != 1 {
			t.Fatalf("shard %d checked %d times", si, checked[si])
		}
	}
	// A problem still names the part to rerun.
	err = checkShards(context.Background(), "ds", 0, 4, 2, func(si int) int { return si / 2 }, "indexes are missing",
		func(int) int64 { return 1 }, budget,
		func(ctx context.Context, si int) []string {
			if si == 3 {
				return []string{"shard 3's index is intact on 0 stores"}
			}
			return nil
		})
	if err == nil || !strings.Contains(err.Error(), "--part 1/2") || strings.Contains(err.Error(), "0/2") {
		t.Fatalf("a missing index: %v", err)
	}
}
