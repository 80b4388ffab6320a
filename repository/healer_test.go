package repository

import "testing"

func TestParseHint(t *testing.T) {
	for _, c := range []struct {
		in    string
		id    string
		shard int
		ok    bool
	}{
		{"20261127T044411Z-5a2803b6.00000012", "20261127T044411Z-5a2803b6", 12, true},
		{"a.b.00000003", "a.b", 3, true},
		{"noshard", "", 0, false},
		{".00000001", "", 0, false},
		{"x.-1", "", 0, false},
	} {
		id, shard, ok := parseHint(c.in)
		if ok != c.ok || ok && (id != c.id || shard != c.shard) {
			t.Errorf("parseHint(%q) = %q, %d, %v; want %q, %d, %v", c.in, id, shard, ok, c.id, c.shard, c.ok)
		}
	}
}
