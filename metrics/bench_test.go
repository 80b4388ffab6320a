package metrics

import (
	"testing"
	"time"

	"github.com/shardfs/shardfs/erasure"
)

// benchReadPath is what the metrics cost the read path, per byte served:
// each op is one 128 KiB FUSE read (its op time, its rank's wait, the
// served counters) and the GETs of getBytes each that fetched its bytes
// (first byte and whole time, the shard's bytes, the anomaly ring). Its
// MB/s against the daemon's GB per CPU second in the bench (the inverse of
// CPU s per GB) is the share of the daemon's CPU the metrics take.
func benchReadPath(b *testing.B, getBytes int) {
	m := New([]string{"s0", "s1", "s2", "s3", "s4", "s5"})
	read := m.FuseOp("read")
	const size = 128 << 10
	gets := max(1, size/getBytes) // GETs per read, or reads per GET below
	every := max(1, getBytes/size)
	ranks := make([]*RankCounters, 8) // held by each open file's handle, as the read path does
	for r := range ranks {
		ranks[r] = m.Rank(r)
	}
	b.SetBytes(size)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			read(40 * time.Microsecond)
			m.Reads.Add(1)
			m.BytesServed.Add(size)
			ranks[i%8].ReadWait(0)
			if i%every == 0 {
				for g := range gets {
					m.BackendRead((i+g)%6, (i+g)%200, getBytes, 20*time.Millisecond, 15*time.Millisecond, erasure.ReadDemand, nil)
				}
			}
			i++
		}
	})
}

// Window mode: GETs of about 2 MiB.
func BenchmarkReadPathPerGB_window(b *testing.B) { benchReadPath(b, 2<<20) }

// Global order: a GET per fragment of each sample, about 25 kB (100 kB
// samples over 4 data fragments).
func BenchmarkReadPathPerGB_global(b *testing.B) { benchReadPath(b, 25_000) }
