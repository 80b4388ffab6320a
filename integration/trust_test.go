package integration

import (
	"strings"
	"testing"
	"time"
)

// Issue 23 item 3: sizes that come straight from a flag are bounded before
// anything is allocated (each of these took gigabytes, or the process).
func TestFlagsCannotAskForUnboundedMemory(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"every rank of a huge world", []string{"--world-size=2000000000", "--rank=all", "--tail=pad"}, "at most 65536"},
		{"a huge range of ranks", []string{"--world-size=2000000000", "--rank=0-1999999999"}, "more than 65536 ranks"},
		{"a padded batch larger than the epoch", []string{"--world-size=4", "--batch-size=2000000000", "--tail=pad"}, "--batch-size 2000000000 is larger than an epoch"},
		{"an epoch size past int32", []string{"--epoch-size=3000000000"}, "epoch size 3000000000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := run(t, time.Minute, []string{"GOMEMLIMIT=1GiB"}, append([]string{"plan", "--synthetic=1000"}, tc.args...)...)
			if r.code != 1 || !strings.Contains(r.stderr, tc.want) || strings.Contains(r.stderr, "goroutine") {
				t.Fatalf("want exit 1 naming %q, no panic: %v", tc.want, r)
			}
		})
	}
}
