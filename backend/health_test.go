package backend_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/internal/busy"
	"github.com/shardfs/shardfs/internal/faultstore"
)

// TestHealthMarksDownAndBack: the wrapper counts what its own reads say.
// A missing object says nothing about the store; three store faults in a
// row mark it down, reported once; a read that hangs is Stalled; once the
// store answers again, the probe started past the backoff brings it back,
// reported once. Other methods pass through.
func TestHealthMarksDownAndBack(t *testing.T) {
	ctx := context.Background()
	local := localWithObj(t)
	faulty := faultstore.New(local)
	var downs, ups atomic.Int32
	h := backend.WithHealth(faulty, "obj", backend.HealthOptions{MinBackoff: 50 * time.Millisecond}, func(down bool) {
		if down {
			downs.Add(1)
		} else {
			ups.Add(1)
		}
	})
	if h.Unwrap() != backend.Store(faulty) {
		t.Fatal("Unwrap does not return the wrapped store")
	}
	p := make([]byte, 4)
	for range 5 {
		if err := h.ReadAt(ctx, "missing", p, 0); !errors.Is(err, backend.ErrNotExist) {
			t.Fatalf("read of a missing object: %v", err)
		}
	}
	if h.Down() || downs.Load() != 0 {
		t.Fatal("missing objects marked the store down")
	}
	if err := h.ReadAt(ctx, "obj", p, 3); err != nil || string(p) != "3456" {
		t.Fatalf("read: %v, %q", err, p)
	}
	faulty.SetDown(true)
	for i := range 3 {
		if h.MarkedDown() {
			t.Fatalf("down after %d faults; want 3", i)
		}
		if err := h.ReadAtV(ctx, "obj", [][]byte{p}, 0); !backend.IsStoreFault(err) {
			t.Fatalf("read of a store that is down: %v", err)
		}
	}
	if !h.Down() || downs.Load() != 1 {
		t.Fatalf("after 3 faults: down %v, reported down %d times; want true, 1", h.MarkedDown(), downs.Load())
	}
	// A read in flight with no first byte is Stalled once old enough.
	faulty.SetDown(false)
	faulty.SetDelay(300*time.Millisecond, 0)
	done := make(chan error, 1)
	go func() { done <- h.ReadAt(ctx, "obj", make([]byte, 2), 0) }()
	deadline := time.Now().Add(5 * time.Second)
	for !h.Stalled(time.Now(), 100*time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a read hung for 5s was never Stalled")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if h.Stalled(time.Now(), 0) {
		t.Fatal("a finished read is still Stalled")
	}
	// That read succeeded: the store is back, reported once.
	if h.MarkedDown() || ups.Load() != 1 {
		t.Fatalf("after a read that succeeded: down %v, reported up %d times; want false, 1", h.MarkedDown(), ups.Load())
	}
	n, err := h.Stat(ctx, "obj")
	if err != nil || n != 10 {
		t.Fatalf("Stat through the wrapper: %d, %v", n, err)
	}
}

// localWithObj is a file:// store holding "obj", ten bytes "0123456789".
func localWithObj(t *testing.T) backend.Store {
	t.Helper()
	local, err := backend.Open("file://"+t.TempDir(), backend.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := local.Put(context.Background(), "obj", []byte("0123456789")); err != nil {
		t.Fatal(err)
	}
	return local
}

// TestHealthProbeBringsBack: a store marked down is not read again by a
// caller that asks Down first; past its backoff, Down starts one probe,
// which finds the store answering and brings it back.
func TestHealthProbeBringsBack(t *testing.T) {
	ctx := context.Background()
	local, err := backend.Open("file://"+t.TempDir(), backend.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	faulty := faultstore.New(local)
	h := backend.WithHealth(faulty, "never-written", backend.HealthOptions{MinBackoff: 50 * time.Millisecond}, nil)
	faulty.SetDown(true)
	for range 3 {
		h.ReadAt(ctx, "x", make([]byte, 1), 0)
	}
	if !h.Down() {
		t.Fatal("not down after 3 faults")
	}
	faulty.SetDown(false)
	deadline := time.Now().Add(5 * time.Second)
	for h.Down() {
		if time.Now().After(deadline) {
			t.Fatal("a store answering again (\"no such object\") was not brought back by a probe within 5s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// hangsOn is a store whose reads of one key never answer (until the
// caller gives up), while every other key reads as usual.
type hangsOn struct {
	backend.Store
	key string
}

func (s hangsOn) ReadAt(ctx context.Context, key string, p []byte, off int64) error {
	return s.ReadAtV(ctx, key, [][]byte{p}, off)
}

func (s hangsOn) ReadAtV(ctx context.Context, key string, bufs [][]byte, off int64) error {
	if key == s.key {
		<-ctx.Done()
		return ctx.Err()
	}
	return s.Store.ReadAtV(ctx, key, bufs, off)
}

// TestSuspectThatAnswersStaysUp: a probe with no answer in SuspectTimeout
// marks a store down only when nothing else it was asked answered in that
// time either. On a busy machine the probe's own goroutine can wait longer
// than the timeout to run at all (CI: a file:// store marked down that way
// left a RS(4,2) read with too few stores, with every store answering),
// and a store whose other reads come back is busy, not down. A store that
// answers nothing is still marked down by the probe.
func TestSuspectThatAnswersStaysUp(t *testing.T) {
	ctx := context.Background()
	local := localWithObj(t)
	const timeout = 300 * time.Millisecond
	opts := backend.HealthOptions{SuspectTimeout: timeout, MinBackoff: time.Minute}
	busy := backend.WithHealth(hangsOn{local, "probe"}, "probe", opts, nil)
	busy.Suspect()
	for end := time.Now().Add(3 * timeout); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if err := busy.ReadAt(ctx, "obj", make([]byte, 4), 0); err != nil {
			t.Fatal(err)
		}
	}
	if busy.MarkedDown() {
		t.Fatal("a suspect store marked down by a probe that got no answer, while its other reads answered")
	}
	hung := backend.WithHealth(hangsOn{local, "probe"}, "probe", opts, nil)
	hung.Suspect()
	deadline := time.Now().Add(10 * time.Second)
	for !hung.MarkedDown() {
		if time.Now().After(deadline) {
			t.Fatal("a suspect store that answered nothing in 10s was not marked down")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestStarvedProbeIsNoVerdict: a probe that times out while this process
// could not run says nothing about the store. CI (-race, a busy machine):
// a probe's goroutine was taken off its core after its timeout started and
// before it asked a file:// store; the timeout ran out 17 µs after the
// probe began to wait for its answer. Every healthy store of a RS(4,2) set
// was marked down that way, and reads failed with "too few intact
// fragments" while every store answered. Here one core and 64 spinning
// goroutines (starveCPU) make the probe, which yields at that moment
// (backend.StallProbes), wait about 600 ms to run again, 12 times its
// timeout. The store must stay up through every probe. With the cores
// free, the same stall point must still let a probe mark a store that
// never answers down.
func TestStarvedProbeIsNoVerdict(t *testing.T) {
	local := localWithObj(t)
	const timeout = 50 * time.Millisecond
	opts := backend.HealthOptions{SuspectTimeout: timeout, ProbeTimeout: timeout, MinBackoff: time.Minute}
	defer backend.StallProbes(runtime.Gosched)()
	healthy := backend.WithHealth(local, "obj", opts, nil)
	stop := starveCPU()
	// At least 2 s and 5 probes: under -race on a busy machine this
	// goroutine, starved with the rest, can take a second a probe (CI: 2
	// probes in 2 s). 60 s bounds a hang.
	probes := 0
	start := time.Now()
	for ; (time.Since(start) < 2*time.Second || probes < 5) && time.Since(start) < time.Minute && !healthy.MarkedDown(); probes++ {
		healthy.Suspect()
		time.Sleep(5 * time.Millisecond)
	}
	stop()
	if healthy.MarkedDown() {
		t.Fatalf("a healthy file:// store was marked down after %d probes while this process was starved of CPU", probes)
	}
	if probes < 5 {
		t.Fatalf("only %d probes in a minute: the test needs more", probes)
	}

	hung := backend.WithHealth(hangsOn{local, "probe"}, "probe", opts, nil)
	hung.Suspect()
	for deadline := time.Now().Add(10 * time.Second); !hung.MarkedDown(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("with the cores free, a store that answered no probe in 10s was not marked down")
		}
	}
	t.Logf("%d probes on a starved process: the store stayed up; a hung store on a free one was marked down", probes)
}

// starveCPU leaves this process one core and 64 goroutines that spin on
// it, so a goroutine that yields waits about 600 ms to run again, until
// stop is called. It returns once they have spun a while: the scheduler
// records one wait in eight of each goroutine's (stallWatch), and 64 of
// them, each past its first turn, leave no span of a turn unrecorded.
func starveCPU() (stop func()) {
	procs := runtime.GOMAXPROCS(1)
	var done atomic.Bool
	var spinning sync.WaitGroup
	for range 64 {
		spinning.Add(1)
		go func() {
			defer spinning.Done()
			for !done.Load() {
			}
		}()
	}
	time.Sleep(time.Second)
	return func() { done.Store(true); spinning.Wait(); runtime.GOMAXPROCS(procs) }
}

// TestMarkedDownEndsReadsWaitingOnIt: reads asked of a store that then
// falls silent (its requests time out: a hung process, a black hole) are
// ended when the silence marks it down, if the store has sent nothing
// since they began: they fail at once as a store fault, not at their own
// deadline, and strike nothing more. Reads of a store marked down while it
// answers are left to finish: for wrong bytes, or for errors it replied
// with (MinIO cutting short a rotten fragment's body: CI on 996a65d ended
// a healthy read beside them); so are reads asked after the mark, whatever
// silence follows them. 32 reads at once, with twice as many goroutines
// as cores spinning beside them.
func TestMarkedDownEndsReadsWaitingOnIt(t *testing.T) {
	const reads = 32
	ctx := context.Background()
	busy.Burn(t, 2*runtime.GOMAXPROCS(0))
	// A store whose requests time out after 2 s plus 100 s a MB: the
	// waiting reads ask 1 MiB (107 s), a read that strikes asks 2 bytes
	// (2 s).
	newStore := func() (*faultstore.Faulty, *backend.Health) {
		faulty := faultstore.New(localWithObj(t))
		timeout := backend.WithTimeout(faulty, 2*time.Second)
		timeout.MinRate = 1e4
		h := backend.WithHealth(timeout, "obj", backend.HealthOptions{MinBackoff: time.Minute}, nil)
		t.Cleanup(h.Stop)
		faulty.SetDelay(time.Minute, 0) // a black hole
		return faulty, h
	}
	// hung starts reads that wait for their first byte, once each has
	// reached the store, and returns where each says how it ended.
	hung := func(faulty *faultstore.Faulty, h *backend.Health) chan error {
		done := make(chan error, reads)
		asked := faulty.Calls()
		for range reads {
			go func() {
				rctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
				defer cancel()
				done <- h.ReadAt(rctx, "obj", make([]byte, 1<<20), 0)
			}()
		}
		for deadline := time.Now().Add(10 * time.Second); faulty.Calls() < asked+reads; {
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d reads reached the store in 10 s", faulty.Calls()-asked, reads)
			}
			time.Sleep(5 * time.Millisecond)
		}
		return done
	}
	// silence strikes the store with reads that time out, 3 at once,
	// until 3 have struck. A timeout that ran out while this process
	// could not run (ErrStalled, CI beside the suite) is no verdict on
	// the store: those are asked again, at most 20 rounds.
	silence := func(h *backend.Health) {
		var struck atomic.Int32
		for round := 0; struck.Load() < 3; round++ {
			if round == 20 {
				t.Fatalf("%d of 3 silent requests struck in 20 rounds", struck.Load())
			}
			var wg sync.WaitGroup
			for range 3 - int(struck.Load()) {
				wg.Go(func() {
					err := h.ReadAt(ctx, "obj", make([]byte, 2), 0)
					switch {
					case errors.Is(err, backend.ErrStalled):
					case backend.IsStoreFault(err) && strings.Contains(err.Error(), "no answer within"):
						struck.Add(1)
					default:
						t.Errorf("read of a silent store: %v", err)
					}
				})
			}
			wg.Wait()
		}
	}
	// ended is how many of the reads end within d, and their errors.
	ended := func(done chan error, d time.Duration) []error {
		var errs []error
		for timeout := time.After(d); len(errs) < reads; {
			select {
			case err := <-done:
				errs = append(errs, err)
			case <-timeout:
				return errs
			}
		}
		return errs
	}

	// Wrong bytes mark it down: the reads waiting on it go on waiting.
	faulty, h := newStore()
	waiting := hung(faulty, h)
	for range 3 {
		h.Corrupted()
	}
	if !h.MarkedDown() || h.Unreachable() {
		t.Fatalf("after 3 checksum failures: down %v, unreachable %v; want down, answering", h.MarkedDown(), h.Unreachable())
	}
	if errs := ended(waiting, 300*time.Millisecond); len(errs) > 0 {
		t.Fatalf("%d reads of a store down for wrong bytes ended when it went down: %v", len(errs), errs[0])
	}

	// Errors the store replies with mark it down: it answers, and the
	// reads waiting on it go on waiting.
	faulty, h = newStore()
	waiting = hung(faulty, h)
	faulty.SetDown(true)
	for range 3 {
		if err := h.ReadAt(ctx, "obj", make([]byte, 2), 0); !backend.IsStoreFault(err) {
			t.Fatalf("read of a failing store: %v", err)
		}
	}
	if !h.Unreachable() {
		t.Fatal("3 store faults did not mark the store down")
	}
	if errs := ended(waiting, 300*time.Millisecond); len(errs) > 0 {
		t.Fatalf("%d reads of a store down for errors it replied with ended when it went down: %v", len(errs), errs[0])
	}

	// Silence marks it down: the waiting reads end at once, as store
	// faults.
	faulty, h = newStore()
	waiting = hung(faulty, h)
	silence(h)
	if !h.Unreachable() {
		t.Fatal("3 silent requests did not mark the store down for not answering")
	}
	errs := ended(waiting, 2*time.Second)
	if len(errs) < reads {
		t.Fatalf("%d of %d reads waiting on a store marked down for not answering went on waiting (2 s)", reads-len(errs), reads)
	}
	for _, err := range errs {
		if !backend.IsStoreFault(err) || errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "marked down") {
			t.Fatalf("a read ended by the mark: %v; want a store fault that says the store was marked down", err)
		}
	}
	// Reads asked after the mark (last resorts) are not ended by the
	// silence that follows.
	last := hung(faulty, h)
	silence(h)
	if errs := ended(last, 300*time.Millisecond); len(errs) > 0 {
		t.Fatalf("%d reads asked after the mark ended with the faults after it: %v", len(errs), errs[0])
	}
}
