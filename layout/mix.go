package layout

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// Mixing several datasets in one order: each stratum belongs to a group (a
// dataset), and Params.Mix weights the groups. Every batch then holds group g
// in ⌊B·w_g⌋..⌈B·w_g⌉ and, within a group, its classes by π_c ∝ n_c^α among
// the group's classes. It works as the single-dataset order does, with two
// changes: the slots of a cycle are apportioned to groups first, then to the
// classes of each group; and the chain that deals the strata's extras over
// the batches lays each group's strata next to each other, so a group's
// extras fill a contiguous cyclic stretch of batches and no batch gets more
// than one more of a group than another. A group that runs out within an
// epoch is drawn again in a new permutation, as α < 1 recycles classes.

// SetGroups assigns stratum c to group group[c] (0..numGroups-1), for mixing.
func (in *Input) SetGroups(group []int, numGroups int) error {
	if len(group) != in.NumStrata {
		return fmt.Errorf("%d group entries for %d strata", len(group), in.NumStrata)
	}
	seen := make([]bool, numGroups)
	for c, g := range group {
		if g < 0 || g >= numGroups {
			return fmt.Errorf("stratum %d: group %d out of 0..%d", c, g, numGroups-1)
		}
		if in.Count(c) > 0 {
			seen[g] = true
		}
	}
	for g, ok := range seen {
		if !ok {
			return fmt.Errorf("group %d has no samples", g)
		}
	}
	in.Group, in.NumGroups = slices.Clone(group), numGroups
	return nil
}

// validateMix checks p.Mix against in's groups.
func validateMix(in *Input, p Params) error {
	if p.Mix == nil {
		return nil
	}
	switch {
	case in.NumGroups == 0:
		return errors.New("a mix needs the strata's datasets (Input.SetGroups)")
	case len(p.Mix) != in.NumGroups:
		return fmt.Errorf("%d mix weights for %d datasets", len(p.Mix), in.NumGroups)
	case p.Window > 0 || p.Affinity:
		return errors.New("a mix of datasets is dealt over the global order: leave out --window and --affinity")
	}
	sum := 0.0
	for g, w := range p.Mix {
		if !(w > 0) || math.IsInf(w, 0) {
			return fmt.Errorf("mix weight %v of dataset %d: must be a finite number > 0", w, g)
		}
		sum += w
	}
	if math.IsInf(sum, 0) {
		return fmt.Errorf("mix weights %v: their sum overflows; scale them down", p.Mix)
	}
	return nil
}

// apportionMix splits total slots over groups by their weights, then each
// group's slots over its strata by π_c ∝ n_c^α within the group.
func apportionMix(in *Input, mix []float64, alpha float64, total int) []int {
	perGroup := apportionFloat(total, MixShares(mix))
	counts := make([]int, in.NumStrata)
	for g := range mix {
		var strata, n []int
		for c := 0; c < in.NumStrata; c++ {
			if in.Group[c] == g {
				strata = append(strata, c)
				n = append(n, in.Count(c))
			}
		}
		var share []int
		switch alpha {
		case 1:
			share = apportionInt(perGroup[g], n)
		case 0:
			for i := range n {
				n[i] = min(n[i], 1)
			}
			share = apportionInt(perGroup[g], n)
		default:
			pi := make([]float64, len(n))
			s := 0.0
			for i, x := range n {
				if x > 0 {
					pi[i] = math.Pow(float64(x), alpha)
					s += pi[i]
				}
			}
			for i := range pi {
				pi[i] /= s
			}
			share = apportionFloat(perGroup[g], pi)
		}
		for i, c := range strata {
			counts[c] = share[i]
		}
	}
	return counts
}

// groupedChain is the order in which the arrangement chains the strata's
// extras: groups in a shuffled order, each group's strata together, shuffled
// within the group.
func groupedChain(active []int, group []int, numGroups int, rng *rand.Rand) []int {
	groups := make([]int, numGroups)
	for g := range groups {
		groups[g] = g
	}
	rng.Shuffle(len(groups), func(i, j int) { groups[i], groups[j] = groups[j], groups[i] })
	var chain []int
	for _, g := range groups {
		start := len(chain)
		for _, c := range active {
			if group[c] == g {
				chain = append(chain, c)
			}
		}
		part := chain[start:]
		rng.Shuffle(len(part), func(i, j int) { part[i], part[j] = part[j], part[i] })
	}
	return chain
}

// MixTargets is each stratum's share of a batch under the mix: w_g·π_c|g.
func MixTargets(in *Input, mix []float64, alpha float64) []float64 {
	out := make([]float64, in.NumStrata)
	sum := 0.0
	for _, w := range mix {
		sum += w
	}
	for g, w := range mix {
		var s float64
		for c := 0; c < in.NumStrata; c++ {
			if in.Group[c] == g && in.Count(c) > 0 {
				s += math.Pow(float64(in.Count(c)), alpha)
			}
		}
		for c := 0; c < in.NumStrata; c++ {
			if in.Group[c] == g && in.Count(c) > 0 {
				out[c] = w / sum * math.Pow(float64(in.Count(c)), alpha) / s
			}
		}
	}
	return out
}

// MixShares is each dataset's share of a mix: its weight over their sum.
func MixShares(mix []float64) []float64 {
	sum := 0.0
	for _, w := range mix {
		sum += w
	}
	out := make([]float64, len(mix))
	for i, w := range mix {
		out[i] = w / sum
	}
	return out
}
