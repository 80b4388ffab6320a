package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/dataset"
	"github.com/shardfs/shardfs/ingest"
	"github.com/shardfs/shardfs/layout"
	"github.com/shardfs/shardfs/manifest"
)

// orderFlags are the order parameters shared by plan and mount.
type orderFlags struct {
	// datasetVersion is the dataset version read (--version); 0: the current one.
	datasetVersion                          int
	world, batch, epochs, window, epochSize int
	seed                                    uint64
	alpha                                   float64
	tail                                    string
	rank                                    string // see parseRanks
	affinity                                bool
	resumeAt                                string // "E:N", see resume
	alphaSchedule                           string // "E:A,E:A,...", see alphaPoints
	mix                                     string // "NAME:W,NAME:W,...", see mixParts
	version                                 int    // order version; see layout.OrderVersion
	halfLife, timeWindow, windowStep, asOf  string // time weights; see recency
	// firstEpoch is the first epoch served (warm's --epoch; 0 elsewhere).
	firstEpoch int
	flags      *pflag.FlagSet
	// sp is the spec the flags parse into, once (spec).
	sp *layout.Spec
}

// orderDefaults are what differs between the commands that take the order
// flags: which ranks and how many epochs they handle by default, in words
// of their own.
type orderDefaults struct {
	rank, rankHelp string
	epochs         int
	epochsHelp     string
}

// register adds the order flags to a command. Their defaults are the same
// in every command but for --rank and --epochs (orderDefaults).
func (f *orderFlags) register(fs *pflag.FlagSet, d orderDefaults) {
	f.flags = fs
	fs.StringVar(&f.alphaSchedule, "alpha-schedule", "", "alpha per epoch, linear between points E:A, e.g. 0:0.3,30:1.0 (temperature annealing); before the first and after the last point it holds")
	fs.StringVar(&f.rank, "rank", d.rank, d.rankHelp+": one (3), a range (8-15), a list (0,2,5), or all (also -1)")
	fs.IntVar(&f.world, "world-size", 1, "number of ranks W; every rank gets the same number of batches")
	fs.IntVar(&f.batch, "batch-size", 256, "samples per batch B")
	fs.Uint64Var(&f.seed, "seed", 0, "order seed: same seed, same global order on every node")
	fs.IntVar(&f.epochs, "epochs", d.epochs, d.epochsHelp)
	fs.Float64Var(&f.alpha, "alpha", 1, "class weighting: π_c ∝ n_c^alpha; 1 mirrors the data, 0 balances the classes")
	fs.IntVar(&f.window, "window", 0, "shards per locality window; 0 shuffles globally (one small GET per sample), S>0 reads whole shards S at a time")
	fs.StringVar(&f.tail, "tail", "drop", "last partial step: drop (each sample at most once) or pad (each at least once)")
	fs.IntVar(&f.epochSize, "epoch-size", 0, "samples per epoch before the tail policy (0: the dataset size)")
	fs.StringVar(&f.resumeAt, "resume-at", "", "elastic resume E:N: epoch E continues after N global batches consumed (by any world size), dealt to these ranks; later epochs as usual")
	fs.StringVar(&f.mix, "mix", "", "mix datasets on the same stores by weight, NAME:W,NAME:W (e.g. web:0.7,books:0.3): every batch holds each in floor(B*w)..ceil(B*w), classes by --alpha within each; give the mount point alone")
	fs.IntVar(&f.datasetVersion, "version", 0, "the dataset version to read (shardfs versions NAME lists them); 0, the default, reads the current one when it starts. A job that must resume exactly pins the version it started with")
	fs.IntVar(&f.version, "order-version", layout.OrderVersion, fmt.Sprintf("order construction, %d to %d: a job pins the version it started with, so a newer shardfs on any node computes the same order (%d: materialised permutations, 4 bytes a sample; %d: keyed Feistel permutations, O(1) a class; %d: as %d, with --affinity dealing each rank a range of the samples instead of whole shards)", layout.MinOrderVersion, layout.OrderVersion, 1, 2, 3, 2))
	fs.StringVar(&f.halfLife, "recency-half-life", "", "weight each time bucket by 2^(-age/SPAN), e.g. 90d: a bucket 90 days older than the newest counts half as much (a dataset ingested with --time-bucket; combines with --alpha)")
	fs.StringVar(&f.timeWindow, "time-window", "", "read only the time buckets that start within SPAN of the newest (or of --as-of), e.g. 180d")
	fs.StringVar(&f.windowStep, "time-window-step", "", "slide the --time-window forward by SPAN each epoch, from the oldest bucket until it reaches the newest (or --as-of); a resumed job gets its epoch's window")
	fs.StringVar(&f.asOf, "as-of", "", "the newest time read (RFC 3339 or Unix seconds): later buckets are left out, and a fixed --time-window ends here")
	fs.BoolVar(&f.affinity, "affinity", false, "each rank reads the same shards in every epoch (about 1/W of the dataset), so a node's disk tier holds its share; batches stay stratified; see shardfs plan for the randomness traded")
}

// orderVersion is the order version the flags select.
func (f *orderFlags) orderVersion() int {
	if f.version == 0 {
		return layout.OrderVersion
	}
	return f.version
}

// params is the order of rank's epoch, from the flags.
func (f *orderFlags) params(epoch, rank int) (layout.Params, error) {
	s, err := f.spec()
	if err != nil {
		return layout.Params{Seed: f.seed, Epoch: epoch, World: f.world, Rank: rank, Batch: f.batch}, err
	}
	return s.Params(epoch, rank)
}

// orderFlagNames are the flags that set each option of a layout.Spec: the
// CLI words the spec's errors with them (flagWorded).
var orderFlagNames = map[layout.Option]string{
	layout.OptWorld: "--world-size", layout.OptRanks: "--rank", layout.OptBatch: "--batch-size", layout.OptEpochs: "--epochs",
	layout.OptEpochSize: "--epoch-size", layout.OptAlpha: "--alpha", layout.OptAlphaSchedule: "--alpha-schedule", layout.OptWindow: "--window",
	layout.OptAffinity: "--affinity", layout.OptTail: "--tail", layout.OptResume: "--resume-at", layout.OptMix: "--mix",
	layout.OptOrderVersion: "--order-version", layout.OptHalfLife: "--recency-half-life", layout.OptTimeWindow: "--time-window",
	layout.OptTimeStep: "--time-window-step", layout.OptAsOf: "--as-of",
}

// flagWorded is err with any layout.SpecError in it worded with the flags'
// names, wherever in the chain of wrapped errors it is.
func flagWorded(err error) error {
	var se *layout.SpecError
	if err == nil || !errors.As(err, &se) {
		return err
	}
	name := func(o layout.Option) string {
		if n, ok := orderFlagNames[o]; ok {
			return n
		}
		return string(o)
	}
	return errors.New(strings.Replace(err.Error(), se.Error(), se.In(name), 1))
}

// spec parses the order flags into the run's spec and checks it (the
// rules are layout.Spec's): once per command, which then asks it for every
// rank-epoch. A copy of the flags with other values clears sp first.
func (f *orderFlags) spec() (*layout.Spec, error) {
	if f.sp != nil {
		return f.sp, nil
	}
	switch {
	case f.datasetVersion < 0:
		return nil, fmt.Errorf("--version %d: a dataset version is 1 or more (0: the current one)", f.datasetVersion)
	case f.datasetVersion != 0 && f.mix != "":
		return nil, fmt.Errorf("--version with --mix: a mix reads each dataset's current version")
	}
	tail, err := layout.ParseTail(f.tail)
	if err != nil {
		return nil, err
	}
	s := &layout.Spec{Base: layout.Params{Seed: f.seed, World: f.world, Batch: f.batch,
		Alpha: f.alpha, Tail: tail, EpochSize: f.epochSize, Window: f.window, Affinity: f.affinity, Version: f.version},
		ResumeEpoch: -1, FirstEpoch: f.firstEpoch, Epochs: f.epochs}
	if f.world >= 1 {
		if s.Ranks, err = parseRanks(f.rank, f.world); err != nil {
			return nil, err
		}
	}
	if f.alphaSchedule != "" {
		if f.flags != nil && f.flags.Changed("alpha") {
			return nil, fmt.Errorf("--alpha and --alpha-schedule both given: use one (a schedule with one point is a constant)")
		}
		if s.AlphaPoints, err = f.alphaPoints(); err != nil {
			return nil, err
		}
	}
	if f.mix != "" {
		if s.MixNames, s.Base.Mix, err = f.mixParts(); err != nil {
			return nil, err
		}
	}
	if s.ResumeEpoch, s.ResumeSkip, err = f.resume(); err != nil {
		return nil, err
	}
	if s.Recency, err = f.recency(); err != nil {
		return nil, err
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	f.sp = s
	return s, nil
}

// timed reports whether a time weighting flag is given.
func (f *orderFlags) timed() bool {
	return f.halfLife != "" || f.timeWindow != "" || f.windowStep != "" || f.asOf != ""
}

// recency parses the time weighting flags (nil when no flag is given); the
// strata's times come from the dataset (dataset.BindTimes).
func (f *orderFlags) recency() (*layout.Recency, error) {
	if !f.timed() {
		return nil, nil
	}
	r := &layout.Recency{}
	for _, x := range []struct {
		flag, v string
		dst     *int64
	}{{"--recency-half-life", f.halfLife, &r.HalfLife}, {"--time-window", f.timeWindow, &r.Window}, {"--time-window-step", f.windowStep, &r.Step}} {
		if x.v == "" {
			continue
		}
		d, err := ingest.ParseSpan(x.v)
		if err != nil {
			return nil, fmt.Errorf("%s %v", x.flag, err)
		}
		if d < time.Second {
			return nil, fmt.Errorf("%s %s: must be at least 1s (a half-life of zero or below weighs nothing)", x.flag, x.v)
		}
		*x.dst = int64(d / time.Second)
	}
	if f.asOf != "" {
		t, err := ingest.ParseTime(f.asOf)
		if err != nil {
			return nil, fmt.Errorf("--as-of %q: %v", f.asOf, err)
		}
		r.AsOf = t.Unix()
	}
	return r, nil
}

// setTimes gives the spec the strata's time bucket starts from a dataset's
// header, and refuses time weighting flags on a dataset without time
// buckets.
func (f *orderFlags) setTimes(h *manifest.Header) error {
	s, err := f.spec()
	if err != nil {
		return err
	}
	return dataset.BindTimes(h, s)
}

// mixParts parses --mix into dataset names and weights, in the order given.
func (f *orderFlags) mixParts() ([]string, []float64, error) {
	var names []string
	var weights []float64
	seen := map[string]bool{}
	for _, part := range strings.Split(f.mix, ",") {
		name, w, ok := strings.Cut(strings.TrimSpace(part), ":")
		weight, err := strconv.ParseFloat(w, 64)
		if !ok || name == "" || err != nil || !(weight > 0) || math.IsInf(weight, 0) {
			return nil, nil, fmt.Errorf("--mix %q: use NAME:WEIGHT pairs with weights > 0, e.g. web:0.7,books:0.3", f.mix)
		}
		if seen[name] {
			return nil, nil, fmt.Errorf("--mix %q: dataset %s appears twice", f.mix, name)
		}
		seen[name] = true
		names, weights = append(names, name), append(weights, weight)
	}
	if len(names) < 2 {
		return nil, nil, fmt.Errorf("--mix %q: a mix needs at least two datasets", f.mix)
	}
	// Weights whose sum overflows are scaled by a power of two, which is
	// exact: the shares, and so the order, are those of the weights given.
	if sum := sumOf(weights); math.IsInf(sum, 0) {
		_, e := math.Frexp(slices.Max(weights))
		for i := range weights {
			weights[i] = math.Ldexp(weights[i], -e-len(weights))
		}
	}
	return names, weights, nil
}

func sumOf(xs []float64) float64 {
	sum := 0.0
	for _, x := range xs {
		sum += x
	}
	return sum
}

// mixShares is each weight's share of their sum.
func mixShares(weights []float64) []float64 {
	sum := sumOf(weights)
	out := make([]float64, len(weights))
	for i, w := range weights {
		out[i] = w / sum
	}
	return out
}

// alphaPoints parses --alpha-schedule's EPOCH:ALPHA points.
func (f *orderFlags) alphaPoints() ([]layout.AlphaPoint, error) {
	var pts []layout.AlphaPoint
	for _, part := range strings.Split(f.alphaSchedule, ",") {
		ep, al, ok := strings.Cut(strings.TrimSpace(part), ":")
		epoch, err1 := strconv.Atoi(ep)
		alpha, err2 := strconv.ParseFloat(al, 64)
		if !ok || err1 != nil || err2 != nil || epoch < 0 || alpha < 0 || math.IsNaN(alpha) || math.IsInf(alpha, 0) {
			return nil, fmt.Errorf("--alpha-schedule %q: use EPOCH:ALPHA points, e.g. 0:0.3,30:1.0 (alpha >= 0)", f.alphaSchedule)
		}
		if len(pts) > 0 && epoch <= pts[len(pts)-1].Epoch {
			return nil, fmt.Errorf("--alpha-schedule %q: give the epochs in increasing order", f.alphaSchedule)
		}
		pts = append(pts, layout.AlphaPoint{Epoch: epoch, Alpha: alpha})
	}
	return pts, nil
}

// resume parses --resume-at E:N; without it the epoch is -1.
func (f *orderFlags) resume() (epoch, batches int, err error) {
	if f.resumeAt == "" {
		return -1, 0, nil
	}
	e, n, ok := strings.Cut(f.resumeAt, ":")
	epoch, err1 := strconv.Atoi(e)
	batches, err2 := strconv.Atoi(n)
	if !ok || err1 != nil || err2 != nil || epoch < 0 || batches < 0 {
		return -1, 0, fmt.Errorf("--resume-at %q: use EPOCH:GLOBAL_BATCHES, e.g. 3:1200 when 1200 global batches of epoch 3 were consumed (with W ranks after t steps: t*W)", f.resumeAt)
	}
	return epoch, batches, nil
}

// parseRanks reads a --rank value: "all" (or -1), a rank, a range A-B, or a
// comma-separated list of ranks and ranges, each below world.
func parseRanks(spec string, world int) ([]int, error) {
	bad := func(why string) ([]int, error) {
		return nil, fmt.Errorf("--rank %q: %s: use a rank in 0..%d, a range such as 0-%d, a list such as 0,2, or all", spec, why, world-1, world-1)
	}
	spec = strings.TrimSpace(spec)
	if spec == "all" || spec == "-1" {
		if world > layout.MaxRanks {
			return bad(fmt.Sprintf("all %d ranks of --world-size %d are more than one process serves (at most %d)", world, world, layout.MaxRanks))
		}
		r := make([]int, world)
		for i := range r {
			r[i] = i
		}
		return r, nil
	}
	seen := map[int]bool{}
	var out []int
	for _, part := range strings.Split(spec, ",") {
		a, b, isRange := strings.Cut(strings.TrimSpace(part), "-")
		lo, err := strconv.Atoi(a)
		if err != nil || a == "" {
			return bad(fmt.Sprintf("%q is not a rank", part))
		}
		hi := lo
		if isRange {
			if hi, err = strconv.Atoi(b); err != nil || hi < lo {
				return bad(fmt.Sprintf("%q is not a range low-high", part))
			}
		}
		if lo < 0 || hi >= world {
			return bad(fmt.Sprintf("%s is outside 0..%d for --world-size %d", part, world-1, world))
		}
		if hi-lo >= layout.MaxRanks-len(out) {
			return bad(fmt.Sprintf("more than %d ranks: one process serves at most that many", layout.MaxRanks))
		}
		for r := lo; r <= hi; r++ {
			if seen[r] {
				return bad(fmt.Sprintf("rank %d is listed twice", r))
			}
			seen[r] = true
			out = append(out, r)
		}
	}
	sort.Ints(out)
	return out, nil
}

// checkSteps binds the spec to the order's input (layout.Spec.Bind owns
// the rules) and returns the batches per rank of its first epoch.
func (f *orderFlags) checkSteps(in *layout.Input) (int, error) {
	s, err := f.spec()
	if err != nil {
		return 0, err
	}
	return s.Bind(in)
}

// ranks lists the ranks to show; params has checked the spec.
func (f *orderFlags) ranks() []int {
	r, _ := parseRanks(f.rank, f.world)
	return r
}

func newPlanCmd(g *globals) *cobra.Command {
	of := &orderFlags{}
	var emit, describe string
	var epoch, synthetic, syntheticBuckets, lookahead, compareWindow int
	cmd := &cobra.Command{
		Use:   "plan --stores URL,... [order flags] NAME | --mix NAME:W,...",
		Short: "Show the epoch order: batches, class mix per batch, ranged reads",
		Long: `Plan computes the order the mount will serve, without reading any data.
Per epoch and rank it prints the batches and samples, the mean and max
total-variation (TV) distance of each batch's class mix from the target,
the same for a plain uniform shuffle (what DistributedSampler gives), and the
ranged GETs a reader needs per epoch when it fetches --lookahead batches at a
time, merging nearby ranges on a fragment: for the global order and for a
shard window, so the locality trade-off is visible.

--emit index --epoch E --rank R writes exactly the index.csv the mount shows.
--synthetic N plans a synthetic imbalanced dataset of N samples instead;
above 10,000,000 samples it models only the per-shard class counts (the
order needs nothing more with order version 2), so a billion-sample plan
runs in a few hundred MiB, and the ranged GETs are not counted.`,
		Example: `  shardfs plan --stores $SHARDFS_STORES --world-size 8 --batch-size 256 imagenet-train
  shardfs plan --stores $SHARDFS_STORES --emit index --epoch 0 --rank 3 --world-size 8 imagenet-train > index.csv
  shardfs plan --synthetic 1000000 --world-size 8
  shardfs plan --synthetic 1000000000 --world-size 4096 --rank 0-3
  shardfs plan --synthetic 1000000 --synthetic-time-buckets 12 --recency-half-life 90d --time-window 180d`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var m *manifest.Manifest
			if of.mix != "" {
				if len(args) > 0 || synthetic > 0 {
					return fmt.Errorf("with --mix the datasets come from the mix: give no NAME and no --synthetic")
				}
				stores, err := g.openStores()
				if err != nil {
					return err
				}
				return printMixPlan(cmd.Context(), cmd.OutOrStdout(), stores, of, g.logger())
			}
			switch {
			case synthetic > maxSyntheticRows:
				if emit != "" {
					return fmt.Errorf("--emit with --synthetic above %d samples: the keys are not modelled; use a smaller --synthetic", maxSyntheticRows)
				}
				return printCountsPlan(cmd.Context(), cmd.OutOrStdout(), synthetic, syntheticBuckets, of, describe)
			case describe != "":
				return fmt.Errorf("--describe needs --synthetic above %d samples: it writes a dataset description of counts only", maxSyntheticRows)
			case synthetic > 0:
				m = syntheticManifest(synthetic, syntheticBuckets)
			case len(args) == 1:
				stores, err := g.openStores()
				if err != nil {
					return err
				}
				if m, err = dataset.LoadManifestVersion(cmd.Context(), stores, args[0], of.datasetVersion, g.logger()); err != nil {
					return err
				}
			default:
				return fmt.Errorf("name a dataset, or pass --synthetic N")
			}
			if err := of.setTimes(&m.Header); err != nil {
				return err
			}
			if of.epochs < 1 {
				return fmt.Errorf("--epochs %d: plan shows a finite number of epochs: pass 1 or more", of.epochs)
			}
			if emit != "" {
				if emit != "index" {
					return fmt.Errorf("--emit %q: only index is supported", emit)
				}
				of.firstEpoch, of.sp = epoch, nil
				return emitIndex(cmd.OutOrStdout(), m, of, epoch)
			}
			return printPlan(cmd.Context(), cmd.OutOrStdout(), m, of, lookahead, compareWindow)
		},
	}
	of.register(cmd.Flags(), orderDefaults{rank: "0", rankHelp: "the ranks to plan (only rank 0 unless asked: planning every rank of a large world costs as much as serving it)",
		epochs: 1, epochsHelp: "number of epochs to plan"})
	cmd.Flags().StringVar(&emit, "emit", "", "write one file of the mount instead of the report: index")
	cmd.Flags().IntVar(&epoch, "epoch", 0, "epoch for --emit")
	cmd.Flags().IntVar(&synthetic, "synthetic", 0, "plan a synthetic dataset of N samples (100 classes, 64 MiB shards of ~100 kB samples)")
	cmd.Flags().IntVar(&syntheticBuckets, "synthetic-time-buckets", 0, "with --synthetic: cut every class into this many 30-day time buckets, each 10% larger than the one before (strata: classes x buckets)")
	cmd.Flags().StringVar(&describe, "describe", "", "with --synthetic above 10,000,000: write the dataset's format-3 description (root and group objects, counts only) to this directory, then start rank --rank from it as a node would; a directory that holds it already is only read")
	cmd.Flags().IntVar(&lookahead, "lookahead", 8, "batches a reader fetches at once, for the ranged-GET count")
	cmd.Flags().IntVar(&compareWindow, "compare-window", 8, "window to compare with when --window is 0 (and the reverse)")
	return cmd
}

// mergeGap: a reader fetches a gap this small rather than pay for another GET.
const mergeGap = 64 << 10

func emitIndex(out io.Writer, m *manifest.Manifest, of *orderFlags, epoch int) error {
	spec, err := of.spec()
	if err != nil {
		return err
	}
	plan, err := dataset.PlanOrder(&dataset.Dataset{Manifest: m}, spec)
	if err != nil {
		return err
	}
	in := plan.Input
	if _, err := of.params(epoch, 0); err != nil {
		return err
	}
	if len(of.ranks()) != 1 {
		return fmt.Errorf("--emit index writes one rank's file: pass --rank R, not %q", of.rank)
	}
	p, err := of.params(epoch, of.ranks()[0])
	if err != nil {
		return err
	}
	o, err := layout.Order(in, p)
	if err != nil {
		return err
	}
	f := layout.NewMembers(o, dataset.ManifestCatalog{M: m}.ForLayout()).Index()
	buf := make([]byte, f.Size())
	for _, e := range f.Extents(nil, 0, f.Size()) {
		f.Render(e, buf[e.FileOff:e.FileOff+e.Len])
	}
	_, err = out.Write(buf)
	return err
}

func printPlan(ctx context.Context, out io.Writer, m *manifest.Manifest, of *orderFlags, lookahead, compareWindow int) error {
	spec, err := of.spec()
	if err != nil {
		return err
	}
	plan, err := dataset.PlanOrder(&dataset.Dataset{Manifest: m}, spec)
	if err != nil {
		return err
	}
	in, p0 := plan.Input, plan.First
	cat := dataset.ManifestCatalog{M: m}
	fmt.Fprintf(out, "dataset %s: %d samples, %d strata, %d shards, RS(%d,%d)\n", m.Name, m.Samples.Len(), len(m.Strata), len(m.Shards), m.Data, m.Parity)
	fmt.Fprintf(out, "order: version %d, W=%d B=%d seed=%d alpha=%v alpha-schedule=%q tail=%s window=%d affinity=%v resume-at=%q\n", of.orderVersion(), of.world, of.batch, of.seed, of.alpha, of.alphaSchedule, of.tail, of.window, of.affinity, of.resumeAt)
	if err := printStrataByField(out, m); err != nil {
		return err
	}
	if of.timed() {
		if err := printTimeWindows(out, of); err != nil {
			return err
		}
	}
	fmt.Fprintln(out)
	pi := layout.TargetsOf(in, p0) // epoch 0's, for the class mix table
	other := *of
	other.sp = nil
	other.affinity = false
	other.halfLife, other.timeWindow, other.windowStep, other.asOf = "", "", "", "" // a window keeps each pool's own mix
	if of.window == 0 {
		// A window keeps each pool's own class mix: the comparison has alpha 1.
		other.window, other.alpha, other.alphaSchedule, other.epochSize = compareWindow, 1, "", 0
	} else {
		other.window = 0
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(out, "GETs: ranged reads per rank-epoch when fetching %d batches at a time and merging ranges\non a fragment less than %s apart; read: bytes those GETs fetch.\n\n", lookahead, humanize.IBytes(mergeGap))
	fmt.Fprintf(tw, "epoch\trank\tbatches\tsamples\tTV mean\tTV max\tuniform TV mean\tuniform TV max\tGETs (window=%d)\tread\tGETs (window=%d)\tread\t\n", of.window, other.window)
	var first layout.BatchStats
	err = eachOrder(ctx, of, in, func(e, r int, p layout.Params, o *layout.RankOrder) error {
		st := layout.Stats(o, in, layout.TargetsOf(in, p))
		if e == 0 && r == of.ranks()[0] {
			first = st
		}
		uni := layout.Stats(layout.UniformOrder(in, p), in, uniformTargets(in, p))
		gets, bytes := layout.ReadPlan(o, cat, lookahead, mergeGap)
		op, err := other.params(e, r)
		if err != nil {
			return err
		}
		oo, err := layout.Order(in, op)
		if err != nil {
			return err
		}
		ogets, obytes := layout.ReadPlan(oo, cat, lookahead, mergeGap)
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%.4f\t%.4f\t%.4f\t%.4f\t%d\t%s\t%d\t%s\t\n", e, r, o.Batches, o.Samples.Len(),
			st.MeanTV, st.MaxTV, uni.MeanTV, uni.MaxTV, gets, humanize.IBytes(uint64(bytes)), ogets, humanize.IBytes(uint64(obytes)))
		return nil
	})
	if err != nil {
		return err
	}
	tw.Flush()
	if of.affinity {
		if err := printAffinity(out, in, of); err != nil {
			return err
		}
	}
	if len(m.LabelFields) > 1 {
		if err := printFieldPlan(out, m, in, p0); err != nil {
			return err
		}
	}
	target := fmt.Sprintf("π ∝ n^%v", p0.Alpha)
	if p0.Weights != nil {
		target += "·w, w the time weight"
	}
	fmt.Fprintf(out, "\nclass mix, epoch 0 rank %d (target %s):\n", of.ranks()[0], target)
	tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "stratum\tsamples\tdata share\ttarget\tserved\t\n")
	limit := len(m.Strata)
	if limit > 20 {
		limit = 20
	}
	for c := 0; c < limit; c++ {
		fmt.Fprintf(tw, "%s\t%d\t%.4f\t%.4f\t%.4f\t\n", m.Strata[c].Name, m.Strata[c].Count,
			float64(m.Strata[c].Count)/float64(m.Samples.Len()), pi[c], first.Share[c])
	}
	tw.Flush()
	if limit < len(m.Strata) {
		fmt.Fprintf(out, "(%d more strata)\n", len(m.Strata)-limit)
	}
	return nil
}

// uniformTargets is what a uniform shuffle of p's samples aims at: the
// data's mix of the strata p reads.
func uniformTargets(in *layout.Input, p layout.Params) []float64 {
	if p.Weights == nil {
		return layout.Targets(in, 1)
	}
	read := make([]float64, len(p.Weights))
	for c, w := range p.Weights {
		if w > 0 {
			read[c] = 1
		}
	}
	return layout.TargetsOf(in, layout.Params{Alpha: 1, Weights: read})
}

// printStrataByField says how many strata the label fields make, how many
// values each field has, and how the fields were cut.
func printStrataByField(out io.Writer, m *manifest.Manifest) error {
	if len(m.LabelFields) < 2 && len(m.Derived) == 0 {
		return nil
	}
	lo, hi := math.MaxInt, 0
	for _, st := range m.Strata {
		lo, hi = min(lo, st.Count), max(hi, st.Count)
	}
	fmt.Fprintf(out, "strata: %d of the fields %s, %d to %d samples each\n", len(m.Strata), strings.Join(m.LabelFields, " x "), lo, hi)
	for i, f := range m.LabelFields {
		values := map[string]bool{}
		for _, st := range m.Strata {
			values[st.Labels[i]] = true
		}
		how := "as listed"
		if j := slices.IndexFunc(m.Derived, func(d manifest.Derived) bool { return d.Field == f }); j >= 0 {
			d := m.Derived[j]
			if d.Width > 0 {
				how = "time buckets of " + spanText(d.Width)
			} else {
				how = fmt.Sprintf("bins with edges %v", d.Edges)
			}
		}
		fmt.Fprintf(out, "  %s: %d values, %s\n", f, len(values), how)
	}
	return nil
}

// printTimeWindows shows the time weighting and the first epochs' windows.
func printTimeWindows(out io.Writer, of *orderFlags) error {
	s, err := of.spec()
	if err != nil {
		return err
	}
	r := s.Recency
	fmt.Fprintf(out, "time: half-life %s, window %s, step %s, as of %s\n", cmp.Or(of.halfLife, "none"), cmp.Or(of.timeWindow, "all"), cmp.Or(of.windowStep, "none"), cmp.Or(of.asOf, "the newest bucket"))
	for e := 0; e < min(of.epochs, 3); e++ {
		w, from, to, err := r.Weights(e)
		if err != nil {
			return err
		}
		n, first, last := 0, to, from
		for c, x := range w {
			if x > 0 {
				n++
				first, last = min(first, r.Start[c]), max(last, r.Start[c])
			}
		}
		fmt.Fprintf(out, "  epoch %d reads the buckets that start from %s to %s (%d strata)\n", e, when(first), when(last), n)
	}
	return nil
}

// when prints Unix seconds as a date, or a UTC time when not midnight.
func when(t int64) string {
	u := time.Unix(t, 0).UTC()
	if t%86400 == 0 {
		return u.Format(time.DateOnly)
	}
	return u.Format(time.RFC3339)
}

// spanText prints seconds in the largest unit that divides them: 30d, 12h, 90s.
func spanText(sec int64) string {
	for _, u := range []struct {
		n    int64
		unit string
	}{{7 * 86400, "w"}, {86400, "d"}, {3600, "h"}, {60, "m"}} {
		if sec%u.n == 0 {
			return fmt.Sprintf("%d%s", sec/u.n, u.unit)
		}
	}
	return fmt.Sprintf("%ds", sec)
}

// printFieldPlan measures epoch 0's batches of the first rank on each label
// field alone (each time window, each bin): the TV of a batch's mix of the
// field's values from the target's, and how many batches hold each value,
// against a uniform shuffle of the same samples.
func printFieldPlan(out io.Writer, m *manifest.Manifest, in *layout.Input, p layout.Params) error {
	o, err := layout.Order(in, p)
	if err != nil {
		return err
	}
	uni := layout.UniformOrder(in, p)
	pi := layout.TargetsOf(in, p)
	for i, f := range m.LabelFields {
		index := map[string]int{}
		var names []string
		value := make([]int, len(m.Strata))
		for c, st := range m.Strata {
			v, ok := index[st.Labels[i]]
			if !ok {
				v = len(names)
				index[st.Labels[i]] = v
				names = append(names, st.Labels[i])
			}
			value[c] = v
		}
		ours := layout.StatsBy(o, in, value, len(names), pi)
		base := layout.StatsBy(uni, in, value, len(names), pi)
		fmt.Fprintf(out, "\nfield %s, epoch 0 rank %d: TV of a batch's mix of %d values from the target: mean %.4f max %.4f; uniform shuffle mean %.4f max %.4f\n",
			f, p.Rank, len(names), ours.MeanTV, ours.MaxTV, base.MeanTV, base.MaxTV)
		share := make([]float64, len(names))
		data := make([]int, len(names))
		for c, v := range value {
			share[v] += pi[c]
			data[v] += m.Strata[c].Count
		}
		var rows []int
		for v := range names {
			if share[v] > 0 { // not read this epoch: outside the time window
				rows = append(rows, v)
			}
		}
		if left := len(names) - len(rows); left > 0 {
			fmt.Fprintf(out, "(%d values outside the time window are not read)\n", left)
		}
		// Rarest first: the values a uniform shuffle starves.
		slices.SortStableFunc(rows, func(a, b int) int { return cmp.Compare(share[a], share[b]) })
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "%s\tsamples\ttarget\tbatches holding it\tuniform shuffle\t\n", f)
		for _, v := range rows[:min(len(rows), 12)] {
			fmt.Fprintf(tw, "%s\t%d\t%.4f\t%.3f\t%.3f\t\n", names[v], data[v], share[v], ours.Holding[v], base.Holding[v])
		}
		tw.Flush()
		if len(rows) > 12 {
			fmt.Fprintf(out, "(%d more values)\n", len(rows)-12)
		}
	}
	return nil
}

// maxSyntheticRows: above it, --synthetic models per-shard class counts only.
const maxSyntheticRows = 10_000_000

// syntheticShare is the synthetic datasets' class mix: class c about
// e^(-c/14) of the samples, the tail lumped into the last of 100 classes
// (what syntheticManifest draws sample by sample).
func syntheticShare(buckets int) []float64 {
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

// printCountsPlan plans a synthetic dataset of n samples from counts
// alone: 64 MiB shards of ~100 kB samples, each stratum spread evenly over
// them, as ingest's stratified placement gives.
func printCountsPlan(ctx context.Context, out io.Writer, n, buckets int, of *orderFlags, describe string) error {
	if of.window > 0 || of.orderVersion() < 2 || of.affinity && of.orderVersion() < 3 {
		return fmt.Errorf("--synthetic above %d samples plans from class counts the global order of order version 2 or later, or rank affinity of order version 3: leave out --window and --order-version 1 (and 2, with --affinity)", maxSyntheticRows)
	}
	start := time.Now()
	const perShard = 671 // 64 MiB of 100 kB samples
	h := syntheticHeader(buckets)
	if err := of.setTimes(&h); err != nil {
		return err
	}
	pi := syntheticShare(buckets)
	shards := (n + perShard - 1) / perShard
	// Each stratum spread evenly over the shards, as ingest's stratified
	// placement spreads it: O(shards + strata) numbers, not their product.
	in, err := layout.NewEvenCountInput(layout.ApportionShares(n, pi), shards)
	if err != nil {
		return err
	}
	if group, groups, ok, err := manifest.TimeGroups(&h); err != nil {
		return err
	} else if ok {
		if err := in.SetGroups(group, groups); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "synthetic dataset: %d samples, %d strata, %d shards of about %d samples (each stratum spread evenly over the shards; input built in %s)\n",
		n, len(pi), shards, n/shards, time.Since(start).Round(time.Millisecond))
	fmt.Fprintf(out, "order: version %d, W=%d B=%d seed=%d alpha=%v tail=%s\n", of.orderVersion(), of.world, of.batch, of.seed, of.alpha, of.tail)
	if of.timed() {
		if err := printTimeWindows(out, of); err != nil {
			return err
		}
	}
	fmt.Fprintln(out)
	if _, err := of.checkSteps(in); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "epoch\trank\tbatches\tsamples\tTV mean\tTV max\tuniform TV mean\tuniform TV max\torder time\t\n")
	var first layout.BatchStats
	err = eachOrderTimed(ctx, of, in, func(e, r int, p layout.Params, o *layout.RankOrder, took time.Duration) error {
		targets := layout.TargetsOf(in, p)
		st := layout.Stats(o, in, targets)
		if e == 0 && r == of.ranks()[0] {
			first = st
		}
		uni := layout.Stats(layout.UniformOrder(in, p), in, uniformTargets(in, p))
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%.4f\t%.4f\t%.4f\t%.4f\t%s\t\n", e, r, o.Batches, o.Samples.Len(),
			st.MeanTV, st.MaxTV, uni.MeanTV, uni.MaxTV, took.Round(time.Millisecond))
		return nil
	})
	if err != nil {
		return err
	}
	tw.Flush()
	if describe != "" {
		fmt.Fprintln(out)
		h.IngestID, h.Data, h.Parity, h.BlockSize, h.ShardSize = "synthetic", 4, 2, 1<<20, 64<<20
		h.Stores = []string{"store-0", "store-1", "store-2", "store-3", "store-4", "store-5"}
		counts := make([]int, in.NumStrata)
		for c := range counts {
			counts[c] = in.Count(c)
		}
		st, err := describeSynthetic(ctx, out, describe, h, counts, shards)
		if err != nil {
			return err
		}
		p, err := of.params(0, of.ranks()[0])
		if err != nil {
			return err
		}
		if err := rankStart(ctx, out, st, h, in, p); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "\nclass mix, epoch 0 rank %d: the first 5 of %d strata\n", of.ranks()[0], len(pi))
	tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "stratum\tsamples\tdata share\tserved\t\n")
	for c := 0; c < 5; c++ {
		fmt.Fprintf(tw, "%s\t%d\t%.4f\t%.4f\t\n", h.Strata[c].Name, in.Count(c), float64(in.Count(c))/float64(n), first.Share[c])
	}
	return tw.Flush()
}

// syntheticHeader names the synthetic strata: 100 classes, each cut into
// buckets 30-day time buckets ending with the one that starts 2026-01-01
// (none: classes alone).
func syntheticHeader(buckets int) manifest.Header {
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

// syntheticManifest builds an imbalanced in-memory manifest of n samples in
// 100 strata (class sizes falling geometrically), 50-150 kB samples, placed
// into 64 MiB shards by stratified round-robin as ingest does.
func syntheticManifest(n, buckets int) *manifest.Manifest {
	rng := rand.New(rand.NewPCG(1, 2))
	m := &manifest.Manifest{Header: syntheticHeader(buckets)}
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
		st := uint32(min(nStrata-1, int(-14.0*logf(1-rng.Float64()))))
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
	if err := m.Finish(); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	return m
}

func logf(x float64) float64 { return math.Log(x) }

// printAffinity shows which shards each rank keeps, and the randomness
// affinity trades away against the global order with the same parameters:
// how often two samples that share a batch share one again next epoch, and
// the class mix deviation per batch.
func printAffinity(out io.Writer, in *layout.Input, of *orderFlags) error {
	if of.orderVersion() >= 3 {
		var samples, shards int64
		for _, x := range layout.AffinityRanges(in, of.world, 0) {
			if x[0] < x[1] {
				samples += x[1] - x[0]
				shards += int64(in.Shard[x[1]-1]-in.Shard[x[0]]) + 1
			}
		}
		fmt.Fprintf(out, "\naffinity: each rank reads the same range of samples in every epoch (rank 0: %d of %d samples, in %d of %d shards)\n", samples, in.N(), shards, in.NumShards)
	} else {
		shards := layout.AffinityShards(in, of.seed, of.world)
		fmt.Fprintf(out, "\naffinity: each rank reads the same shards in every epoch (rank 0: %d of %d shards)\n", len(shards[0]), in.NumShards)
	}
	global := *of
	global.sp = nil
	global.affinity = false
	type mode struct {
		name    string
		f       *orderFlags
		batches [2][]layout.Positions
		tv      float64
	}
	modes := []*mode{{name: "affinity", f: of}, {name: "global order", f: &global}}
	pi := layout.Targets(in, 1)
	for _, md := range modes {
		n := 0
		for e := 0; e < 2; e++ {
			for r := 0; r < of.world; r++ {
				p, err := md.f.params(e, r)
				if err != nil {
					return err
				}
				o, err := layout.Order(in, p)
				if err != nil {
					return err
				}
				for b := 0; b < o.Batches; b++ {
					md.batches[e] = append(md.batches[e], o.BatchSamples(b))
				}
				if e == 0 {
					md.tv += layout.Stats(o, in, pi).MeanTV
					n++
				}
			}
		}
		md.tv /= float64(max(n, 1))
	}
	const limit = 200
	fmt.Fprintf(out, "randomness traded (all ranks, epoch 0 -> 1, pairs in the first %d batches):\n", limit)
	for _, md := range modes {
		fmt.Fprintf(out, "  %-13s pairs sharing a batch again: %.5f   TV mean per batch vs the dataset's mix: %.4f\n",
			md.name, layout.PairRepeat(md.batches[0], md.batches[1], limit), md.tv)
	}
	fmt.Fprintf(out, "  (a uniform shuffle repeats about (B-1)/(N-1) = %.5f of pairs)\n", float64(of.batch-1)/float64(max(in.N()-1, 1)))
	return nil
}

// printMixPlan shows a mix of datasets: per epoch and rank, the total
// variation (TV) of each batch's dataset mix from the weights and of its
// (dataset, class) mix from the targets, beside a plain uniform shuffle of
// the same samples; then each dataset's share as served.
func printMixPlan(ctx context.Context, out io.Writer, stores []backend.Store, of *orderFlags, log *slog.Logger) error {
	sp, err := of.spec()
	if err != nil {
		return err
	}
	names, weights := sp.MixNames, sp.Base.Mix
	var parts []*dataset.Dataset
	for _, n := range names {
		m, err := dataset.LoadManifest(ctx, stores, n, log)
		if err != nil {
			return fmt.Errorf("--mix: %w", err)
		}
		parts = append(parts, &dataset.Dataset{Name: n, Manifest: m})
	}
	mix, err := dataset.NewMix(parts)
	if err != nil {
		return err
	}
	in, err := mix.Input()
	if err != nil {
		return err
	}
	if _, err := of.checkSteps(in); err != nil {
		return err
	}
	sum := 0.0
	for _, w := range weights {
		sum += w
	}
	fmt.Fprintf(out, "mix of %d datasets:", len(names))
	for i, p := range parts {
		fmt.Fprintf(out, "%s %s (%d samples, weight %v)", map[bool]string{true: "", false: ","}[i == 0], p.Name, p.Manifest.Samples.Len(), weights[i])
	}
	fmt.Fprintf(out, "\nshares served: %s\n", sp.DescribeMix())
	fmt.Fprintf(out, "order: version %d, W=%d B=%d seed=%d alpha=%v tail=%s\n\n", of.orderVersion(), of.world, of.batch, of.seed, of.alpha, of.tail)
	// datasetTV is the mean and max TV of the batches' dataset mix from the weights.
	datasetTV := func(o *layout.RankOrder) (mean, worst float64, served []int) {
		served = make([]int, len(names))
		for b := 0; b < o.Batches; b++ {
			per := make([]int, len(names))
			for _, smp := range o.BatchSamples(b).All() {
				per[in.Group[in.Stratum[smp]]]++
			}
			tv := 0.0
			for g, n := range per {
				tv += math.Abs(float64(n)/float64(o.Params.Batch) - weights[g]/sum)
				served[g] += n
			}
			tv /= 2
			mean += tv / float64(o.Batches)
			worst = max(worst, tv)
		}
		return mean, worst, served
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "epoch\trank\tbatches\tdataset TV mean\tdataset TV max\tclass TV mean\tclass TV max\tuniform dataset TV mean\tuniform class TV mean\t\n")
	var first []int
	err = eachOrder(ctx, of, in, func(e, r int, p layout.Params, o *layout.RankOrder) error {
		targets := layout.MixTargets(in, weights, p.Alpha)
		st := layout.Stats(o, in, targets)
		dm, dx, served := datasetTV(o)
		if first == nil {
			first = served
		}
		uo := layout.UniformOrder(in, p)
		um, _, _ := datasetTV(uo)
		us := layout.Stats(uo, in, targets)
		fmt.Fprintf(tw, "%d\t%d\t%d\t%.4f\t%.4f\t%.4f\t%.4f\t%.4f\t%.4f\t\n", e, r, o.Batches, dm, dx, st.MeanTV, st.MaxTV, um, us.MeanTV)
		return nil
	})
	if err != nil {
		return err
	}
	tw.Flush()
	fmt.Fprintf(out, "\ndataset mix, epoch 0 rank %d:\n", of.ranks()[0])
	tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "dataset\tsamples\tdata share\tweight\tserved\t\n")
	total, servedAll := 0, 0
	for i, p := range parts {
		total += p.Manifest.Samples.Len()
		servedAll += first[i]
	}
	for i, p := range parts {
		fmt.Fprintf(tw, "%s\t%d\t%.4f\t%.4f\t%.4f\t\n", p.Name, p.Manifest.Samples.Len(), float64(p.Manifest.Samples.Len())/float64(total), weights[i]/sum, float64(first[i])/float64(servedAll))
	}
	return tw.Flush()
}

// eachOrder calls fn with the order of every epoch and rank the flags show.
func eachOrder(ctx context.Context, of *orderFlags, in *layout.Input, fn func(e, r int, p layout.Params, o *layout.RankOrder) error) error {
	return eachOrderTimed(ctx, of, in, func(e, r int, p layout.Params, o *layout.RankOrder, _ time.Duration) error { return fn(e, r, p, o) })
}

// eachOrderTimed is eachOrder, also passing how long each order took.
func eachOrderTimed(ctx context.Context, of *orderFlags, in *layout.Input, fn func(e, r int, p layout.Params, o *layout.RankOrder, took time.Duration) error) error {
	for e := 0; e < of.epochs; e++ {
		for _, r := range of.ranks() {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			p, err := of.params(e, r)
			if err != nil {
				return err
			}
			t0 := time.Now()
			o, err := layout.Order(in, p)
			if err != nil {
				return err
			}
			if err := fn(e, r, p, o, time.Since(t0)); err != nil {
				return err
			}
		}
	}
	return nil
}
