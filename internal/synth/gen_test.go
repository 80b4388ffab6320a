package synth

import (
	"os"
	"strconv"
	"testing"
)

// TestWriteFromEnv writes a dataset when SYNTH_DIR is set (a helper for docs
// and benchmarks: SYNTH_DIR=/tmp/train SYNTH_N=20000 go test -run TestWriteFromEnv ./internal/synth).
func TestWriteFromEnv(t *testing.T) {
	dir := os.Getenv("SYNTH_DIR")
	if dir == "" {
		t.Skip("SYNTH_DIR not set")
	}
	n, _ := strconv.Atoi(os.Getenv("SYNTH_N"))
	if n == 0 {
		n = 20000
	}
	total, err := Write(dir, Imbalanced(n, 10, 0.7, 20_000, 80_000, 11))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %d bytes", total)
}

func TestImbalancedSums(t *testing.T) {
	for _, n := range []int{10, 1000, 20000} {
		s := Imbalanced(n, 10, 0.7, 1, 2, 1)
		sum := 0
		for _, c := range s.Counts {
			if c < 1 {
				t.Fatalf("empty class in %v", s.Counts)
			}
			sum += c
		}
		if sum != n {
			t.Fatalf("n=%d: counts %v sum to %d", n, s.Counts, sum)
		}
	}
}
