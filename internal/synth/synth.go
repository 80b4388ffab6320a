// Package synth writes deterministic, imbalanced, labelled datasets as
// ImageFolder trees, for the demo, tests and benchmarks.
package synth

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"

	"github.com/shardfs/shardfs/manifest"
)

// Spec describes a dataset: Counts[i] samples in class i, each of a size
// drawn uniformly from [MinSize, MaxSize].
type Spec struct {
	Counts           []int
	MinSize, MaxSize int
	Seed             uint64
	// Tag starts every file name, so that two specs written as two sources
	// (a dataset and an append to it) name their samples apart.
	Tag string
}

// Demo is the demo dataset: 10 classes from 400 down to 8 samples, about 50 MB.
var Demo = Spec{Counts: []int{400, 260, 170, 110, 70, 45, 30, 20, 12, 8}, MinSize: 20_000, MaxSize: 70_000, Seed: 1}

// Imbalanced returns a spec of n samples in nClasses classes whose sizes fall geometrically by ratio.
func Imbalanced(n, nClasses int, ratio float64, minSize, maxSize int, seed uint64) Spec {
	w, sum := make([]float64, nClasses), 0.0
	for i := range w {
		w[i] = 1
		for j := 0; j < i; j++ {
			w[i] *= ratio
		}
		sum += w[i]
	}
	s := Spec{MinSize: minSize, MaxSize: maxSize, Seed: seed}
	left := n
	for i := range w {
		c := max(1, int(float64(n)*w[i]/sum))
		if i == nClasses-1 || c > left-(nClasses-1-i) {
			c = max(1, left-(nClasses-1-i))
		}
		s.Counts = append(s.Counts, c)
		left -= c
	}
	return s
}

// ClassName is the directory name of class i.
func ClassName(i int) string { return fmt.Sprintf("class%02d", i) }

// Write creates dir/<class>/<sample> files and returns the total bytes.
func Write(dir string, s Spec) (int64, error) {
	rng := rand.New(rand.NewPCG(s.Seed, 42))
	var total int64
	for c, n := range s.Counts {
		cdir := filepath.Join(dir, ClassName(c))
		if err := os.MkdirAll(cdir, 0o755); err != nil {
			return 0, err
		}
		for i := 0; i < n; i++ {
			size := s.MinSize + rng.IntN(s.MaxSize-s.MinSize+1)
			b := make([]byte, size)
			for j := 0; j+8 <= len(b); j += 8 {
				v := rng.Uint64()
				for k := 0; k < 8; k++ {
					b[j+k] = byte(v >> (8 * k))
				}
			}
			name := filepath.Join(cdir, fmt.Sprintf("%s%s_%05d.bin", s.Tag, ClassName(c), i))
			if err := os.WriteFile(name, b, 0o644); err != nil {
				return 0, err
			}
			total += int64(size)
		}
	}
	return total, nil
}

// BigTop is a format-2 top-level manifest of n samples in the given shards
// and strata, each shard holding its share of every stratum, samples of
// 100 kB: issue 13's scale, without a row per sample.
func BigTop(n, shards, strata int) *manifest.Top {
	t := &manifest.Top{Header: manifest.Header{Name: "big", IngestID: "x", Data: 4, Parity: 2, BlockSize: 64 << 10, ShardSize: 1 << 30,
		Stores: []string{"s0", "s1", "s2", "s3", "s4", "s5"}, LabelFields: []string{"label"}}}
	for c := 0; c < strata; c++ {
		name := fmt.Sprintf("class%04d", c)
		t.Strata = append(t.Strata, manifest.Stratum{Name: name, Labels: []string{name}})
	}
	row := make([]int, strata)
	left := n
	for s := 0; s < shards; s++ {
		size := left / (shards - s)
		left -= size
		for c := range row {
			row[c] = size / strata
			if c < size%strata {
				row[c]++
			}
		}
		t.Shards = append(t.Shards, manifest.TopShard{Size: int64(size) * 100_000, NumSamples: size, IndexSize: int64(size) * 40, IndexSum: uint32(s)})
		t.SetCounts(s, row)
	}
	return t
}

// SkewedTop is a format-2 top-level manifest of the given shards and
// strata whose per-shard counts are drawn at random, skewed toward the
// low strata and often zero (no index behind it).
func SkewedTop(seed uint64, shards, strata int) *manifest.Top {
	rng := rand.New(rand.NewPCG(seed, 0x736b6577))
	t := &manifest.Top{Header: manifest.Header{Name: "skewed", IngestID: "x", Data: 2, Parity: 1, BlockSize: 64 << 10, ShardSize: 1 << 30,
		Stores: []string{"s0", "s1", "s2"}, LabelFields: []string{"label"}}}
	for c := 0; c < strata; c++ {
		name := fmt.Sprintf("class%04d", c)
		t.Strata = append(t.Strata, manifest.Stratum{Name: name, Labels: []string{name}, Count: 0})
	}
	row := make([]int, strata)
	for s := 0; s < shards; s++ {
		n := 0
		for c := range row {
			row[c] = 0
			if rng.IntN(3) > 0 {
				row[c] = rng.IntN(1 + 60/(c+1))
			}
			n += row[c]
			t.Strata[c].Count += row[c]
		}
		t.Shards = append(t.Shards, manifest.TopShard{Size: int64(n)*1000 + int64(rng.IntN(100)), NumSamples: n, IndexSize: int64(n)*40 + 64, IndexSum: rng.Uint32()})
		t.SetCounts(s, row)
	}
	return t
}
