package layout

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// The rule itself, by hand: one stratum reported one unit above the
// others, step 1: its multiplier is e times theirs; a silent stratum
// counts as the mean; the largest multiplier is 1.
func TestNextMultipliers(t *testing.T) {
	w := NextMultipliers([]float64{1, 1, 1}, []float64{2, 1, math.NaN()}, 1)
	// mean of the reported = 1.5: logs +0.5, -0.5, 0
	want := []float64{1, math.Exp(-1), math.Exp(-0.5)}
	for c := range w {
		if math.Abs(w[c]-want[c]) > 1e-12 {
			t.Fatalf("multipliers %v, want %v", w, want)
		}
	}
	// A stratum reported low for many epochs sinks, but never to 0 (a
	// weight of 0 would leave it out and change the epoch's size).
	w = []float64{1, 1}
	for range 100 {
		w = NextMultipliers(w, []float64{0, 50}, 10)
	}
	if w[0] != minMultiplier || w[1] != 1 {
		t.Fatalf("after 100 epochs of a low loss: %v, want [%v 1]", w, minMultiplier)
	}
}

// Epoch by epoch, over random datasets, α, reports, steps and floors:
//   - epoch 0 is the natural order (no report needed, none asked for);
//   - a stratum reported above the others gets a larger share of the next
//     epoch, and every share is at least the floor;
//   - every batch of every rank holds each stratum within one sample of
//     B × its share of the epoch;
//   - the ranks interleave to the global order (an elastic resume deals the
//     same stream), and a second Feedback fed the same reports gives the
//     same orders: the weights are a pure function of the reports.
func TestPropertyFeedback(t *testing.T) {
	rng := rand.New(rand.NewPCG(43, 3))
	for i := 0; i < cases(t); i++ {
		in := randomInput(t, rng, 6, 400, 3000)
		p := Params{Seed: rng.Uint64(), World: 1 + rng.IntN(4), Batch: 4 + rng.IntN(60), Alpha: []float64{1, 0.5, 0}[rng.IntN(3)],
			Tail: []Tail{Drop, Pad}[rng.IntN(2)]}
		reports := make([][]float64, 4)
		for e := range reports {
			reports[e] = make([]float64, in.NumStrata)
			for c := range reports[e] {
				reports[e][c] = rng.Float64() * 3
				if rng.IntN(6) == 0 {
					reports[e][c] = math.NaN()
				}
			}
		}
		asked := map[int]int{}
		f := &Feedback{Step: 0.2 + rng.Float64()*2, Floor: []float64{0, 0.01, 0.05}[rng.IntN(3)]}
		// As repository.BindFeedback gives them: epoch e's from the reports
		// of epochs 0..e-1.
		f.Weights = func(e int) ([]float64, error) {
			for k := range e {
				asked[k]++
			}
			return f.Multipliers(in.NumStrata, reports[:e])
		}
		twin := &Feedback{Step: f.Step, Floor: f.Floor}
		twin.Weights = func(e int) ([]float64, error) { return twin.Multipliers(in.NumStrata, reports[:e]) }
		active := 0
		for c := range in.NumStrata {
			if in.Count(c) > 0 {
				active++
			}
		}
		if f.Floor*float64(active) > 1 {
			f.Floor, twin.Floor = 0, 0
		}
		var prevPi []float64
		for e := range 4 {
			s := &Spec{Base: p, ResumeEpoch: -1, Feedback: f}
			q, err := s.Params(e, 0)
			if err != nil {
				t.Fatalf("case %d epoch %d: %v", i, e, err)
			}
			if e == 0 && len(asked) > 0 {
				t.Fatalf("case %d: epoch 0 asked for reports %v", i, asked)
			}
			pi := TargetsOf(in, q)
			for c, x := range pi {
				if in.Count(c) > 0 && x < f.Floor-1e-9 {
					t.Fatalf("case %d epoch %d: stratum %d's share %v is below the floor %v", i, e, c, x, f.Floor)
				}
			}
			if e > 0 && f.Floor == 0 {
				// π^e ∝ π^{e-1}·exp(η(r−mean)): compare two strata's ratios.
				r := reports[e-1]
				mean, n := 0.0, 0
				for _, x := range r {
					if !math.IsNaN(x) {
						mean += x
						n++
					}
				}
				mean /= float64(n)
				for a := range pi {
					for b := range pi {
						if pi[a] == 0 || pi[b] == 0 || prevPi[a] == 0 || prevPi[b] == 0 || pi[a] < 1e-9 || pi[b] < 1e-9 {
							continue
						}
						ra, rb := r[a], r[b]
						if math.IsNaN(ra) {
							ra = mean
						}
						if math.IsNaN(rb) {
							rb = mean
						}
						got := math.Log(pi[a]/pi[b]) - math.Log(prevPi[a]/prevPi[b])
						if want := f.Step * (ra - rb); math.Abs(got-want) > 1e-6 {
							t.Fatalf("case %d epoch %d: log share ratio of strata %d/%d moved %v, want η(r_a−r_b) = %v", i, e, a, b, got, want)
						}
					}
				}
			}
			prevPi = pi
			orders := allRanks(t, in, q)
			if err := checkWeighted(in, q, orders); err != nil {
				t.Fatalf("case %d epoch %d (W=%d B=%d α=%v %s): %v", i, e, p.World, p.Batch, p.Alpha, f, err)
			}
			g := globalOf(t, in, q, orders)
			if !slices.Equal(interleaved(orders), g) {
				t.Fatalf("case %d epoch %d: interleaved ranks differ from the global order", i, e)
			}
			s2 := &Spec{Base: p, ResumeEpoch: -1, Feedback: twin}
			q2, err := s2.Params(e, 0)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(globalOf(t, in, q2, allRanks(t, in, q2)), g) {
				t.Fatalf("case %d epoch %d: the same reports gave another order", i, e)
			}
		}
	}
}

func TestParseFeedback(t *testing.T) {
	f, err := ParseFeedback("eg:step=0.5,floor=0.02")
	if err != nil || f.Step != 0.5 || f.Floor != 0.02 || f.String() != "eg:step=0.5,floor=0.02" {
		t.Fatalf("%+v %v", f, err)
	}
	if f, err := ParseFeedback("eg"); err != nil || f.Step != DefaultFeedbackStep || f.Floor != DefaultFeedbackFloor {
		t.Fatalf("%+v %v", f, err)
	}
	for in, want := range map[string]string{
		"doremi":       "the only rule is eg",
		"eg:step=0":    "step 0: must be a number above 0",
		"eg:floor=1":   "floor 1: must be in [0, 1)",
		"eg:speed=2":   `no setting "speed"`,
		"eg:step=fast": `"step=fast" is not NAME=NUMBER`,
	} {
		if _, err := ParseFeedback(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", in, err, want)
		}
	}
	s := &Spec{Base: Params{World: 1, Batch: 4, Alpha: 1, Window: 2}, ResumeEpoch: -1, Feedback: f}
	if err := s.Validate(); err == nil || !strings.Contains(err.Error(), "leave out window") {
		t.Fatalf("feedback with a window: %v", err)
	}
}

func TestCheckReport(t *testing.T) {
	strata := []string{"a", "b", "c"}
	r, err := CheckReport(map[string]float64{"a": 1, "c": 2}, strata)
	if err != nil || r[0] != 1 || !math.IsNaN(r[1]) || r[2] != 2 {
		t.Fatalf("%v %v", r, err)
	}
	if _, err := CheckReport(map[string]float64{"x": 1}, strata); err == nil || !strings.Contains(err.Error(), `stratum "x" is not one of the dataset's 3 (a, b, c)`) {
		t.Fatal(err)
	}
	if _, err := CheckReport(map[string]float64{"a": math.Inf(1)}, strata); err == nil || !strings.Contains(err.Error(), "not a finite number") {
		t.Fatal(err)
	}
	if _, err := CheckReport(map[string]float64{}, strata); err == nil {
		t.Fatal("an empty report was accepted")
	}
}

// Issue 55 item 7: reports of 1e308 (or -1e308) for every stratum were
// accepted, and every later epoch's weights were NaN (EIO). Whatever a
// report CheckReport accepts, and whatever step Validate accepts, every
// weight of every epoch is finite, in [minMultiplier, 1]: reports at the
// bound, mixed signs, one value, none, at the largest step, over many
// epochs; and values past the bound are refused, naming the stratum.
func TestReportsMakeFiniteWeights(t *testing.T) {
	strata := []string{"a", "b", "c", "d"}
	for _, v := range []float64{1e308, -1e308, math.MaxFloat64, MaxReportValue * 1.0001, -MaxReportValue * 2} {
		_, err := CheckReport(map[string]float64{"a": 0.5, "c": v}, strata)
		if err == nil || !strings.Contains(err.Error(), `stratum "c"`) || !strings.Contains(err.Error(), "would not be finite") {
			t.Fatalf("report value %v: %v; want it refused, naming stratum c", v, err)
		}
	}
	if _, err := ParseFeedback("eg:step=1e300"); err == nil || !strings.Contains(err.Error(), "at most 1e+06") {
		t.Fatalf("a step of 1e300: %v", err)
	}
	rng := rand.New(rand.NewPCG(55, 7))
	pick := func() float64 {
		switch rng.IntN(6) {
		case 0:
			return MaxReportValue
		case 1:
			return -MaxReportValue
		case 2:
			return math.NaN() // not reported
		case 3:
			return 0
		default:
			return (rng.Float64()*2 - 1) * math.Pow(10, float64(rng.IntN(16)))
		}
	}
	for trial := range 2000 {
		step := []float64{MaxFeedbackStep, DefaultFeedbackStep, 1e-9, rng.Float64() * MaxFeedbackStep}[trial%4]
		f := &Feedback{Step: step, Floor: DefaultFeedbackFloor}
		if err := f.Validate(); err != nil {
			t.Fatal(err)
		}
		var reports [][]float64
		for range 1 + rng.IntN(6) {
			values := map[string]float64{}
			for _, s := range strata {
				if v := pick(); !math.IsNaN(v) {
					values[s] = v
				}
			}
			if len(values) == 0 {
				values["b"] = MaxReportValue
			}
			r, err := CheckReport(values, strata)
			if err != nil {
				t.Fatalf("trial %d: a report within the bound refused: %v", trial, err)
			}
			reports = append(reports, r)
		}
		w, err := f.Multipliers(len(strata), reports)
		if err != nil {
			t.Fatal(err)
		}
		for c, x := range w {
			if !(x >= minMultiplier && x <= 1) {
				t.Fatalf("trial %d, step %v, reports %v: weight %d is %v", trial, step, reports, c, x)
			}
		}
	}
}
