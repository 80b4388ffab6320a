package synthetic

import (
	"math"
	"testing"

	"github.com/shardfs/shardfs/manifest"
)

func TestShareSumsToOne(t *testing.T) {
	for _, buckets := range []int{0, 4} {
		sum := 0.0
		for _, x := range Share(buckets) {
			sum += x
		}
		if math.Abs(sum-1) > 1e-9 || len(Share(buckets)) != len(Header(buckets).Strata) {
			t.Errorf("buckets %d: %d shares summing to %v for %d strata", buckets, len(Share(buckets)), sum, len(Header(buckets).Strata))
		}
	}
}

func TestManifestHoldsEverySample(t *testing.T) {
	m, err := Manifest(20_000, 3)
	if err != nil {
		t.Fatal(err)
	}
	if m.Samples.Len() != 20_000 || len(m.Strata) != 300 {
		t.Fatalf("%d samples in %d strata, want 20000 in 300", m.Samples.Len(), len(m.Strata))
	}
	again, _ := Manifest(20_000, 3)
	for i := range 20_000 {
		if m.Samples.Key(i) != again.Samples.Key(i) || m.Samples.Size[i] != again.Samples.Size[i] {
			t.Fatalf("sample %d differs between two runs", i)
		}
	}
}

// Describe's groups hold every stratum's count, spread over the shards,
// and the root checks each group object it was handed.
func TestDescribeSpreadsCountsEvenly(t *testing.T) {
	h := Header(0)
	h.IngestID = "synthetic"
	counts := make([]int, len(h.Strata))
	n := 0
	for c := range counts {
		counts[c] = 1000 + 37*c
		n += counts[c]
	}
	const shards = 2*manifest.DefaultGroupShards + 5
	objects := map[int][]byte{}
	root, err := Describe(h, counts, shards, func(g int, b []byte) error { objects[g] = b; return nil })
	if err != nil {
		t.Fatal(err)
	}
	if root.NumShards() != shards || root.Samples() != int64(n) || len(objects) != 3 {
		t.Fatalf("root of %d shards, %d samples, %d groups handed; want %d, %d, 3", root.NumShards(), root.Samples(), len(objects), shards, n)
	}
	got := make([]int, len(counts))
	row := make([]int, len(counts))
	for g := range root.Groups {
		root.GroupCounts(g, row)
		for c, k := range row {
			got[c] += k
		}
	}
	for c := range counts {
		if got[c] != counts[c] {
			t.Errorf("stratum %d: %d samples in the groups, want %d", c, got[c], counts[c])
		}
	}
	for g, b := range objects {
		if _, err := manifest.DecodeGroup(b, root, g); err != nil {
			t.Errorf("group %d: %v", g, err)
		}
	}
}
