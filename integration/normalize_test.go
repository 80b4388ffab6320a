package integration

import "testing"

// TestNormalizeDurations: the README's outputs match the run's with their
// durations in any unit, and a count is never taken for a duration.
func TestNormalizeDurations(t *testing.T) {
	for _, c := range [][2]string{
		{"  59 KiB of samples, 88 KiB stored (1.50x), 0.4 MB/s, 158ms", "  59 KiB of samples, 88 KiB stored (1.50x), 0.1 MB/s, 1.178s"},
		{"took 2m3.5s", "took 950µs"},
	} {
		if normalize(c[0]) != normalize(c[1]) {
			t.Errorf("%q -> %q, %q -> %q", c[0], normalize(c[0]), c[1], normalize(c[1]))
		}
	}
	if normalize("3 stores") == normalize("3s stores") {
		t.Error("a count and a duration normalise alike")
	}
}
