// Package synthetic makes the synthetic datasets plan --synthetic plans
// at scales no one ingests to try: their strata and class mix, an
// in-memory manifest sample by sample, and a format-3 description (root
// and group objects, counts only) as a node of such a dataset reads it.
// It is pure: the CLI writes the description where it is asked to.
package synthetic

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/shardfs/shardfs/manifest"
)

// SampleBytes is the size of a sample of a description: 100 kB, so that a
// 64 MiB shard holds about 671.
const SampleBytes = 100_000

// Share is the synthetic datasets' class mix: class c about
// e^(-c/14) of the samples, the tail lumped into the last of 100 classes
// (what Manifest draws sample by sample).
func Share(buckets int) []float64 {
	const nStrata = 100
	pi := make([]float64, nStrata)
	q := math.Exp(-1.0 / 14)
	for c := range pi {
		pi[c] = math.Pow(q, float64(c)) * (1 - q)
	}
	pi[nStrata-1] = math.Pow(q, nStrata-1)
	if buckets == 0 {
		return pi
	}
	// Each class cut into time buckets, each 10% larger than the one before.
	t := make([]float64, buckets)
	sum := 0.0
	for b := range t {
		t[b] = math.Pow(1.1, float64(b))
		sum += t[b]
	}
	out := make([]float64, 0, nStrata*buckets)
	for _, x := range pi {
		for _, y := range t {
			out = append(out, x*y/sum)
		}
	}
	return out
}

// Header names the synthetic strata: 100 classes, each cut into
// buckets 30-day time buckets ending with the one that starts 2026-01-01
// (none: classes alone).
func Header(buckets int) manifest.Header {
	h := manifest.Header{Name: "synthetic", LabelFields: []string{"label"}}
	const nClasses, width = 100, 30 * 86400
	if buckets > 0 {
		h.LabelFields = append(h.LabelFields, "time")
		h.Derived = []manifest.Derived{{Field: "time", Width: width}}
	}
	last := manifest.BucketStart(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Unix(), width)
	for c := 0; c < nClasses; c++ {
		class := fmt.Sprintf("class%03d", c)
		if buckets == 0 {
			h.Strata = append(h.Strata, manifest.Stratum{Name: class, Labels: []string{class}})
			continue
		}
		for b := 0; b < buckets; b++ {
			t := manifest.BucketLabel(last-int64(buckets-1-b)*width, width)
			h.Strata = append(h.Strata, manifest.Stratum{Name: class + "+" + t, Labels: []string{class, t}})
		}
	}
	return h
}

// Manifest builds an imbalanced in-memory manifest of n samples in
// 100 strata (class sizes falling geometrically), 50-150 kB samples, placed
// into 64 MiB shards by stratified round-robin as ingest does.
func Manifest(n, buckets int) (*manifest.Manifest, error) {
	rng := rand.New(rand.NewPCG(1, 2))
	m := &manifest.Manifest{Header: Header(buckets)}
	m.Name, m.Data, m.Parity, m.BlockSize, m.ShardSize = fmt.Sprintf("synthetic-%d", n), 4, 2, 64<<10, 64<<20
	const nStrata = 100
	var bucketOf func() int
	if buckets > 0 {
		// Bucket b about 1.1^b: the inverse of its cumulative share.
		bucketOf = func() int {
			x := rng.Float64() * (math.Pow(1.1, float64(buckets)) - 1)
			return min(buckets-1, int(math.Log1p(x)/math.Log(1.1)))
		}
	}
	var shard uint32
	var size int64
	for i := 0; i < n; i++ {
		st := uint32(min(nStrata-1, int(-14.0*math.Log(1-rng.Float64()))))
		if buckets > 0 {
			st = st*uint32(buckets) + uint32(bucketOf())
		}
		sz := uint32(50_000 + rng.IntN(100_000))
		if size+int64(sz) > m.ShardSize {
			shard, size = shard+1, 0
		}
		size += int64(sz)
		m.Samples.Append(fmt.Sprintf("%s/%09d.jpg", m.Strata[st].Name, i), st, shard, sz, 0)
	}
	m.Shards = make([]manifest.Shard, shard+1)
	return m, m.Finish()
}

// Describe makes the format-3 description of a dataset of header h whose
// counts[c] samples of stratum c are spread evenly over shards shards, as
// ingest's stratified placement spreads them: its root, and a group object
// per DefaultGroupShards shards, each handed to group as it is encoded, so
// that no more than one is held. Only sizes and counts: no sample, no index.
func Describe(h manifest.Header, counts []int, shards int, group func(g int, b []byte) error) (*manifest.Root, error) {
	root := &manifest.Root{Header: h}
	root.Strata = append([]manifest.Stratum(nil), h.Strata...)
	// before is stratum c's samples in shards below s, as the even model spreads them.
	before := func(s, c int) int64 { return int64(s) * int64(counts[c]) / int64(shards) }
	row, total := make([]int, len(counts)), make([]int64, len(counts))
	q, rem, acc := make([]int, len(counts)), make([]int, len(counts)), make([]int, len(counts))
	for c, n := range counts {
		q[c], rem[c] = n/shards, n%shards
	}
	for first := 0; first < shards; first += manifest.DefaultGroupShards {
		end := min(first+manifest.DefaultGroupShards, shards)
		var samples int64
		for c := range total {
			total[c] = before(end, c) - before(first, c)
			samples += total[c]
		}
		g := len(root.Groups)
		root.AddGroup(manifest.RootGroup{Shards: end - first, Size: samples * SampleBytes}, total)
		x := manifest.NewGroup(root, g)
		for s := first; s < end; s++ {
			n := 0
			for c := range row {
				// ⌊(s+1)·n_c/S⌋ − ⌊s·n_c/S⌋ from a running remainder: no division a shard.
				row[c] = q[c]
				if acc[c] += rem[c]; acc[c] >= shards {
					acc[c] -= shards
					row[c]++
				}
				n += row[c]
			}
			x.AddShard(manifest.TopShard{Size: int64(n) * SampleBytes, IndexSize: int64(n)*40 + 64, IndexSum: uint32(s) * 2654435761}, row)
		}
		b, err := manifest.EncodeGroup(x, root)
		if err != nil {
			return nil, err
		}
		if err := group(g, b); err != nil {
			return nil, err
		}
		root.SetObject(g, b)
	}
	return root, nil
}
