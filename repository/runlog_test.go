package repository

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardfs/shardfs/backend"
)

func localStores(t *testing.T, n int) ([]backend.Store, []string) {
	t.Helper()
	var out []backend.Store
	var dirs []string
	for range n {
		dir := t.TempDir()
		s, err := backend.NewLocal(dir)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
		dirs = append(dirs, dir)
	}
	return out, dirs
}

// The run log's promises, on local stores: a report reads back as written;
// the same report again is accepted, another one for that epoch refused
// and never written; a copy on a single store (a writer killed after its
// first PUT) is read by every reader; a report needs a majority of the
// stores; and of two different copies, readers take the one most stores
// hold.
func TestRunLogReports(t *testing.T) {
	ctx := context.Background()
	stores, dirs := localStores(t, 5)
	r := &EpochReport{Run: "r1", Epoch: 0, Strata: map[string]float64{"a": 0.5, "b": 2}}
	if got, err := ReadReport(ctx, stores, "ds", "r1", 0); err != nil || got != nil {
		t.Fatalf("no report yet: %v %v", got, err)
	}
	if err := RecordReport(ctx, stores, "ds", r); err != nil {
		t.Fatal(err)
	}
	got, err := ReadReport(ctx, stores, "ds", "r1", 0)
	if err != nil || got == nil || got.Strata["b"] != 2 || got.Strata["a"] != 0.5 || len(got.Strata) != 2 {
		t.Fatalf("read back %+v %v", got, err)
	}
	if err := RecordReport(ctx, stores, "ds", r); err != nil {
		t.Fatalf("the same report again: %v", err)
	}
	other := &EpochReport{Run: "r1", Epoch: 0, Strata: map[string]float64{"a": 9}}
	if err := RecordReport(ctx, stores, "ds", other); !errors.Is(err, ErrReportRecorded) || !strings.Contains(err.Error(), "the first report of an epoch stands") {
		t.Fatalf("another report of epoch 0: %v", err)
	}
	if got, _ := ReadReport(ctx, stores, "ds", "r1", 0); got.Strata["a"] != 0.5 {
		t.Fatalf("the second report changed the first: %+v", got)
	}

	// A writer killed after its first store: that copy does not count yet
	// (readers wait), and the same report written again completes it.
	key := ReportKey("ds", "r1", 1)
	one := &EpochReport{Run: "r1", Epoch: 1, Strata: map[string]float64{"a": 1}}
	data, _ := one.encode()
	if err := stores[3].Create(ctx, key, data); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadReport(ctx, stores, "ds", "r1", 1); got != nil || !errors.Is(err, ErrReportIncomplete) || !strings.Contains(err.Error(), "1 of 5 stores hold the same copy (1 copies, 0 stores did not answer), and it takes 3") {
		t.Fatalf("a copy on one store of five: %+v %v", got, err)
	}
	if err := RecordReport(ctx, stores, "ds", one); err != nil {
		t.Fatal(err)
	}
	for i, d := range dirs {
		if b, err := os.ReadFile(filepath.Join(d, key)); err != nil || string(b) != string(data) {
			t.Fatalf("store %d: %q %v", i, b, err)
		}
	}
	if got, err := ReadReport(ctx, stores, "ds", "r1", 1); err != nil || got == nil || got.Strata["a"] != 1 {
		t.Fatalf("completed: %+v %v", got, err)
	}

	// Three of five stores down: no majority, and the writer says so.
	down := []backend.Store{stores[0], stores[1], brokenStore{stores[2]}, brokenStore{stores[3]}, brokenStore{stores[4]}}
	two := &EpochReport{Run: "r1", Epoch: 2, Strata: map[string]float64{"b": 1}}
	if err := RecordReport(ctx, down, "ds", two); err == nil || !strings.Contains(err.Error(), "reached 2 of 5 stores, fewer than the 3 a report needs") {
		t.Fatalf("a report on 2 of 5 stores: %v", err)
	}
	// Two different copies: 3 of 5 count, whichever stores a reader sees;
	// 2 of 5 do not, and a reader that sees only those waits.
	b, _ := (&EpochReport{Run: "r1", Epoch: 3, Strata: map[string]float64{"a": 7}}).encode()
	c, _ := (&EpochReport{Run: "r1", Epoch: 3, Strata: map[string]float64{"a": 8}}).encode()
	for i, s := range stores {
		d := b
		if i >= 2 {
			d = c
		}
		if err := s.Create(ctx, ReportKey("ds", "r1", 3), d); err != nil {
			t.Fatal(err)
		}
	}
	if got, _ := ReadReport(ctx, stores, "ds", "r1", 3); got == nil || got.Strata["a"] != 8 {
		t.Fatalf("3 copies against 2: read %+v, want the 3", got)
	}
	seesMinority := []backend.Store{stores[0], stores[1], stores[2], brokenStore{stores[3]}, brokenStore{stores[4]}}
	if got, err := ReadReport(ctx, seesMinority, "ds", "r1", 3); got != nil || !errors.Is(err, ErrReportIncomplete) {
		t.Fatalf("a reader that sees 2 copies of one report and 1 of the counted one took %+v (%v); it must wait", got, err)
	}
	if err := RecordReport(ctx, stores, "ds", &EpochReport{Run: "r1", Epoch: 3, Strata: map[string]float64{"a": 7}}); !errors.Is(err, ErrReportRecorded) {
		t.Fatalf("the report that never counted, again: %v", err)
	}
	// A split no report can win (2 and 2 of 4, say two racing writers):
	// unreadable, and said so.
	four := stores[:4]
	for i, s := range four {
		d := b
		if i >= 2 {
			d = c
		}
		if err := s.Create(ctx, ReportKey("ds", "r1", 4), bytes.Replace(d, []byte(`"epoch":3`), []byte(`"epoch":4`), 1)); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := ReadReport(ctx, four, "ds", "r1", 4); got != nil || !errors.Is(err, ErrReportIncomplete) || !strings.Contains(err.Error(), "2 of 4 stores hold the same copy") {
		t.Fatalf("a 2-2 split: %+v %v", got, err)
	}
	if err := RecordReport(ctx, stores, "ds", &EpochReport{Run: "bad/name", Epoch: 0, Strata: map[string]float64{"a": 1}}); err == nil || !strings.Contains(err.Error(), `run name "bad/name"`) {
		t.Fatal(err)
	}
}

// brokenStore answers every request with an error, as a store that is down.
type brokenStore struct{ backend.Store }

var errDown = errors.New("store down")

func (brokenStore) Create(context.Context, string, []byte) error { return errDown }
func (brokenStore) Stat(context.Context, string) (int64, error)  { return 0, errDown }
func (brokenStore) ReadWhole(context.Context, string, int64, func(int64) []byte) (int64, bool, error) {
	return 0, false, errDown
}

// Epoch records: the first recorder's choice stands for every later one;
// a node with read-only credentials records nothing and is told to wait
// (ErrRecording), then reads what a writer recorded.
func TestRunLogEpochs(t *testing.T) {
	ctx := context.Background()
	stores, _ := localStores(t, 5)
	r, err := RecordEpoch(ctx, stores, "ds", "f", 0, func() (int, error) { return 3, nil }, nil)
	if err != nil || r.Version != 3 {
		t.Fatalf("first record: %+v %v", r, err)
	}
	r, err = RecordEpoch(ctx, stores, "ds", "f", 0, func() (int, error) { return 4, nil }, nil)
	if err != nil || r.Version != 3 {
		t.Fatalf("a later recorder of epoch 0 got %+v %v, want the first's version 3", r, err)
	}
	ro := make([]backend.Store, len(stores))
	for i, s := range stores {
		ro[i] = readOnlyStore{s}
	}
	if _, err := RecordEpoch(ctx, ro, "ds", "f", 1, func() (int, error) { return 4, nil }, nil); !errors.Is(err, ErrRecording) || !strings.Contains(err.Error(), "read-only credentials") {
		t.Fatalf("a read-only node recording epoch 1: %v", err)
	}
	if got, err := ReadEpochRecord(ctx, stores, "ds", "f", 1); got != nil || err != nil {
		t.Fatalf("the read-only node wrote %+v (%v)", got, err)
	}
	if _, err := RecordEpoch(ctx, stores, "ds", "f", 1, func() (int, error) { return 4, nil }, nil); err != nil {
		t.Fatal(err)
	}
	if r, err := RecordEpoch(ctx, ro, "ds", "f", 1, func() (int, error) { return 5, nil }, nil); err != nil || r.Version != 4 {
		t.Fatalf("the read-only node, once a writer recorded epoch 1: %+v %v", r, err)
	}
	vs, err := RunVersions(ctx, stores, "ds")
	if err != nil || len(vs) != 2 || len(vs[3]) != 1 || vs[3][0] != "run f epoch 0 (--follow)" || vs[4][0] != "run f epoch 1 (--follow)" {
		t.Fatalf("RunVersions: %v %v", vs, err)
	}
}

// readOnlyStore refuses every write, as a store does to read-only keys.
type readOnlyStore struct{ backend.Store }

func (readOnlyStore) Create(context.Context, string, []byte) error { return backend.ErrAccessDenied }
func (readOnlyStore) Put(context.Context, string, []byte) error    { return backend.ErrAccessDenied }

// unreachableStore answers nothing, as a store that is down.
type unreachableStore struct{ backend.Store }

var errUnreachable = errors.New("store unreachable")

func (unreachableStore) Stat(context.Context, string) (int64, error) { return 0, errUnreachable }
func (unreachableStore) ReadWhole(context.Context, string, int64, func(int64) []byte) (int64, bool, error) {
	return 0, false, errUnreachable
}
func (unreachableStore) ReadAt(context.Context, string, []byte, int64) error {
	return errUnreachable
}
func (unreachableStore) Create(context.Context, string, []byte) error { return errUnreachable }
func (unreachableStore) Put(context.Context, string, []byte) error    { return errUnreachable }

// A full split (a copy on every store, none on a majority: 3 and 3 of 6)
// is settled by the next writer, to the copy most stores hold, ties to the
// smaller bytes, for reports and epoch records alike; while a store does
// not answer, or holds no copy, nothing is overwritten.
func TestRunLogSettlesAFullSplit(t *testing.T) {
	ctx := context.Background()
	stores, _ := localStores(t, 6)
	a := &EpochReport{Run: "r", Epoch: 0, Strata: map[string]float64{"x": 1}}
	b := &EpochReport{Run: "r", Epoch: 0, Strata: map[string]float64{"x": 2}}
	aData, _ := a.encode()
	bData, _ := b.encode()
	key := ReportKey("ds", "r", 0)
	for i, s := range stores {
		data := aData
		if i >= 3 {
			data = bData
		}
		if err := s.Create(ctx, key, data); err != nil {
			t.Fatal(err)
		}
	}
	holding := func(want [][]byte) {
		t.Helper()
		for i, s := range stores {
			got, err := readSmall(ctx, s, key, MaxReportBytes)
			if err != nil || !bytes.Equal(got, want[i]) {
				t.Fatalf("store %d holds %q (%v), want %q", i, got, err, want[i])
			}
		}
	}
	split := [][]byte{aData, aData, aData, bData, bData, bData}
	if got, err := ReadReport(ctx, stores, "ds", "r", 0); got != nil || !errors.Is(err, ErrReportIncomplete) {
		t.Fatalf("a split read: %+v %v", got, err)
	}
	// One store down: it may hold a copy that decides, so nothing moves.
	down := slices.Clone(stores)
	down[4] = unreachableStore{stores[4]}
	if err := RecordReport(ctx, down, "ds", b); err == nil || errors.Is(err, ErrReportRecorded) {
		t.Fatalf("a report with a store down settled the split: %v", err)
	}
	holding(split)

	// Every store answering: the writer of b settles, to a (the smaller
	// bytes of the tie), and says that the other report stands.
	if bytes.Compare(aData, bData) >= 0 {
		t.Fatalf("the test expects a's bytes to sort first: %s %s", aData, bData)
	}
	err := RecordReport(ctx, stores, "ds", b)
	if !errors.Is(err, ErrReportRecorded) || !strings.Contains(err.Error(), "split") {
		t.Fatalf("settling writer of b: %v", err)
	}
	holding([][]byte{aData, aData, aData, aData, aData, aData})
	for skip := range stores {
		view := slices.Clone(stores)
		view[skip] = unreachableStore{stores[skip]}
		got, err := ReadReport(ctx, view, "ds", "r", 0)
		if err != nil || got == nil || got.Strata["x"] != 1 {
			t.Fatalf("reader without store %d: %+v %v", skip, got, err)
		}
	}
	if err := RecordReport(ctx, stores, "ds", a); err != nil {
		t.Fatalf("a again: %v", err)
	}

	// Epoch records: versions 3 and 4 split 3 and 3. With a store down,
	// the recorder adopts version 3 (the tie's smaller bytes), cannot
	// complete it, and overwrites nothing; with every store answering, it
	// settles the split to version 3.
	ekey := EpochKey("ds", "f", 0)
	rec := func(v int) []byte { b, _ := json.Marshal(EpochRecord{Run: "f", Epoch: 0, Version: v}); return b }
	for i, s := range stores {
		v := 3
		if i >= 3 {
			v = 4
		}
		if err := s.Create(ctx, ekey, rec(v)); err != nil {
			t.Fatal(err)
		}
	}
	epochsHeld := func(want ...int) {
		t.Helper()
		for i, s := range stores {
			b, err := readSmall(ctx, s, ekey, maxEpochBytes)
			if err != nil || !bytes.Equal(b, rec(want[i])) {
				t.Fatalf("store %d holds %s (%v), want version %d", i, b, err, want[i])
			}
		}
	}
	choose := func() (int, error) { return 5, nil }
	if got, err := RecordEpoch(ctx, down, "ds", "f", 0, choose, nil); err == nil {
		t.Fatalf("recording a split epoch with a store down: %+v", got)
	}
	epochsHeld(3, 3, 3, 4, 4, 4)
	got, err := RecordEpoch(ctx, stores, "ds", "f", 0, choose, nil)
	if err != nil || got.Version != 3 {
		t.Fatalf("recording a split epoch: %+v %v, want version 3", got, err)
	}
	epochsHeld(3, 3, 3, 3, 3, 3)
	if got, err := ReadEpochRecord(ctx, stores, "ds", "f", 0); err != nil || got.Version != 3 {
		t.Fatalf("read after settling: %+v %v", got, err)
	}
}

// A reader of the run log waits its whole wait, also one shorter than its
// poll (it used to stop a poll before the deadline: --report-wait 1s did
// not wait at all), and takes a report that arrives meanwhile.
func TestFeedbackReadWaitsItsWait(t *testing.T) {
	stores, _ := localStores(t, 3)
	const wait = 300 * time.Millisecond
	fw := &FeedbackWeights{names: []string{"a", "b"}, src: FeedbackSource{Stores: stores, Name: "ds", Run: "w", Wait: wait, Poll: 2 * time.Second}}
	start := time.Now()
	if _, err := fw.read(0, start); err == nil || !strings.Contains(err.Error(), "none is recorded") {
		t.Fatalf("no report: %v", err)
	}
	if took := time.Since(start); took < wait || took > 30*time.Second {
		t.Fatalf("a wait of %v gave up after %v", wait, took)
	}
	// Callers at once (a DataLoader's workers opening the epoch) each wait
	// their own --report-wait, not one after the other's.
	var wg sync.WaitGroup
	var took [8]time.Duration
	for i := range took {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			if _, err := fw.weights(1); err == nil {
				t.Errorf("caller %d got weights without a report", i)
			}
			took[i] = time.Since(start)
		}()
	}
	wg.Wait()
	for i, d := range took {
		if d > wait+1500*time.Millisecond {
			t.Fatalf("caller %d of 8 at once gave up after %v with a wait of %v (all: %v)", i, d, wait, took)
		}
	}
	fw.src.Wait, fw.src.Poll = time.Minute, 50*time.Millisecond
	// The reader may see the report on a majority before the writer is
	// done with every store: the test waits for the writer, whose last
	// write would otherwise race the removal of the stores' directory
	// (CI: "TempDir RemoveAll cleanup: directory not empty").
	recorded := make(chan struct{})
	go func() {
		defer close(recorded)
		time.Sleep(200 * time.Millisecond)
		RecordReport(context.Background(), stores, "ds", &EpochReport{Run: "w", Epoch: 0, Strata: map[string]float64{"a": 1, "b": 2}})
	}()
	v, err := fw.read(0, time.Now())
	<-recorded
	if err != nil || len(v) != 2 || v[0] != 1 || v[1] != 2 {
		t.Fatalf("a report that arrives while the reader waits: %v %v", v, err)
	}
}
