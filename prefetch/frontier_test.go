package prefetch

import (
	"testing"

	"github.com/shardfs/shardfs/cache"
	"github.com/shardfs/shardfs/layout"
	"github.com/shardfs/shardfs/metrics"
)

// The frontier: a member below every open file that no worker has read yet
// is still needed (paced workers close their files between batches), its
// distance counted from the lowest unread member; what lies before the
// first position opened (a resumed job's start) is not.
func TestNextUseCountsFromTheFrontier(t *testing.T) {
	o := &layout.RankOrder{Params: layout.Params{Batch: 2}, Batches: 5, Samples: layout.MakePositions(10)}
	for id := range int64(10) {
		o.Samples.Append(100 + id) // member i reads sample 100+i
	}
	m := layout.NewMembers(o, flatCatalog{})
	s := newStream(&Reader{m: metrics.New(make([]string, 1)), cfg: Config{Disabled: true}}, m)
	h2, h4 := &Handle{}, &Handle{}
	s.open(h2, 2) // a resumed job: its workers opened batches 1 and 2
	s.open(h4, 4)
	if got := s.nextUse(100); got != cache.NoUse {
		t.Fatalf("member 0, before the first position opened: %d, want NoUse", got)
	}
	s.markRead(2)
	s.markRead(3) // batch 1 read to its end
	s.close(h2)   // and its worker between files; batch 2's still open
	if f := s.frontier.Load(); f != 4 {
		t.Fatalf("frontier %d after batch 1 was read, want 4", f)
	}
	if got := s.nextUse(103); got != cache.NoUse {
		t.Fatalf("member 3, read: %d, want NoUse", got)
	}
	s.markRead(4)
	s.markRead(5)
	s.open(&Handle{}, 8) // a fast worker opened batch 4
	s.close(h4)          // batch 2's worker is between files; batch 3 is not opened yet
	if f := s.frontier.Load(); f != 6 {
		t.Fatalf("frontier %d, want 6", f)
	}
	// Below every open file, but not read: needed, from the frontier (it
	// ranked NoUse, and was evicted first, when only open files counted).
	if got, want := s.nextUse(107), m.Offset(7)-m.Offset(6); got != want {
		t.Fatalf("member 7, below every open file, not read: %d, want %d (from the frontier)", got, want)
	}
	if got, want := s.nextUse(109), m.Offset(9)-m.Offset(8); got != want {
		t.Fatalf("member 9, past the open file at 8: %d, want %d", got, want)
	}
}
