package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/layout"
	"github.com/shardfs/shardfs/manifest"
	"github.com/shardfs/shardfs/repository"
	"github.com/shardfs/shardfs/synthetic"
)

func newPlanCmd(g *globals) *cobra.Command {
	of := &orderFlags{}
	var emit, describe string
	var epoch, syntheticSamples, syntheticBuckets, lookahead, compareWindow int
	var prices requestPrices
	var pr *printer
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
			pr.out = cmd.OutOrStdout()
			if of.epochs < 1 {
				return fmt.Errorf("--epochs %d: plan shows a finite number of epochs: pass 1 or more", of.epochs)
			}
			if err := checkPlanNumbers(epoch, syntheticSamples, syntheticBuckets, lookahead, compareWindow); err != nil {
				return err
			}
			if pr.json && (of.mix != "" || syntheticSamples > maxSyntheticRows || emit != "") {
				return fmt.Errorf("--json prints plan's report of one dataset: leave it out with --mix, --emit or --synthetic above %d samples (they print text only)", maxSyntheticRows)
			}
			if of.mix != "" {
				if len(args) > 0 || syntheticSamples > 0 {
					return fmt.Errorf("with --mix the datasets come from the mix: give no NAME and no --synthetic")
				}
				stores, err := g.openStores()
				if err != nil {
					return err
				}
				return printMixPlan(cmd.Context(), cmd.OutOrStdout(), stores, of, g.logger())
			}
			switch {
			case syntheticSamples > maxSyntheticRows:
				if emit != "" {
					return fmt.Errorf("--emit with --synthetic above %d samples: the keys are not modelled; use a smaller --synthetic", maxSyntheticRows)
				}
				return printCountsPlan(cmd.Context(), cmd.OutOrStdout(), syntheticSamples, syntheticBuckets, of, describe)
			case describe != "":
				return fmt.Errorf("--describe needs --synthetic above %d samples: it writes a dataset description of counts only", maxSyntheticRows)
			case syntheticSamples > 0:
				var err error
				if m, err = synthetic.Manifest(syntheticSamples, syntheticBuckets); err != nil {
					return err
				}
			case len(args) == 1:
				stores, err := g.openStores()
				if err != nil {
					return err
				}
				if m, err = repository.LoadManifestVersion(cmd.Context(), stores, args[0], of.datasetVersion, g.logger()); err != nil {
					return err
				}
				if err := of.bindFeedback(&m.Header, stores, args[0]); err != nil {
					return err
				}
			default:
				return fmt.Errorf("name a dataset, or pass --synthetic N")
			}
			if err := of.setTimes(&m.Header); err != nil {
				return err
			}
			if emit != "" {
				if emit != "index" {
					return fmt.Errorf("--emit %q: only index is supported", emit)
				}
				of.firstEpoch, of.sp = epoch, nil
				return emitIndex(cmd.OutOrStdout(), m, of, epoch)
			}
			if prices.per1kGETs < 0 || prices.perGB < 0 {
				return fmt.Errorf("--price-per-1k-gets %v, --price-per-gb %v: prices are 0 or more", prices.per1kGETs, prices.perGB)
			}
			return printPlan(cmd.Context(), pr, m, of, lookahead, compareWindow, prices)
		},
	}
	of.register(cmd.Flags(), orderDefaults{rank: "0", rankHelp: "the ranks to plan (only rank 0 unless asked: planning every rank of a large world costs as much as serving it)",
		epochs: 1, epochsHelp: "number of epochs to plan"})
	pr = addJSONFlag(cmd)
	cmd.Flags().StringVar(&emit, "emit", "", "write one file of the mount instead of the report: index")
	cmd.Flags().IntVar(&epoch, "epoch", 0, "epoch for --emit")
	cmd.Flags().IntVar(&syntheticSamples, "synthetic", 0, "plan a synthetic dataset of N samples (100 classes, 64 MiB shards of ~100 kB samples)")
	cmd.Flags().IntVar(&syntheticBuckets, "synthetic-time-buckets", 0, "with --synthetic: cut every class into this many 30-day time buckets, each 10% larger than the one before (strata: classes x buckets)")
	cmd.Flags().StringVar(&describe, "describe", "", "with --synthetic above 10,000,000: write the dataset's format-3 description (root and group objects, counts only) to this directory, then start rank --rank from it as a node would; a directory that holds it already is only read")
	cmd.Flags().IntVar(&lookahead, "lookahead", 8, "batches a reader fetches at once, for the ranged-GET count")
	cmd.Flags().IntVar(&compareWindow, "compare-window", 8, "window to compare with when --window is 0 (and the reverse)")
	cmd.Flags().Float64Var(&prices.per1kGETs, "price-per-1k-gets", 0, "dollars per 1,000 GETs, for the job's cost per epoch (S3 Standard: 0.0004; 0, the default, prices requests at nothing)")
	cmd.Flags().Float64Var(&prices.perGB, "price-per-gb", 0, "dollars per GB read from the stores (transfer out of a region, e.g. 0.09; 0, the default: reads inside the region)")
	return cmd
}

// mergeGap: a reader fetches a gap this small rather than pay for another GET.
const mergeGap = 64 << 10

func emitIndex(out io.Writer, m *manifest.Manifest, of *orderFlags, epoch int) error {
	spec, err := of.spec()
	if err != nil {
		return err
	}
	plan, err := repository.PlanOrder(&repository.Dataset{Manifest: m}, spec)
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
	f := layout.NewMembers(o, repository.ManifestCatalog{M: m}.ForLayout()).Index()
	buf := make([]byte, f.Size())
	for _, e := range f.Extents(nil, 0, f.Size()) {
		f.Render(e, buf[e.FileOff:e.FileOff+e.Len])
	}
	_, err = out.Write(buf)
	return err
}

// maxSyntheticBuckets bounds --synthetic-time-buckets: 600 buckets of 30
// days end in 2026 and start in 1976, in Unix time.
const maxSyntheticBuckets = 600

// checkPlanNumbers refuses plan's own numbers out of range, naming the
// flag: a lookahead of 0 would never advance.
func checkPlanNumbers(epoch, syntheticSamples, syntheticBuckets, lookahead, compareWindow int) error {
	switch {
	case epoch < 0:
		return fmt.Errorf("--epoch %d: epochs count from 0", epoch)
	case syntheticSamples < 0:
		return fmt.Errorf("--synthetic %d: give a number of samples, 1 or more", syntheticSamples)
	case syntheticBuckets < 0 || syntheticBuckets > maxSyntheticBuckets:
		return fmt.Errorf("--synthetic-time-buckets %d: give 0 (classes alone) to %d", syntheticBuckets, maxSyntheticBuckets)
	case lookahead < 1:
		return fmt.Errorf("--lookahead %d: a reader fetches 1 or more batches at once", lookahead)
	case compareWindow < 1:
		return fmt.Errorf("--compare-window %d: the window compared with holds 1 or more shards", compareWindow)
	}
	return nil
}

// planReport is what plan prints (--json: as one document): per epoch and
// rank, how close the batches keep to the targets and what a reader
// fetches; then epoch 0's mix of the strata.
type planReport struct {
	Dataset       string        `json:"dataset"`
	Samples       int           `json:"samples"`
	Strata        int           `json:"strata"`
	Shards        int           `json:"shards"`
	Data          int           `json:"data"`
	Parity        int           `json:"parity"`
	OrderVersion  int           `json:"order_version"`
	World         int           `json:"world_size"`
	Batch         int           `json:"batch_size"`
	Seed          uint64        `json:"seed"`
	Alpha         float64       `json:"alpha"`
	AlphaSchedule string        `json:"alpha_schedule"`
	Preset        string        `json:"preset,omitempty"`
	MinShare      float64       `json:"min_share,omitempty"`
	Tail          string        `json:"tail"`
	Window        int           `json:"window"`
	WindowAuto    bool          `json:"window_auto"`  // chosen for the dataset: --window was not given
	WindowTrade   string        `json:"window_trade"` // the locality read, and what it trades, in words
	Affinity      bool          `json:"affinity"`
	ResumeAt      string        `json:"resume_at"`
	Lookahead     int           `json:"lookahead"`
	CompareWindow int           `json:"compare_window"`
	RankEpochs    []planRankRow `json:"rank_epochs"`
	// Job is what the whole job (every rank) reads per epoch, and costs.
	Job            []planJobEpoch `json:"job_epochs"`
	PricePer1kGETs float64        `json:"price_per_1k_gets"`
	PricePerGB     float64        `json:"price_per_gb"`
	MixRank        int            `json:"mix_rank"`
	Mix            []planMixEntry `json:"mix"` // epoch 0 of MixRank, every stratum
}

type planRankRow struct {
	Epoch          int     `json:"epoch"`
	Rank           int     `json:"rank"`
	Batches        int     `json:"batches"`
	Samples        int     `json:"samples"`
	TVMean         float64 `json:"tv_mean"`
	TVMax          float64 `json:"tv_max"`
	UniformTVMean  float64 `json:"uniform_tv_mean"`
	UniformTVMax   float64 `json:"uniform_tv_max"`
	GETs           int     `json:"gets"`
	ReadBytes      int64   `json:"read_bytes"`
	CompareGETs    int     `json:"compare_gets"`       // with the other window
	CompareRead    int64   `json:"compare_read_bytes"` // with the other window
	CompareWindowN int     `json:"compare_window"`
}

// planJobEpoch is one epoch of the whole job: its GETs and bytes, exact
// when every rank was planned, else the planned ranks' mean times the
// world size; and its cost at the given prices.
type planJobEpoch struct {
	Epoch        int     `json:"epoch"`
	GETs         int64   `json:"gets"`
	ReadBytes    int64   `json:"read_bytes"`
	RanksPlanned int     `json:"ranks_planned"`
	Exact        bool    `json:"exact"`
	Dollars      float64 `json:"dollars"`
	// The same with the other window (planReport.CompareWindow).
	CompareGETs      int64   `json:"compare_gets"`
	CompareReadBytes int64   `json:"compare_read_bytes"`
	CompareDollars   float64 `json:"compare_dollars"`
}

// requestPrices are what the stores charge: per 1,000 GETs, per GB read.
type requestPrices struct{ per1kGETs, perGB float64 }

func (p requestPrices) cost(gets, bytes int64) float64 {
	return float64(gets)/1000*p.per1kGETs + float64(bytes)/1e9*p.perGB
}

// jobEpochs sums the planned rank-epochs into the whole job's epochs.
func jobEpochs(rows []planRankRow, world int, prices requestPrices) []planJobEpoch {
	var out []planJobEpoch
	for _, r := range rows {
		if len(out) == 0 || out[len(out)-1].Epoch != r.Epoch {
			out = append(out, planJobEpoch{Epoch: r.Epoch})
		}
		j := &out[len(out)-1]
		j.GETs += int64(r.GETs)
		j.ReadBytes += r.ReadBytes
		j.CompareGETs += int64(r.CompareGETs)
		j.CompareReadBytes += r.CompareRead
		j.RanksPlanned++
	}
	for i := range out {
		j := &out[i]
		j.Exact = j.RanksPlanned == world
		if !j.Exact {
			scale := func(v int64) int64 { return v * int64(world) / int64(j.RanksPlanned) }
			j.GETs, j.ReadBytes = scale(j.GETs), scale(j.ReadBytes)
			j.CompareGETs, j.CompareReadBytes = scale(j.CompareGETs), scale(j.CompareReadBytes)
		}
		j.Dollars, j.CompareDollars = prices.cost(j.GETs, j.ReadBytes), prices.cost(j.CompareGETs, j.CompareReadBytes)
	}
	return out
}

type planMixEntry struct {
	Stratum   string  `json:"stratum"`
	Samples   int     `json:"samples"`
	DataShare float64 `json:"data_share"`
	Target    float64 `json:"target"`
	Served    float64 `json:"served"`
}

func printPlan(ctx context.Context, pr *printer, m *manifest.Manifest, of *orderFlags, lookahead, compareWindow int, prices requestPrices) error {
	spec, err := of.spec()
	if err != nil {
		return err
	}
	plan, err := repository.PlanOrder(&repository.Dataset{Manifest: m}, spec)
	if err != nil {
		return err
	}
	in, p0 := plan.Input, plan.First
	cat := repository.ManifestCatalog{M: m}
	rep := planReport{Dataset: m.Name, Samples: m.Samples.Len(), Strata: len(m.Strata), Shards: len(m.Shards), Data: m.Data, Parity: m.Parity,
		OrderVersion: of.orderVersion(), World: of.world, Batch: of.batch, Seed: of.seed, Alpha: of.alpha, AlphaSchedule: of.alphaSchedule, Preset: of.preset, MinShare: of.minShare,
		Tail: of.tail, Window: spec.Base.Window, WindowAuto: spec.WindowChosen, Affinity: of.affinity, ResumeAt: of.resumeAt, Lookahead: lookahead, MixRank: of.ranks()[0],
		WindowTrade: spec.WindowTrade(repository.Shape(&repository.Dataset{Manifest: m}))}
	pi := layout.TargetsOf(in, p0) // epoch 0's, for the class mix table
	other := spec.Compared(compareWindow)
	rep.CompareWindow = other.Base.Window
	var first layout.BatchStats
	err = eachOrder(ctx, of, in, func(e, r int, p layout.Params, o *layout.RankOrder) error {
		st := layout.Stats(o, in, layout.TargetsOf(in, p))
		if e == 0 && r == of.ranks()[0] {
			first = st
		}
		uni := layout.Stats(layout.UniformOrder(in, p), in, uniformTargets(in, p))
		gets, bytes := layout.ReadPlan(o, cat, lookahead, mergeGap)
		op, err := other.Params(e, r)
		if err != nil {
			return err
		}
		oo, err := layout.Order(in, op)
		if err != nil {
			return err
		}
		ogets, obytes := layout.ReadPlan(oo, cat, lookahead, mergeGap)
		rep.RankEpochs = append(rep.RankEpochs, planRankRow{Epoch: e, Rank: r, Batches: o.Batches, Samples: o.Samples.Len(), TVMean: st.MeanTV, TVMax: st.MaxTV,
			UniformTVMean: uni.MeanTV, UniformTVMax: uni.MaxTV, GETs: gets, ReadBytes: bytes, CompareGETs: ogets, CompareRead: obytes, CompareWindowN: other.Base.Window})
		return nil
	})
	if err != nil {
		return err
	}
	rep.Job, rep.PricePer1kGETs, rep.PricePerGB = jobEpochs(rep.RankEpochs, of.world, prices), prices.per1kGETs, prices.perGB
	for c := range m.Strata {
		rep.Mix = append(rep.Mix, planMixEntry{Stratum: m.Strata[c].Name, Samples: m.Strata[c].Count,
			DataShare: float64(m.Strata[c].Count) / float64(m.Samples.Len()), Target: pi[c], Served: first.Share[c]})
	}
	return pr.print(rep, func(out io.Writer) error { return printPlanText(out, m, of, in, p0, &rep) })
}

// printPlanText prints plan's report as text, with what only the text
// shows: the strata by field, time windows, affinity and field plans.
func printPlanText(out io.Writer, m *manifest.Manifest, of *orderFlags, in *layout.Input, p0 layout.Params, rep *planReport) error {
	fmt.Fprintf(out, "dataset %s: %d samples, %d strata, %d shards, RS(%d,%d)\n", rep.Dataset, rep.Samples, rep.Strata, rep.Shards, rep.Data, rep.Parity)
	fmt.Fprintf(out, "order: version %d, W=%d B=%d seed=%d alpha=%v alpha-schedule=%q tail=%s window=%d affinity=%v resume-at=%q\n", rep.OrderVersion, rep.World, rep.Batch, rep.Seed, rep.Alpha, rep.AlphaSchedule, rep.Tail, rep.Window, rep.Affinity, rep.ResumeAt)
	if !rep.Affinity {
		fmt.Fprintf(out, "window: %s\n", rep.WindowTrade)
	}
	if err := printStrataByField(out, m); err != nil {
		return err
	}
	if err := printTimeWindows(out, of); err != nil {
		return err
	}
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(out, "GETs: ranged reads per rank-epoch when fetching %d batches at a time and merging ranges\non a fragment less than %s apart; read: bytes those GETs fetch.\n\n", rep.Lookahead, humanize.IBytes(mergeGap))
	fmt.Fprintf(tw, "epoch\trank\tbatches\tsamples\tTV mean\tTV max\tuniform TV mean\tuniform TV max\tGETs (window=%d)\tread\tGETs (window=%d)\tread\t\n", rep.Window, rep.CompareWindow)
	for _, r := range rep.RankEpochs {
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%.4f\t%.4f\t%.4f\t%.4f\t%d\t%s\t%d\t%s\t\n", r.Epoch, r.Rank, r.Batches, r.Samples,
			r.TVMean, r.TVMax, r.UniformTVMean, r.UniformTVMax, r.GETs, humanize.IBytes(uint64(r.ReadBytes)), r.CompareGETs, humanize.IBytes(uint64(r.CompareRead)))
	}
	tw.Flush()
	printJobCost(out, rep)
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
	if p0.MinShare > 0 {
		target += fmt.Sprintf(", each at least %v", p0.MinShare)
	}
	fmt.Fprintf(out, "\nclass mix, epoch 0 rank %d (target %s):\n", rep.MixRank, target)
	tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "stratum\tsamples\tdata share\ttarget\tserved\t\n")
	limit := min(len(rep.Mix), 20)
	for _, x := range rep.Mix[:limit] {
		fmt.Fprintf(tw, "%s\t%d\t%.4f\t%.4f\t%.4f\t\n", x.Stratum, x.Samples, x.DataShare, x.Target, x.Served)
	}
	tw.Flush()
	if limit < len(rep.Mix) {
		fmt.Fprintf(out, "(%d more strata)\n", len(rep.Mix)-limit)
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
	if !of.timed() {
		return nil // an order without time weights has no windows to show
	}
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
		fmt.Fprintf(out, "field %s, per-batch deviation |count - batch size x share| over its values: mean %.2f max %.2f samples; uniform shuffle mean %.2f max %.2f (%s)\n",
			f, ours.MeanDeviation, ours.MaxDeviation, base.MeanDeviation, base.MaxDeviation, fieldPromise(i, p))
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

// fieldPromise says what the order promises field i (0-based, in the
// order the fields were named) in every batch.
func fieldPromise(i int, p layout.Params) string {
	switch {
	case p.Window > 0 || p.Affinity || p.Mix != nil:
		return "windows, affinity and mixes balance the strata, not each field"
	case p.OrderVersion() < 5:
		return fmt.Sprintf("order version %d balances the strata, not each field: version 5 holds the first two fields within one sample", p.OrderVersion())
	case i < 2:
		return "within one sample in every batch: order version 5 balances the first two fields named"
	}
	return "order version 5 bounds the fields after the first two, and does not hold them within one sample"
}

// maxSyntheticRows: above it, --synthetic models per-shard class counts only.
const maxSyntheticRows = 10_000_000

// printCountsPlan plans a synthetic dataset of n samples from counts
// alone: 64 MiB shards of ~100 kB samples, each stratum spread evenly over
// them, as ingest's stratified placement gives.
func printCountsPlan(ctx context.Context, out io.Writer, n, buckets int, of *orderFlags, describe string) error {
	spec, err := of.spec()
	if err != nil {
		return err
	}
	p := spec.Base
	p.Window = max(p.Window, 0) // an automatic window reads globally from counts
	if p.Needs() == layout.NeedsSamples {
		return fmt.Errorf("--synthetic above %d samples plans from class counts the global order of order version 2 or later, or rank affinity of order version 3: leave out --window and --order-version 1 (and 2, with --affinity)", maxSyntheticRows)
	}
	start := time.Now()
	const perShard = 671 // 64 MiB of 100 kB samples
	h := synthetic.Header(buckets)
	if err := of.setTimes(&h); err != nil {
		return err
	}
	if err := of.bindFeedback(&h, nil, ""); err != nil {
		return err
	}
	pi := synthetic.Share(buckets)
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
	var found *backend.Local
	if describe != "" {
		h.IngestID, h.Data, h.Parity, h.BlockSize, h.ShardSize = "synthetic", 4, 2, 1<<20, 64<<20
		h.Stores = []string{"store-0", "store-1", "store-2", "store-3", "store-4", "store-5"}
		if found, err = findDescription(ctx, describe, h, stratumCounts(in), shards); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "synthetic dataset: %d samples, %d strata, %d shards of about %d samples (each stratum spread evenly over the shards; input built in %s)\n",
		n, len(pi), shards, n/shards, time.Since(start).Round(time.Millisecond))
	fmt.Fprintf(out, "order: version %d, W=%d B=%d seed=%d alpha=%v tail=%s\n", of.orderVersion(), of.world, of.batch, of.seed, of.alpha, of.tail)
	if err := printTimeWindows(out, of); err != nil {
		return err
	}
	fmt.Fprintln(out)
	if _, err := of.checkSteps(in, layout.Shape{}); err != nil { // counts only: the global order
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
		st, err := describeSynthetic(ctx, out, describe, h, stratumCounts(in), shards, found)
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

// stratumCounts are in's samples per stratum.
func stratumCounts(in *layout.Input) []int {
	counts := make([]int, in.NumStrata)
	for c := range counts {
		counts[c] = in.Count(c)
	}
	return counts
}

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
	spec, err := of.spec()
	if err != nil {
		return err
	}
	type mode struct {
		name    string
		spec    *layout.Spec
		batches [2][]layout.Positions
		tv      float64
	}
	modes := []*mode{{name: "affinity", spec: spec}, {name: "global order", spec: spec.Global()}}
	pi := layout.Targets(in, 1)
	for _, md := range modes {
		n := 0
		for e := 0; e < 2; e++ {
			for r := 0; r < of.world; r++ {
				p, err := md.spec.Params(e, r)
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
	var parts []*repository.Dataset
	for _, n := range names {
		m, err := repository.LoadManifest(ctx, stores, n, log)
		if err != nil {
			return fmt.Errorf("--mix: %w", err)
		}
		parts = append(parts, &repository.Dataset{Name: n, Manifest: m})
	}
	mix, err := repository.NewMix(parts)
	if err != nil {
		return err
	}
	in, err := mix.Input()
	if err != nil {
		return err
	}
	if _, err := of.checkSteps(in, layout.Shape{}); err != nil { // a mix: the global order
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

// printJobCost prints what the whole job reads per epoch, in GETs and
// bytes, and what that costs at the given prices.
func printJobCost(out io.Writer, rep *planReport) {
	if len(rep.Job) == 0 {
		return
	}
	how := "every rank planned"
	if !rep.Job[0].Exact {
		how = fmt.Sprintf("estimated from %d of %d ranks: their mean times %d; --rank all counts them all", rep.Job[0].RanksPlanned, rep.World, rep.World)
	}
	fmt.Fprintf(out, "\nthe whole job (%d ranks), per epoch (%s), at $%v per 1,000 GETs and $%v per GB read:\n", rep.World, how, rep.PricePer1kGETs, rep.PricePerGB)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "epoch\tGETs (window=%d)\tread\tGETs per GB\tdollars\tGETs (window=%d)\tread\tGETs per GB\tdollars\t\n", rep.Window, rep.CompareWindow)
	perGB := func(gets, bytes int64) string {
		if bytes == 0 {
			return "-"
		}
		return fmt.Sprintf("%.0f", float64(gets)/(float64(bytes)/1e9))
	}
	for _, j := range rep.Job {
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%.4f\t%d\t%s\t%s\t%.4f\t\n", j.Epoch, j.GETs, humanize.IBytes(uint64(j.ReadBytes)), perGB(j.GETs, j.ReadBytes), j.Dollars,
			j.CompareGETs, humanize.IBytes(uint64(j.CompareReadBytes)), perGB(j.CompareGETs, j.CompareReadBytes), j.CompareDollars)
	}
	tw.Flush()
	if rep.PricePer1kGETs == 0 && rep.PricePerGB == 0 {
		fmt.Fprintln(out, "(no prices given: pass --price-per-1k-gets, e.g. 0.0004 for S3 Standard, and --price-per-gb for reads out of the region)")
	}
	fmt.Fprintln(out, "GETs count healthy reads of data fragments; a store down makes a range's GETs k, and hedges add some.")
}
