package repository

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"regexp"
	"slices"
	"strings"
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
//     written) and never overwrites one, except to settle a full split
//     (below), where no copy was ever taken.
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
//     half the stores are down (m of RS(k, m) with k > m).
//   - A full split is settled (settleSplit). Copies can end up on every
//     store with none on a majority: a writer killed after reaching half
//     the stores while the others were down, and another writer that then
//     took the rest (3 and 3 of 6). No create can complete that, so a
//     writer that finds it, every store answering, overwrites: it puts the
//     copy most stores hold (ties to the smaller bytes) on every store.
//     Why that is safe: (1) no reader ever took any copy of the key, for a
//     copy is taken only at a majority, and copies change only by being
//     created or by a settling, which starts only where none counts and
//     only spreads the copy it chose: a copy that ever counted would count
//     still, and none does; (2) no create
//     can land while it runs, as every store holds a copy; (3) a settling
//     only spreads the copy it chose, which so stays the one most stores
//     hold, and every settler, killed or racing, chooses by the same rule
//     from what it reads, so all spread the same copy, the only one that
//     can ever reach a majority. Where a store does not answer, or holds
//     none, nothing is overwritten: the store may hold, or still receive,
//     a copy that makes another one count.
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

// MaxReportBytes bounds a report object: a number per stratum.
const MaxReportBytes = 4 << 20

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
	if len(b) > MaxReportBytes {
		return nil, fmt.Errorf("the report is %d bytes, more than %d", len(b), MaxReportBytes)
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
	if ok, need, failed := writeOnce(ctx, stores, key, data, MaxReportBytes); ok < need {
		settled, serr := settleSplit(ctx, stores, key, MaxReportBytes, validReport(r.Run, r.Epoch))
		switch {
		case settled == nil:
			return fmt.Errorf("run %s: epoch %d's report reached %d of %d stores, fewer than the %d a report needs: %w", r.Run, r.Epoch, ok, len(stores), need, errors.Join(append(failed, serr)...))
		case !bytes.Equal(settled, data):
			return fmt.Errorf("run %s: epoch %d's report: the stores were split between this report and another one (%s) that no reader had taken, and now hold the other one, which is %w: it stands for the epoch", r.Run, r.Epoch, settled, ErrReportRecorded)
		}
	}
	return nil
}

// validReport accepts a copy that is a report of epoch of run.
func validReport(run string, epoch int) func([]byte) bool {
	return func(b []byte) bool {
		var r EpochReport
		return json.Unmarshal(b, &r) == nil && r.Epoch == epoch && r.Run == run
	}
}

// settleSplit ends a full split of key (see the protocol above): when every
// store answers and holds a valid copy, and no copy is on a majority, it
// puts the copy most stores hold (ties to the smaller bytes) on every
// store. It returns the copy that counts once it is done: the settled one,
// or one that counted already; nil when the stores are not in a full split
// (a store did not answer or holds none; then nothing is written), or the
// puts reached too few stores (a later settling goes on with the same copy).
func settleSplit(ctx context.Context, stores []backend.Store, key string, limit int64, valid func([]byte) bool) ([]byte, error) {
	top, most, copies, failed, err := readMajority(ctx, stores, key, limit, valid)
	switch {
	case err != nil:
		return nil, err
	case counts(most, stores):
		return top, nil
	case failed > 0 || copies < len(stores):
		return nil, nil
	}
	errs := backend.OnEvery(stores, func(i int, s backend.Store) error { return s.Put(ctx, key, top) })
	ok, failures := backend.Split(errs)
	if !counts(len(ok), stores) {
		return nil, fmt.Errorf("settling a split of %s: %d of %d stores took the copy: %w", key, len(ok), len(stores), errors.Join(failures...))
	}
	return top, nil
}

// writeOnce creates key with data on every store (a conditional PUT, never
// an overwrite) and accepts a store's existing copy only if it is data. It
// returns the stores that hold data, the majority it takes, and why the
// others do not.
func writeOnce(ctx context.Context, stores []backend.Store, key string, data []byte, limit int64) (ok, need int, failed []error) {
	errs := backend.OnEvery(stores, func(i int, s backend.Store) error {
		err := s.Create(ctx, key, data)
		if !errors.Is(err, backend.ErrExists) {
			return err
		}
		got, err := readSmall(ctx, s, key, limit)
		if err != nil {
			return err
		}
		if !bytes.Equal(got, data) {
			return fmt.Errorf("holds another copy (%s)", got)
		}
		return nil
	})
	for i, err := range errs {
		if err == nil {
			ok++
		} else {
			failed = append(failed, fmt.Errorf("store %d (%s): %w", i, stores[i], err))
		}
	}
	return ok, len(stores)/2 + 1, failed
}

// readMajority reads key from every store and returns the copy most of
// them hold (ties to the smaller bytes; nil if none holds one), with how
// many hold it, how many copies were found and how many stores did not
// answer: the copy counts when most reaches a majority of all the stores
// (counts). valid rejects a copy that is not what key should hold. It
// fails when no store answers.
func readMajority(ctx context.Context, stores []backend.Store, key string, limit int64, valid func([]byte) bool) (top []byte, most, copies, failed int, err error) {
	var mu sync.Mutex
	var found [][]byte
	errs := backend.OnEvery(stores, func(i int, s backend.Store) error {
		b, err := readSmall(ctx, s, key, limit)
		if errors.Is(err, backend.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if !valid(b) {
			return fmt.Errorf("store %s: %s does not hold what it should", s, key)
		}
		mu.Lock()
		found = append(found, b)
		mu.Unlock()
		return nil
	})
	for _, err := range errs {
		if err != nil {
			failed++
		}
	}
	if len(found) == 0 && failed == len(stores) {
		return nil, 0, 0, failed, fmt.Errorf("no store answered: %w", errors.Join(errs...))
	}
	slices.SortFunc(found, bytes.Compare)
	for i := 0; i < len(found); {
		j := i
		for j < len(found) && bytes.Equal(found[j], found[i]) {
			j++
		}
		if j-i > most {
			top, most = found[i], j-i
		}
		i = j
	}
	return top, most, len(found), failed, nil
}

// counts reports whether a copy held by most of stores counts: a majority
// of all of them hold it.
func counts(most int, stores []backend.Store) bool { return most >= len(stores)/2+1 }

// ErrReportIncomplete: copies of a report exist, on fewer stores than a
// report needs to count.
var ErrReportIncomplete = errors.New("is on fewer stores than a report needs")

// ReadReport returns epoch's report of run: the one a majority of the
// stores hold (nil when no store holds one). Copies on fewer stores give
// an error that wraps ErrReportIncomplete; it also fails when no store
// answers.
func ReadReport(ctx context.Context, stores []backend.Store, name, run string, epoch int) (*EpochReport, error) {
	top, most, copies, failed, err := readMajority(ctx, stores, ReportKey(name, run, epoch), MaxReportBytes, validReport(run, epoch))
	switch {
	case err != nil:
		return nil, fmt.Errorf("run %s: reading epoch %d's report: %w", run, epoch, err)
	case counts(most, stores):
		var r EpochReport
		if err := json.Unmarshal(top, &r); err != nil {
			return nil, err
		}
		return &r, nil
	case copies == 0:
		return nil, nil
	}
	return nil, fmt.Errorf("run %s: epoch %d's report %w: %d of %d stores hold the same copy (%d copies, %d stores did not answer), and it takes %d: the stores holding it may be down, or its writer stopped part way (reporting the same numbers again completes it)",
		run, epoch, ErrReportIncomplete, most, len(stores), copies, failed, len(stores)/2+1)
}

// readSmall reads key whole from s, refusing one over limit bytes.
func readSmall(ctx context.Context, s backend.Store, key string, limit int64) ([]byte, error) {
	b, size, err := readSmallObject(ctx, s, key, limit)
	if err == nil && b == nil {
		err = fmt.Errorf("store %s: %s is %d bytes, more than %d", s, key, size, limit)
	}
	return b, err
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

// BindFeedback gives spec's feedback rule its weights: epoch e's from the
// reports of epochs 0..e-1 of src's run, each read once from the stores
// (waiting up to src.Wait for one not yet made) and kept. It returns what
// it bound (nil for a spec without feedback), which says how many epochs'
// weights are known.
func BindFeedback(h *manifest.Header, spec *layout.Spec, src FeedbackSource) (*FeedbackWeights, error) {
	f := spec.Feedback
	if f == nil {
		return nil, nil
	}
	if err := CheckRunName(src.Run); err != nil {
		return nil, err
	}
	fw := &FeedbackWeights{rule: f, src: src}
	for _, s := range h.Strata {
		fw.names = append(fw.names, s.Name)
	}
	f.Weights = fw.weights
	return fw, nil
}

// FeedbackWeights are a run's feedback weights, computed as far as the
// reports read so far allow.
type FeedbackWeights struct {
	rule  *layout.Feedback
	src   FeedbackSource
	names []string // the strata, as reports name them

	mu      sync.Mutex
	reports [][]float64 // reports[e]: epoch e's, read
	reading sync.Mutex  // held by the one caller reading the next reports; mu stays free
}

// Known is the number of epochs whose weights are computed (0..Known-1),
// without waiting for any report.
func (fw *FeedbackWeights) Known() int {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	return len(fw.reports) + 1
}

// weights is layout.Feedback.Weights: epoch e's multipliers.
func (fw *FeedbackWeights) weights(e int) ([]float64, error) {
	fw.mu.Lock()
	if e <= len(fw.reports) {
		defer fw.mu.Unlock()
		return fw.rule.Multipliers(len(fw.names), fw.reports[:e])
	}
	fw.mu.Unlock()
	// The wait is this caller's, from now: callers that queue behind one
	// reading (a DataLoader's workers opening the epoch at once) each wait
	// --report-wait in all, not one after the other.
	start := time.Now()
	fw.reading.Lock()
	defer fw.reading.Unlock()
	for {
		fw.mu.Lock()
		n := len(fw.reports)
		if e <= n {
			defer fw.mu.Unlock()
			return fw.rule.Multipliers(len(fw.names), fw.reports[:e])
		}
		fw.mu.Unlock()
		r, err := fw.read(n, start)
		if err != nil {
			return nil, err
		}
		fw.mu.Lock()
		fw.reports = append(fw.reports, r)
		fw.mu.Unlock()
	}
}

// read is epoch's report, waiting for it until src.Wait after start; it
// reads at least once.
func (fw *FeedbackWeights) read(epoch int, start time.Time) ([]float64, error) {
	src := fw.src
	poll := cmp.Or(src.Poll, 2*time.Second)
	deadline := start.Add(src.Wait)
	waited := false
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		r, err := ReadReport(ctx, src.Stores, src.Name, src.Run, epoch)
		cancel()
		if err == nil && r != nil {
			v, err := layout.CheckReport(r.Strata, fw.names)
			if err != nil {
				return nil, fmt.Errorf("run %s: epoch %d's report: %v", src.Run, epoch, err)
			}
			if waited && src.Log != nil {
				src.Log.Info("the trainer's report arrived", "run", src.Run, "epoch", epoch)
			}
			return v, nil
		}
		// The last read is at the deadline, not a poll before it: a wait
		// shorter than the poll still waits.
		left := time.Until(deadline)
		if left <= 0 {
			if err != nil {
				return nil, err
			}
			return nil, fmt.Errorf("run %s: epoch %d's weights come from the trainer's report of epoch %d, and none is recorded (waited %v, --report-wait %v): report it on rank 0 when the epoch ends (the Python loader's report(), or shardfs report --run %s --epoch %d %s FILE)",
				src.Run, epoch+1, epoch, time.Since(start).Round(time.Millisecond), src.Wait, src.Run, epoch, src.Name)
		}
		if !waited && src.Log != nil {
			src.Log.Info("waiting for the trainer's report of the epoch before", "run", src.Run, "epoch", epoch+1, "report_of", epoch, "wait", src.Wait)
		}
		waited = true
		time.Sleep(min(poll, left))
	}
}

// Epoch records (mount --follow): which dataset version each epoch of a
// run serves, NAME/runs/RUN/epoch-EEEEEE, written once by the first node
// that needs the epoch, under the run's lock (RunLockKey) so that no two
// nodes decide at once. A record counts, and is read, by the reports'
// rule above (a majority of all the stores hold its bytes): at most one
// record of an epoch can ever count, so every node serves an epoch from
// the same version. The lock is for progress, not for safety: two
// recorders at once could split the stores between two versions so that
// neither counts; a recorder that then finds a copy on every store and
// none on a majority settles them (settleSplit). A recorder killed part
// way leaves copies short of a majority; the next one adopts the copy most
// stores hold (ties to the smaller bytes), which is the version that epoch
// was first recorded with, and completes it.

// EpochKey names the record of epoch of run.
func EpochKey(name, run string, epoch int) string {
	return fmt.Sprintf("%sepoch-%06d", RunPrefix(name, run), epoch)
}

// RunLockKey is the lock a node holds while it records an epoch of run.
func RunLockKey(name, run string) string { return RunPrefix(name, run) + "lock" }

// RunEpochsPrefix lists every run's epoch records of name: gc keeps the
// versions they name (a run may resume at any of its epochs).
func RunEpochsPrefix(name string) string { return name + "/runs/" }

// EpochRecord says which version of the dataset epoch Epoch of run Run
// serves.
type EpochRecord struct {
	Run     string `json:"run"`
	Epoch   int    `json:"epoch"`
	Version int    `json:"version"`
}

// ErrEpochIncomplete: copies of an epoch's record exist, on fewer stores
// than a record needs to count.
var ErrEpochIncomplete = errors.New("is on fewer stores than a record needs")

const maxEpochBytes = 4 << 10

// ReadEpochRecord returns the record of epoch of run that counts (nil when
// no store holds one); copies short of a majority give an error wrapping
// ErrEpochIncomplete.
func ReadEpochRecord(ctx context.Context, stores []backend.Store, name, run string, epoch int) (*EpochRecord, error) {
	r, _, err := readEpoch(ctx, stores, name, run, epoch)
	return r, err
}

// readEpoch is ReadEpochRecord, also returning the copy most stores hold
// when none counts yet.
func readEpoch(ctx context.Context, stores []backend.Store, name, run string, epoch int) (counted, partial *EpochRecord, err error) {
	top, most, copies, failed, err := readMajority(ctx, stores, EpochKey(name, run, epoch), maxEpochBytes, validEpoch(run, epoch))
	switch {
	case err != nil:
		return nil, nil, fmt.Errorf("run %s: reading epoch %d's record: %w", run, epoch, err)
	case copies == 0:
		return nil, nil, nil
	}
	var r EpochRecord
	if err := json.Unmarshal(top, &r); err != nil {
		return nil, nil, err
	}
	if counts(most, stores) {
		return &r, nil, nil
	}
	partial = &r // the copy most stores hold, ties to the smaller bytes
	return nil, partial, fmt.Errorf("run %s: epoch %d's record %w: %d of %d stores hold the same copy (%d copies, %d stores did not answer), and it takes %d",
		run, epoch, ErrEpochIncomplete, most, len(stores), copies, failed, len(stores)/2+1)
}

// validEpoch accepts a copy that is a record of epoch of run.
func validEpoch(run string, epoch int) func([]byte) bool {
	return func(b []byte) bool {
		var r EpochRecord
		return json.Unmarshal(b, &r) == nil && r.Epoch == epoch && r.Run == run && r.Version > 0
	}
}

// ErrRecording: another node holds the run's lock and is recording.
var ErrRecording = errors.New("another node is recording the run's epoch")

// RecordEpoch returns epoch's record of run, recording it first if none
// counts: under the run's lock, it adopts the copy a recorder killed part
// way left, or else asks choose for the version, and writes the record to
// every store; it counts once a majority hold it. While another node holds
// the lock it returns an error wrapping ErrRecording: read again later.
func RecordEpoch(ctx context.Context, stores []backend.Store, name, run string, epoch int, choose func() (int, error), log *slog.Logger) (*EpochRecord, error) {
	if r, err := ReadEpochRecord(ctx, stores, name, run, epoch); err == nil && r != nil {
		return r, nil
	}
	host, _ := os.Hostname()
	lock, lctx, err := AcquireLock(ctx, stores, name, fmt.Sprintf("follow-%s-%d", host, os.Getpid()), LockOptions{Key: RunLockKey(name, run), Logger: log})
	switch {
	case errors.Is(err, ErrLocked):
		return nil, fmt.Errorf("run %s, epoch %d: %w: %v", run, epoch, ErrRecording, err)
	case errors.Is(err, backend.ErrAccessDenied):
		// Read-only credentials: a node that can write records it.
		return nil, fmt.Errorf("run %s, epoch %d: this node cannot write the run's log (read-only credentials), so it waits for one that can to record the epoch: %w", run, epoch, ErrRecording)
	}
	if err != nil {
		return nil, err
	}
	defer lock.Release(context.WithoutCancel(ctx))
	counted, partial, err := readEpoch(lctx, stores, name, run, epoch)
	switch {
	case counted != nil:
		return counted, nil
	case err != nil && !errors.Is(err, ErrEpochIncomplete):
		return nil, err
	}
	rec := partial
	if rec == nil {
		v, err := choose()
		if err != nil {
			return nil, err
		}
		rec = &EpochRecord{Run: run, Epoch: epoch, Version: v}
	}
	data, _ := json.Marshal(rec)
	key := EpochKey(name, run, epoch)
	if ok, need, failed := writeOnce(lctx, stores, key, data, maxEpochBytes); ok < need {
		// Copies on every store and none on a majority (the protocol's
		// full split) are settled; anything else waits for stores to
		// answer again.
		settled, serr := settleSplit(lctx, stores, key, maxEpochBytes, validEpoch(run, epoch))
		if settled == nil {
			return nil, fmt.Errorf("run %s: epoch %d's record reached %d of %d stores, fewer than the %d it needs: %w", run, epoch, ok, len(stores), need, errors.Join(append(failed, serr)...))
		}
		var r EpochRecord
		if err := json.Unmarshal(settled, &r); err != nil {
			return nil, err
		}
		return &r, nil
	}
	return rec, nil
}

// RunVersions are the versions the runs of name recorded epochs with
// (mount --follow), each with why: gc keeps them, since a run may resume
// at any of its epochs. A copy short of a majority counts too: keeping a
// version is always safe.
func RunVersions(ctx context.Context, stores []backend.Store, name string) (map[int][]string, error) {
	var mu sync.Mutex
	keys := map[string]bool{}
	errs := backend.OnEvery(stores, func(i int, s backend.Store) error {
		ks, err := s.List(ctx, RunEpochsPrefix(name))
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		for _, k := range ks {
			if strings.Contains(k[len(RunEpochsPrefix(name)):], "/epoch-") {
				keys[k] = true
			}
		}
		return nil
	})
	out := map[int][]string{}
	for k := range keys {
		rest := k[len(RunEpochsPrefix(name)):]
		run, file, _ := strings.Cut(rest, "/")
		var epoch int
		if _, err := fmt.Sscanf(file, "epoch-%06d", &epoch); err != nil {
			continue
		}
		seen := map[int]bool{}
		for _, s := range stores {
			b, err := readSmall(ctx, s, k, maxEpochBytes)
			var r EpochRecord
			if err != nil || json.Unmarshal(b, &r) != nil || r.Version <= 0 || seen[r.Version] {
				continue
			}
			seen[r.Version] = true
			out[r.Version] = append(out[r.Version], fmt.Sprintf("run %s epoch %d (--follow)", run, epoch))
		}
	}
	failed := 0
	for _, err := range errs {
		if err != nil {
			failed++
		}
	}
	// A record counts on a majority of the stores, so with at most half
	// of them silent, one that answered holds every record that counts.
	if failed > len(stores)/2 {
		return nil, fmt.Errorf("listing the runs of %s: %d of %d stores did not answer: %w", name, failed, len(stores), errors.Join(errs...))
	}
	return out, nil
}
