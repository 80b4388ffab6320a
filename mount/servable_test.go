package mount

import (
	"math"
	"strings"
	"testing"

	"github.com/shardfs/shardfs/layout"
)

// Issue 30: the order past 2^31 samples is exact, but the read path's
// cache names a sample in 31 bits; a mount of more refuses, naming the
// count, rather than let two samples share a cache key.
func TestMountRefusesPastCacheRange(t *testing.T) {
	small, err := layout.NewEvenCountInput([]int{math.MaxInt32 - 1, 1}, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkServable("ds", small); err != nil {
		t.Fatalf("2^31-1 samples: %v", err)
	}
	big, err := layout.NewEvenCountInput([]int{math.MaxInt32, 1}, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkServable("ds", big); err == nil || !strings.Contains(err.Error(), "ds has 2147483648 samples: a mount serves at most 2147483647") {
		t.Fatalf("2^31 samples: %v", err)
	}
}
