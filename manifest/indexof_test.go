package manifest

import (
	"bytes"
	"testing"
)

// EncodeShardIndexOf writes, byte for byte, what EncodeIndex writes of
// ShardIndexOf with the shard renumbered, for every shard of plain,
// fields and records manifests (and records with fields).
func TestEncodeShardIndexOfIsEncodeIndex(t *testing.T) {
	for _, c := range []struct {
		name string
		m    *Manifest
	}{
		{"plain", stratumByStratum(synthetic(300, 4, 50, 9))},
		{"fields", withFields(stratumByStratum(synthetic(300, 4, 50, 9)))},
		{"records", withRecords(stratumByStratum(synthetic(40, 3, 5, 1)))},
		{"records and fields", withFields(withRecords(stratumByStratum(synthetic(40, 3, 5, 1))))},
	} {
		t.Run(c.name, func(t *testing.T) {
			if len(c.m.Shards) < 2 {
				t.Fatalf("%d shards: the test wants several", len(c.m.Shards))
			}
			for si := range c.m.Shards {
				x := ShardIndexOf(c.m, si)
				x.Shard += 1000
				want, err := EncodeIndex(x)
				if err != nil {
					t.Fatal(err)
				}
				got, err := EncodeShardIndexOf(c.m, si, x.Shard)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("shard %d: EncodeShardIndexOf wrote %d bytes, EncodeIndex of ShardIndexOf %d, not the same", si, len(got), len(want))
				}
			}
		})
	}
}
