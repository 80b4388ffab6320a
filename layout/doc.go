// Package layout owns the order of a training run and the byte layout of
// every virtual file. It is pure: no I/O, no goroutines, no clocks, no map
// iteration in any result. Same inputs, same output, on any machine. The
// one input that is neither a flag nor the data, the trainer's reports
// that --feedback weights epochs from, reaches it as a function a caller
// binds (Feedback.Weights, set by repository.BindFeedback); the rule itself
// (Feedback.Multipliers) is here.
//
// # The global order
//
// For an epoch e the order is a sequence G of batches of exactly B samples.
// G depends on (samples' strata, seed, e, B, α, tail, epoch size, window),
// never on the world size W. Rank r of W takes global batches r, r+W, r+2W,
// ...: its t-th batch is G[t·W+r]. Every rank gets the same number of
// batches T:
//
//	tail=drop: G holds M = ⌊L/B⌋ batches (L = epoch size, default N) and
//	           T = ⌊M/W⌋. The last M−T·W batches and the L−M·B leftover
//	           samples are dropped: fewer than W·B samples, each at most once.
//	tail=pad:  G holds M = ⌈L/B⌉ batches and T = ⌈M/W⌉. Slots past the L
//	           samples are filled by recycling, and batches past M come from
//	           the next cycle of G (the same construction with a new seed).
//	           Every sample appears at least once.
//
// Contract for changing W (resuming with another world size): the
// step-interleaved concatenation of all ranks' batches is exactly the first
// T·W batches of G, and G is the same for every W. With tail=drop, a run
// that changes W mid-epoch continues at global batch N = t·W_old: Params.Skip
// = N deals G[N:] to the new ranks, rank r taking G[N+t·W+r], with
// T' = ⌊(M−N)/W⌋ batches each (pad: ⌈(M−N)/W⌉, the last ones from the next
// cycle of G). The old part plus the new part is then G[0 : N+T'·W]: no
// batch twice, and with drop fewer than W batches of G left out, on top of
// the usual tail. The epochs after it are as usual. Affinity has no G, so it
// resumes only at an epoch boundary.
//
// # Stratification
//
// Targets are π_c ∝ n_c^α: α=1 mirrors the data, α=0 balances the strata,
// values between are temperature sampling. The M·B slots of G are first
// apportioned to strata by largest remainder (exact integer arithmetic for
// α=1), giving n'_c ∈ {⌊M·B·π_c⌋, ⌈M·B·π_c⌉}. Each batch then gets
// q_c = ⌊n'_c/M⌋ samples of stratum c, and the r_c = n'_c mod M extra ones
// are dealt round-robin over the batches, strata in a seeded order, from a
// seeded starting batch. No batch gets two extras of one stratum, so every
// batch holds ⌊B·π_c⌋ or ⌈B·π_c⌉ samples of each stratum c, for every α, and
// the epoch totals are exactly n'_c. The batches are then put in a seeded
// random order and each batch is shuffled, so neither composition nor
// position repeats from one epoch to the next.
//
// Within stratum c, samples are drawn from seeded permutations of its
// members: the first n_c draws are a permutation of all of them; when α<1
// needs more (minority strata recycled), the next permutation follows.
//
// In order version 2 both permutations (the batch order, and each stratum's
// draws) are keyed Feistel permutations with cycle-walking (feistel.go)
// rather than stored shuffles, so the order holds O(1) state per stratum
// and draw cycle and none per sample; strata of at most 1,024 members keep
// a stored seeded shuffle. A stratum's k-th member can then come from
// per-shard counts alone (NewCountInputFunc: samples numbered shard by
// shard, stratum by stratum within a shard), which is what lets a node
// compute the order of a billion samples. Every guarantee above holds for
// both versions; window and affinity orders are the same in both. Order
// version 3 changed rank affinity only (below): every other order of
// version 3 is version 2's.
//
// Order version 4 mends the seam between a stratum's draw cycles: a batch
// takes consecutive draws, so the batch whose draws straddle the end of
// one permutation and the start of the next could hold a member twice (at
// α = 0 a study found 15% of batches did). In version 4 such a batch never
// holds a member twice unless its quota of the stratum exceeds the
// stratum's size (globalCycle.seam holds the rule and its proof). Window
// and affinity orders, and every order without recycling, are version
// 3's.
//
// Order version 5 balances fields, not only strata. When the strata are
// tuples of several fields (Input.SetFields: label × source × bin × time
// bucket), most strata can hold under one sample a batch, and versions
// 1-4's bound ("0 or 1 of each") leaves each field's count per batch no
// closer to its target than a shuffle's. Version 5 apportions the slots
// and deals the extras by controlled rounding over two laminar families
// of the field tuples, halving the batches (marginal.go, rounding.go):
// every batch still holds each stratum within ⌊B·π_c⌋..⌈B·π_c⌉, and also
// each value of the first two fields named, and each pair of their values,
// within ⌊B·π⌋..⌈B·π⌉; the fields after them are bounded (marginal.go
// proves both). Strata of one field, windows, affinity and mixes are
// version 4's.
//
// # Window (locality) mode
//
// With Window=S>0 the shards are put in a seeded order and taken S at a
// time. Each window's samples, plus those the previous window left over,
// form a pool that is arranged into ⌊pool/B⌋ batches exactly as above, using
// the pool's own stratum mix as the target. Since ingest places samples into
// shards by a stratified shuffle, each pool mirrors the dataset, and every
// batch then reads from only S shards, fetched whole. The stratification
// bound holds relative to each pool's mix; α is not applied in window mode.
//
// # Rank affinity
//
// With Affinity the shards are dealt to the W ranks once, by the seed alone
// (a seeded shard order, each shard to the rank with the fewest samples so
// far), so each rank reads the same shards in every epoch and a node's disk
// tier needs only about 1/W of the dataset. Each rank's pool is arranged as
// above against the pool's own class mix: every batch holds ⌊B·π_c⌋ or
// ⌈B·π_c⌉ of stratum c, draws and batch order change every epoch, ranks are
// disjoint, and every rank gets T = min ⌊pool/B⌋ batches (drop) or
// max ⌈pool/B⌉ (pad, recycling). What it trades away: there is no
// W-independent global order (resuming with another W reshuffles which
// shards a rank reads), and a sample only ever meets the samples of its
// rank's shards. Measured by shardfs plan on a synthetic 200,000 samples in
// 100 strata, 299 shards, W=8, B=64: pairs sharing a batch in epoch 0 share
// one again in epoch 1 at 0.00247 with affinity, 0.00032 in the global
// order (a uniform shuffle: (B-1)/(N-1) = 0.00032), about W times more;
// the mean TV per batch from the dataset's mix is 0.1648 against 0.1642.
//
// Order version 3 deals sample ranges instead of shards: rank r's pool is
// samples [⌊r·n/W⌋, ⌊(r+1)·n/W⌋) of every segment of n samples (one
// segment per ingest of the dataset's shards, and per dataset of a mix:
// Input.SetSegments), numbered shard by shard (AffinityRanges). A rank
// then reads one run of shards per segment, and needs the per-shard counts
// of its runs only (Input.SetShardRuns), so its order is computed from
// counts at any size and a format-3 rank reads the group objects of its
// runs only. Ingest's stratified placement makes any run of an ingest's
// shards mirror that ingest's mix, so each pool mirrors the dataset's; the
// pools differ by at most one sample a segment, and T follows from the
// segments' sizes alone. Everything else is as in versions 1 and 2; the
// same measure gives 0.00252 and 0.1650.
//
// # Mixing datasets
//
// With Params.Mix the strata are (dataset, class) pairs, grouped by dataset
// (Input.SetGroups), and the weights w_g apply per dataset: every batch of
// every rank holds dataset g in ⌊B·w_g⌋..⌈B·w_g⌉ (w normalised to sum 1),
// and each class within one of its per-batch share of the cycle, its
// dataset's slots split by π_c ∝ n_c^α among the dataset's classes. A
// dataset drawn more often than it has samples is recycled in a new
// permutation, as α < 1 recycles classes. Elastic resume holds as without a
// mix (G does not depend on W); window and affinity modes are refused with
// a mix. Orders without a mix are unchanged, so the version stays. See
// mix.go and TestMixBounds.
//
// # Time weights and windows
//
// Params.Weights multiply the targets per stratum: π_c ∝ n_c^α·w_c, so
// every guarantee above (the per-batch bound, exact totals, W-independence,
// a new order every epoch) holds for the re-weighted target, and a stratum
// of weight 0 is left out of the epoch, whose size then defaults to the
// samples of the others. Recency (recency.go) computes the weights of a
// dataset cut into time buckets: decay by a half-life, a window of the
// newest buckets, and a window that slides forward by epoch. It is a new
// mode with flags of its own, so the orders of existing flags, and the
// order version, did not change; TestGoldenOrder pins it separately.
// Window and affinity modes, and mixes, refuse weights.
//
// A dataset cut into time buckets groups its strata by bucket
// (Input.SetGroups, as a mix groups datasets): the chain that deals the
// extras lays each bucket's strata together, so a bucket's extras fill a
// contiguous cyclic stretch of batches and every batch holds each bucket
// within one sample of every other batch — every month in every batch once
// its share of a batch reaches one — besides each stratum within
// ⌊B·π_c⌋..⌈B·π_c⌉. Only such datasets (new with time buckets) are grouped,
// so no earlier order changed.
//
// # Positions past 2^31
//
// A sample is named by its position, an int64 (Positions: 4 bytes a
// position while all fit 31 bits, 8 once one does not). Counts-only inputs
// (NewCountInputFunc, NewEvenCountInput) reach 2^62 samples; the per-sample
// columns of NewInput, which window and affinity modes and mixes need,
// stop at 2^31−1. A counts-only input numbers samples unit by unit and,
// within a unit, stratum by stratum: a unit is a shard for format 2's
// top-level manifest, and a group of shards for format 3's root
// (Input.Split names a position's unit, stratum and rank in both). Within a
// unit, stratum c's members are in shard order in both numberings, so the
// two draw the same samples; only the positions' numbers differ. The order
// past 2^31 is pinned by TestGoldenOrderPastTwoBillion.
//
// # Order versions
//
// OrderVersion names this construction. Nodes of one job must compute the
// same order, so any change to which sample lands in which batch, for any
// inputs, is a new version: TestGoldenOrder pins a hash of the order of
// every version this build computes (MinOrderVersion to OrderVersion) for
// fixed inputs, and fails until the version is bumped and the new hash
// recorded. Params.Version selects one (0: the newest); the mount shows it
// in info.json, and a job that started on an older version keeps its order
// across an upgrade with --order-version.
//
// # Datasets that change
//
// The order is a function of the samples' strata (and shards, for windows
// and affinity) as one dataset version holds them, and of the parameters
// above: nothing else. An append makes a new version with more samples, so
// its order is another order, not the old one extended: resuming a run
// across an append does not continue the old epoch's batches. The old
// version's order is unchanged (its samples keep their positions: an
// append adds shards after the last one, and a new stratum after the last
// one), so a job that must resume exactly pins the version it started with
// (shardfs mount --version N, shown in info.json as dataset.version) until
// its next epoch boundary, or its end, and then moves to the new one.
//
// # Virtual files
//
// A rank-epoch is shown as batch-NNNNNN.tar files, their concatenation
// epoch.tar and index.csv; see FileMap. A sample is a tar member and its
// .cls, or a record of several members (records.go), with its .cls only
// when the dataset has a label. .cls is the class of the sample's label
// (SampleCatalog.Class), never its stratum. A lost sample keeps its place in the
// order and fails every read of its bytes (LostCatalog).
package layout
