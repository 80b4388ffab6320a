package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// Issue 13: above 10M samples, plan --synthetic models per-shard class
// counts only and computes the order of order version 2 from them. The
// rows it prints follow from the sizes: 12,000,000 samples, B=256, W=64
// gives ⌊12e6/256/64⌋ = 732 batches of 256 per rank, and the stratified
// order stays far closer to the class mix than a uniform shuffle.
func TestPlanFromClassCounts(t *testing.T) {
	r := run(t, 2*time.Minute, nil, "plan", "--synthetic=12000000", "--world-size=64", "--batch-size=256", "--rank=0-1")
	if r.code != 0 {
		t.Fatalf("plan: %v", r)
	}
	if !strings.Contains(r.stdout, "12000000 samples, 100 classes, 17884 shards of 671 samples (class counts per shard only") {
		t.Fatalf("plan did not take the counts-only path:\n%s", r.stdout)
	}
	rows := 0
	for _, line := range strings.Split(r.stdout, "\n") {
		f := strings.Fields(line)
		if len(f) < 9 || f[0] != "0" {
			continue
		}
		rows++
		if f[2] != "732" || f[3] != fmt.Sprint(732*256) {
			t.Fatalf("rank %s: %s batches, %s samples; want 732 and %d:\n%s", f[1], f[2], f[3], 732*256, r.stdout)
		}
		var tv, uni float64
		fmt.Sscan(f[4], &tv)
		fmt.Sscan(f[6], &uni)
		if tv <= 0 || tv*2 > uni {
			t.Fatalf("rank %s: TV %v against a uniform shuffle's %v: the order is not stratified:\n%s", f[1], tv, uni, r.stdout)
		}
	}
	if rows != 2 {
		t.Fatalf("%d order rows for --rank=0-1:\n%s", rows, r.stdout)
	}
	for _, bad := range [][]string{
		{"plan", "--synthetic=12000000", "--window=4"},
		{"plan", "--synthetic=12000000", "--order-version=1"},
		{"plan", "--synthetic=12000000", "--emit=index"},
	} {
		if r := run(t, time.Minute, nil, bad...); r.code == 0 || !strings.Contains(r.stderr, "--synthetic") {
			t.Errorf("%v: want a refusal naming --synthetic: %v", bad, r)
		}
	}
}
