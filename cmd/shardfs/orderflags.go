package main

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/ingest"
	"github.com/shardfs/shardfs/layout"
	"github.com/shardfs/shardfs/manifest"
	"github.com/shardfs/shardfs/repository"
)

// orderFlags are the order parameters shared by plan and mount.
type orderFlags struct {
	// datasetVersion is the dataset version read (--version); 0: the current one.
	datasetVersion                         int
	world, batch, epochs, epochSize        int
	window                                 windowValue
	seed                                   uint64
	alpha                                  float64
	tail                                   string
	rank                                   string // see parseRanks
	affinity                               bool
	resumeAt                               string // "E:N", see resume
	alphaSchedule                          string // "E:A,E:A,...", see alphaPoints
	preset                                 string // a named alpha schedule, layout.PresetSchedule
	minShare                               float64
	mix                                    string // "NAME:W,NAME:W,...", see mixParts
	version                                int    // order version; see layout.OrderVersion
	halfLife, timeWindow, windowStep, asOf string // time weights; see recency
	feedback, run                          string // weights from the trainer's reports; layout.ParseFeedback
	// follow is mount --follow (not an order flag: plan and warm have no
	// such flag); with it, --run names the run whose log says each epoch's
	// version.
	follow bool
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
	fs.StringVar(&f.preset, "preset", "", "a named alpha schedule: decoupled:N reads the natural mix (alpha 1) for the first 80% of a run of N epochs and balances the strata (alpha 0) for the rest, as Kang et al. (ICLR 2020) found best; decoupled:N:F balances the last fraction F")
	fs.Float64Var(&f.minShare, "min-share", 0, "every stratum gets at least this share of each epoch's samples (e.g. 0.02), the others scaled down in proportion; at most 1/(strata)")
	fs.StringVar(&f.rank, "rank", d.rank, d.rankHelp+": one (3), a range (8-15), a list (0,2,5), or all (also -1)")
	fs.IntVar(&f.world, "world-size", 1, "number of ranks W; every rank gets the same number of batches")
	fs.IntVar(&f.batch, "batch-size", 256, "samples per batch B")
	fs.Uint64Var(&f.seed, "seed", 0, "order seed: same seed, same global order on every node")
	fs.IntVar(&f.epochs, "epochs", d.epochs, d.epochsHelp)
	fs.Float64Var(&f.alpha, "alpha", 1, "class weighting: π_c ∝ n_c^alpha; 1 mirrors the data, 0 balances the classes")
	f.window = layout.WindowAuto
	fs.Var(&f.window, "window", fmt.Sprintf("shards per locality window. auto (the default, order version 6): whole shards holding about %d samples (at most %d MiB of them), read ahead as whole shards, so a cold epoch larger than the memory cache still feeds a fast GPU; each batch then mixes only its window's samples (shardfs plan shows the window and what it trades). auto reads globally where a window does not apply: a dataset that fits one window, --alpha other than 1, an alpha schedule or preset, --epoch-size, --min-share, time weights, feedback, a mix of datasets, --affinity, strata of several fields or time buckets, a lazily loaded dataset, or --order-version 5 or lower. 0: a global shuffle (one small GET per sample). S>0: windows of S shards", layout.AutoWindowSamples, layout.AutoWindowBytes>>20))
	fs.StringVar(&f.tail, "tail", "drop", "last partial step: drop (each sample at most once) or pad (each at least once)")
	fs.IntVar(&f.epochSize, "epoch-size", 0, "samples per epoch before the tail policy (0: the dataset size)")
	fs.StringVar(&f.resumeAt, "resume-at", "", "elastic resume E:N: epoch E continues after N global batches consumed (by any world size), dealt to these ranks; later epochs as usual")
	fs.StringVar(&f.mix, "mix", "", "mix datasets on the same stores by weight, NAME:W,NAME:W (e.g. web:0.7,books:0.3): every batch holds each in floor(B*w)..ceil(B*w), classes by --alpha within each; give the mount point alone")
	fs.IntVar(&f.datasetVersion, "version", 0, "the dataset version to read (shardfs versions NAME lists them); 0, the default, reads the current one when it starts. A job that must resume exactly pins the version it started with")
	fs.IntVar(&f.version, "order-version", layout.OrderVersion, fmt.Sprintf("order construction, %d to %d: a job pins the version it started with, so a newer shardfs on any node computes the same order (%d: materialised permutations, 4 bytes a sample; %d: keyed Feistel permutations, O(1) a class; %d: as %d, with --affinity dealing each rank a range of the samples instead of whole shards; %d: as %d, with no sample twice in one batch unless its stratum has fewer samples than the batch's quota of it; %d: as %d, with every batch within one sample of its share of each value of the first two label fields named, and the others bounded, when strata are tuples of several fields; %d: as %d, with a window of whole shards chosen for the dataset when --window is not given)", layout.MinOrderVersion, layout.OrderVersion, 1, 2, 3, 2, 4, 3, 5, 4, 6, 5))
	fs.StringVar(&f.halfLife, "recency-half-life", "", "weight each time bucket by 2^(-age/SPAN), e.g. 90d: a bucket 90 days older than the newest counts half as much (a dataset ingested with --time-bucket; combines with --alpha)")
	fs.StringVar(&f.timeWindow, "time-window", "", "read only the time buckets that start within SPAN of the newest (or of --as-of), e.g. 180d")
	fs.StringVar(&f.windowStep, "time-window-step", "", "slide the --time-window forward by SPAN each epoch, from the oldest bucket until it reaches the newest (or --as-of); a resumed job gets its epoch's window")
	fs.StringVar(&f.asOf, "as-of", "", "the newest time read (RFC 3339 or Unix seconds): later buckets are left out, and a fixed --time-window ends here")
	fs.StringVar(&f.feedback, "feedback", "", "re-weight the strata after every epoch from the trainer's report of it (its loss per stratum, from the Python loader's report() on rank 0, or shardfs report): eg, or eg:step=X,floor=F, the exponentiated-gradient rule of DoReMi: the next epoch's share of a stratum ∝ its share now × exp(step × its reported value), each at least floor (defaults step=1, floor=0.01); needs --run")
	fs.StringVar(&f.run, "run", "", "with --feedback or mount --follow, the run's name: its log in the stores keeps the trainer's reports and each epoch's dataset version under it, so every node, and a resumed job, computes the same order; a new name starts a new run")
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
	layout.OptTimeStep: "--time-window-step", layout.OptAsOf: "--as-of", layout.OptMinShare: "--min-share", layout.OptPreset: "--preset",
	layout.OptFeedback: "--feedback", layout.OptRun: "--run", layout.OptFollow: "--follow", layout.OptDataVersion: "--version",
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
	tail, err := layout.ParseTail(f.tail)
	if err != nil {
		return nil, err
	}
	s := &layout.Spec{Base: layout.Params{Seed: f.seed, World: f.world, Batch: f.batch,
		Alpha: f.alpha, Tail: tail, EpochSize: f.epochSize, Window: int(f.window), Affinity: f.affinity, Version: f.version, MinShare: f.minShare},
		ResumeEpoch: -1, FirstEpoch: f.firstEpoch, Epochs: f.epochs, Run: f.run, Follow: f.follow, DataVersion: f.datasetVersion}
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
	if f.preset != "" {
		switch {
		case f.alphaSchedule != "":
			return nil, fmt.Errorf("--preset and --alpha-schedule both given: a preset is an alpha schedule; use one")
		case f.flags != nil && f.flags.Changed("alpha"):
			return nil, fmt.Errorf("--preset and --alpha both given: a preset sets alpha by epoch; use one")
		}
		if s.AlphaPoints, err = layout.PresetSchedule(f.preset); err != nil {
			return nil, err
		}
		s.Preset = f.preset
	}
	if f.mix != "" {
		if s.MixNames, s.MixGiven, err = f.mixParts(); err != nil {
			return nil, err
		}
		s.Base.Mix = scaledMix(s.MixGiven)
	}
	if s.ResumeEpoch, s.ResumeSkip, err = f.resume(); err != nil {
		return nil, err
	}
	if s.Recency, err = f.recency(); err != nil {
		return nil, err
	}
	if f.run != "" {
		if err := repository.CheckRunName(f.run); err != nil {
			return nil, fmt.Errorf("--run: %v", err)
		}
	}
	if f.feedback != "" {
		if s.Feedback, err = layout.ParseFeedback(f.feedback); err != nil {
			return nil, err
		}
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
// strata's times come from the dataset (repository.BindTimes).
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
	return repository.BindTimes(h, s)
}

// bindFeedback gives --feedback the reports of --run on stores, for
// dataset name of header h, without waiting for a report not yet made
// (plan and warm: the mount waits, --report-wait).
func (f *orderFlags) bindFeedback(h *manifest.Header, stores []backend.Store, name string) error {
	s, err := f.spec()
	if err != nil || s.Feedback == nil {
		return err
	}
	if stores == nil {
		return fmt.Errorf("--feedback computes each epoch's weights from the reports of --run in the stores: name a dataset")
	}
	_, err = repository.BindFeedback(h, s, repository.FeedbackSource{Stores: stores, Name: name, Run: f.run})
	return err
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
	return names, weights, nil
}

// scaledMix is the weights the order uses for the weights given: the same,
// or, when their sum overflows, scaled by a power of two, which is exact:
// the shares, and so the order, are those of the weights given.
func scaledMix(given []float64) []float64 {
	weights := slices.Clone(given)
	if sum := sumOf(weights); math.IsInf(sum, 0) {
		_, e := math.Frexp(slices.Max(weights))
		for i := range weights {
			weights[i] = math.Ldexp(weights[i], -e-len(weights))
		}
	}
	return weights
}

func sumOf(xs []float64) float64 {
	sum := 0.0
	for _, x := range xs {
		sum += x
	}
	return sum
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

// checkSteps chooses the window for a dataset of shape sh where none was
// given, binds the spec to the order's input (layout.Spec owns the rules
// of both) and returns the batches per rank of its first epoch.
func (f *orderFlags) checkSteps(in *layout.Input, sh layout.Shape) (int, error) {
	s, err := f.spec()
	if err != nil {
		return 0, err
	}
	s.ChooseWindow(sh)
	return s.Bind(in)
}

// windowValue is --window: a number of shards (0: the global order), or
// auto (layout.WindowAuto), which the spec chooses for the dataset.
type windowValue int

func (w *windowValue) String() string {
	if *w == layout.WindowAuto {
		return "auto"
	}
	return strconv.Itoa(int(*w))
}

func (w *windowValue) Set(v string) error {
	if v == "auto" {
		*w = layout.WindowAuto
		return nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return fmt.Errorf("give auto, 0 (a global shuffle) or a number of shards per window")
	}
	*w = windowValue(n)
	return nil
}

// Type names the value in --help: "--window S".
func (w *windowValue) Type() string { return "S" }

// ranks lists the ranks to show; params has checked the spec.
func (f *orderFlags) ranks() []int {
	r, _ := parseRanks(f.rank, f.world)
	return r
}
