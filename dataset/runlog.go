package dataset

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"sync"
	"time"

	"log/slog"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/layout"
	"github.com/shardfs/shardfs/manifest"
)

// The run log: what the trainer reported about each epoch of a run that
// re-weights its strata from those reports (layout.Feedback). The next
// epoch's weights are a pure function of the reports, so the reports are
// all a run has to record for every node, and every resumed job, to
// compute the same order: NAME/runs/RUN/report-EEEEEE, one object per
// epoch, a copy on every store.
//
// A report is written once. Its bytes are canonical (the run, the epoch and
// the values by stratum name, in JSON with sorted keys), so two writers of
// the same report write the same bytes.
//
// Why no two readers ever take different reports for one epoch, whatever
// is killed or fails: a report counts only once a majority of all the
// stores, ⌊n/2⌋+1, hold exactly its bytes.
//   - Each store holds at most one copy: the writer creates the object with
//     a conditional PUT (backend.Store.Create: where one is, none is
//     written) and never overwrites one.
//   - Two sets of ⌊n/2⌋+1 of n stores share a store, which holds one copy,
//     so at most one report of an epoch can ever reach a majority; a reader
//     takes a report only when it sees a majority holding it. Readers that
//     see different stores therefore take the same report, or wait.
//   - The writer reads first: a report already counted with other numbers
//     makes it write nothing and say so (the first counted report stands,
//     which is what a resumed job needs: it recomputes the weights it
//     had). It then creates its bytes on every store, accepts a store's
//     copy only if it holds exactly its bytes, and succeeds only when a
//     majority hold them.
//   - A writer killed part way leaves copies on fewer stores than a
//     majority, or on a majority (then the report counts). Short of one,
//     readers wait (the mount, up to --report-wait), and the same report
//     written again completes it; a different one may take the stores
//     left, and counts if it reaches a majority, since the first never did.
//   - Availability: a report on every store stays readable while fewer than
//     half the stores are down (m of RS(k, m) with k > m). Copies split so
//     that no report can reach a majority (two writers racing with other
//     numbers, each on half) leave the epoch unreadable, and say so.
//
// Nothing here deletes: reports go with the dataset (shardfs delete).

// RunPrefix holds the log of run of dataset name.
func RunPrefix(name, run string) string { return name + "/runs/" + run + "/" }

// ReportKey names the trainer's report of epoch of run.
func ReportKey(name, run string, epoch int) string {
	return fmt.Sprintf("%sreport-%06d", RunPrefix(name, run), epoch)
}

var runName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$`)

// CheckRunName explains what is wrong with a run's name.
func CheckRunName(run string) error {
	if !runName.MatchString(run) {
		return fmt.Errorf("run name %q: use 1 to 100 letters, digits, '.', '_' or '-', starting with a letter or digit", run)
	}
	return nil
}

// EpochReport is the trainer's report of one epoch of a run: a number per
// stratum, by the stratum's name (info.json's strata).
type EpochReport struct {
	Run    string             `json:"run"`
	Epoch  int                `json:"epoch"`
	Strata map[string]float64 `json:"strata"`
}

// maxReportBytes bounds a report object: a number per stratum.
const maxReportBytes = 4 << 20

func (r *EpochReport) encode() ([]byte, error) {
	for name, x := range r.Strata {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nil, fmt.Errorf("stratum %q: %v is not a finite number", name, x)
		}
	}
	b, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	if len(b) > maxReportBytes {
		return nil, fmt.Errorf("the report is %d bytes, more than %d", len(b), maxReportBytes)
	}
	return b, nil
}

// ErrReportRecorded: the run's log already holds another report of that
// epoch; the first one stands.
var ErrReportRecorded = errors.New("already recorded")

// RecordReport writes r into the run log of dataset name on stores (see
// the protocol above). It returns nil when a majority of the stores hold
// exactly r, also when r was recorded before.
func RecordReport(ctx context.Context, stores []backend.Store, name string, r *EpochReport) error {
	if err := CheckRunName(r.Run); err != nil {
		return err
	}
	data, err := r.encode()
	if err != nil {
		return err
	}
	key := ReportKey(name, r.Run, r.Epoch)
	if old, err := ReadReport(ctx, stores, name, r.Run, r.Epoch); err != nil && !errors.Is(err, ErrReportIncomplete) {
		return err
	} else if old != nil {
		oldData, _ := old.encode()
		if !bytes.Equal(oldData, data) {
			return fmt.Errorf("run %s: epoch %d's report is %w with other numbers (%s); the first report of an epoch stands, so a resumed job gets the weights it had", r.Run, r.Epoch, ErrReportRecorded, oldData)
		}
	}
	errs := backend.OnEvery(stores, func(i int, s backend.Store) error {
		err := s.Create(ctx, key, data)
		if !errors.Is(err, backend.ErrExists) {
			return err
		}
		got, err := readSmall(ctx, s, key, maxReportBytes)
		if err != nil {
			return err
		}
		if !bytes.Equal(got, data) {
			return fmt.Errorf("holds a copy of another report of epoch %d (%s)", r.Epoch, got)
		}
		return nil
	})
	ok := 0
	var failed []error
	for i, err := range errs {
		if err == nil {
			ok++
		} else {
			failed = append(failed, fmt.Errorf("store %d (%s): %w", i, stores[i], err))
		}
	}
	if need := len(stores)/2 + 1; ok < need {
		return fmt.Errorf("run %s: epoch %d's report reached %d of %d stores, fewer than the %d a report needs: %w", r.Run, r.Epoch, ok, len(stores), need, errors.Join(failed...))
	}
	return nil
}

// ErrReportIncomplete: copies of a report exist, on fewer stores than a
// report needs to count.
var ErrReportIncomplete = errors.New("is on fewer stores than a report needs")

// ReadReport returns epoch's report of run: the one a majority of the
// stores hold (nil when no store holds one). Copies on fewer stores give
// an error that wraps ErrReportIncomplete; it also fails when no store
// answers.
func ReadReport(ctx context.Context, stores []backend.Store, name, run string, epoch int) (*EpochReport, error) {
	key := ReportKey(name, run, epoch)
	var mu sync.Mutex
	var copies [][]byte
	errs := backend.OnEvery(stores, func(i int, s backend.Store) error {
		b, err := readSmall(ctx, s, key, maxReportBytes)
		if errors.Is(err, backend.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		var r EpochReport
		if json.Unmarshal(b, &r) != nil || r.Epoch != epoch || r.Run != run {
			return fmt.Errorf("store %s: %s is not a report of run %s epoch %d", s, key, run, epoch)
		}
		mu.Lock()
		copies = append(copies, b)
		mu.Unlock()
		return nil
	})
	failed := 0
	for _, err := range errs {
		if err != nil {
			failed++
		}
	}
	if len(copies) == 0 {
		if failed == len(stores) {
			return nil, fmt.Errorf("run %s: reading epoch %d's report: no store answered: %w", run, epoch, errors.Join(errs...))
		}
		return nil, nil
	}
	need := len(stores)/2 + 1
	slices.SortFunc(copies, bytes.Compare)
	most := 0
	for i := 0; i < len(copies); {
		j := i
		for j < len(copies) && bytes.Equal(copies[j], copies[i]) {
			j++
		}
		if j-i >= need {
			var r EpochReport
			if err := json.Unmarshal(copies[i], &r); err != nil {
				return nil, err
			}
			return &r, nil
		}
		most = max(most, j-i)
		i = j
	}
	return nil, fmt.Errorf("run %s: epoch %d's report %w: %d of %d stores hold the same copy (%d copies, %d stores did not answer), and it takes %d: the stores holding it may be down, or its writer stopped part way (reporting the same numbers again completes it)",
		run, epoch, ErrReportIncomplete, most, len(stores), len(copies), failed, need)
}

// readSmall reads key whole from s, refusing one over limit bytes.
func readSmall(ctx context.Context, s backend.Store, key string, limit int64) ([]byte, error) {
	size, err := s.Stat(ctx, key)
	if err != nil {
		return nil, err
	}
	if size > limit {
		return nil, fmt.Errorf("store %s: %s is %d bytes, more than %d", s, key, size, limit)
	}
	b := make([]byte, size)
	if err := s.ReadAt(ctx, key, b, 0); err != nil {
		return nil, err
	}
	return b, nil
}

// FeedbackSource is where a spec's layout.Feedback gets the trainer's
// reports: the run log of one run of a dataset, on its stores.
type FeedbackSource struct {
	Stores []backend.Store
	Name   string // the dataset
	Run    string
	// Wait bounds how long a report not yet recorded is waited for
	// (polled every Poll); 0 does not wait.
	Wait, Poll time.Duration
	Log        *slog.Logger
}

// BindFeedback gives spec's feedback rule the strata of h and the reports
// of src's run: epoch e's order then waits for the report of epoch e-1,
// up to src.Wait. A spec without feedback is left as it is.
func BindFeedback(h *manifest.Header, spec *layout.Spec, src FeedbackSource) error {
	f := spec.Feedback
	if f == nil {
		return nil
	}
	if err := CheckRunName(src.Run); err != nil {
		return err
	}
	names := make([]string, len(h.Strata))
	for c, s := range h.Strata {
		names[c] = s.Name
	}
	f.Strata = len(names)
	poll := cmp.Or(src.Poll, 2*time.Second)
	f.Reports = func(epoch int) ([]float64, error) {
		deadline := time.Now().Add(src.Wait)
		waited := false
		for {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			r, err := ReadReport(ctx, src.Stores, src.Name, src.Run, epoch)
			cancel()
			if err == nil && r != nil {
				v, err := layout.CheckReport(r.Strata, names)
				if err != nil {
					return nil, fmt.Errorf("run %s: epoch %d's report: %v", src.Run, epoch, err)
				}
				if waited && src.Log != nil {
					src.Log.Info("the trainer's report arrived", "run", src.Run, "epoch", epoch)
				}
				return v, nil
			}
			if time.Now().Add(poll).After(deadline) {
				if err != nil {
					return nil, err
				}
				return nil, fmt.Errorf("run %s: epoch %d's weights come from the trainer's report of epoch %d, and none is recorded (waited %v): report it on rank 0 when the epoch ends (the Python loader's report(), or shardfs report --run %s --epoch %d %s FILE)",
					src.Run, epoch+1, epoch, src.Wait, src.Run, epoch, src.Name)
			}
			if !waited && src.Log != nil {
				src.Log.Info("waiting for the trainer's report of the epoch before", "run", src.Run, "epoch", epoch+1, "report_of", epoch, "wait", src.Wait)
			}
			waited = true
			time.Sleep(poll)
		}
	}
	return nil
}
