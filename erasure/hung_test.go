package erasure

import (
	"bytes"
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/internal/faultstore"
)

// Issue 9 item 7: two of six stores (m=2) hang before either is known to be
// down. A read whose data fragment is on one of them hedges into a decode
// whose first candidates include the other: the decode must ask another
// fragment beside the late one rather than wait for it, so no read fails.
func TestTwoHungStoresNeverFailARead(t *testing.T) {
	p := Params{4, 2, 256}
	data := make([]byte, 4*256*8)
	rng := rand.New(rand.NewPCG(7, 9))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	r, sh, faulty, _ := faultyShard(t, p, data, HealthOptions{HedgeFloor: 20 * time.Millisecond})
	// Shard 0: fragment f is on store f. The primary (fragment 1) hangs, and
	// so does fragment 4, the fourth candidate of the decode.
	faulty[1].SetDelay(time.Hour, 0)
	faulty[4].SetDelay(time.Hour, 0)
	F := sh.FragSize
	for i, rg := range [][2]int64{{F + 10, 300}, {F, F}, {F + 600, 900}} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		got, err := r.ReadRange(ctx, sh, rg[0], rg[1])
		cancel()
		if err != nil || !bytes.Equal(got, data[rg[0]:rg[0]+rg[1]]) {
			t.Fatalf("read %d %v with 2 of 6 stores hung (m=2): %v", i, rg, err)
		}
	}
}

// Issue 9 item 7: a store that is only slower than its hedge deadline (as a
// healthy store is on a loaded machine) is hedged around but never marked
// down: slowness is not loss.
func TestSlowStoreIsNotMarkedDown(t *testing.T) {
	p := Params{4, 2, 256}
	data := bytes.Repeat([]byte("busy but healthy"), 512)
	r, sh, faulty, m := faultyShard(t, p, data, HealthOptions{HedgeFloor: 5 * time.Millisecond})
	faulty[2].SetDelay(40*time.Millisecond, 0)
	F := sh.FragSize
	for i := 0; i < 20; i++ {
		off := 2*F + int64(i*50)
		got, err := r.ReadRange(context.Background(), sh, off, 100)
		if err != nil || !bytes.Equal(got, data[off:off+100]) {
			t.Fatalf("read %d: %v", i, err)
		}
		if r.StoreDown(2) {
			t.Fatalf("after %d hedged reads the slow but healthy store 2 is marked down", i+1)
		}
	}
	if m.hedged.Load() == 0 {
		t.Fatal("no read was hedged around the slow store")
	}
}

// A primary on a store marked down (which has in fact come back) is asked
// again as a last resort when the others cannot supply k fragments, rather
// than counted as lost: marked down is not lost.
func TestMarkedDownPrimaryIsALastResort(t *testing.T) {
	p := Params{4, 2, 256}
	data := bytes.Repeat([]byte("marked down, not lost "), 400)
	r, sh, faulty, _ := faultyShard(t, p, data, HealthOptions{})
	// Store 0 fails three reads in a row, is marked down, then answers again.
	faulty[0].SetDown(true)
	for range 3 {
		r.stores[0].ReadAt(context.Background(), fragKey(sh.ID, 0), make([]byte, 1), 0)
	}
	faulty[0].SetDown(false)
	if !r.StoreDown(0) {
		t.Fatal("store 0 not marked down")
	}
	faulty[1].SetDown(true) // really down: with store 0 skipped, only 3 fragments answer
	faulty[2].SetDown(true)
	got, err := r.ReadRange(context.Background(), sh, 10, 500)
	if err != nil || !bytes.Equal(got, data[10:510]) {
		t.Fatalf("read of fragment 0 with stores 1 and 2 down and store 0 marked down but up: %v", err)
	}
}

// Issue 11 item 3: a store that answers at once but whose bytes take long
// to arrive (its bandwidth shared with the reader's other requests) is
// load, not slowness: a read that streams for twice its deadline is not
// hedged, on either read path. A store that does not answer by the
// deadline still is.
func TestStreamingStoreIsNotHedged(t *testing.T) {
	p := Params{4, 2, 256}
	data := bytes.Repeat([]byte("streaming, not slow "), 800)
	r, sh, faulty, m := faultyShard(t, p, data, HealthOptions{HedgeFloor: 50 * time.Millisecond})
	primary := p.Placement(0, 0)
	faulty[primary].SetStreaming(100 * time.Millisecond) // twice the deadline, half the streaming allowance
	for _, exact := range []bool{false, true} {
		var got []byte
		var err error
		if exact {
			got, err = readExact(context.Background(), r, sh, 10, 700, func([]byte) bool { return true })
		} else {
			got, err = r.ReadRange(context.Background(), sh, 10, 700)
		}
		if err != nil || !bytes.Equal(got, data[10:710]) {
			t.Fatalf("exact %v: read from a streaming store: %v", exact, err)
		}
	}
	if n := m.hedged.Load(); n != 0 {
		t.Fatalf("%d reads hedged around a store that answered at once and streamed for 100 ms (deadline 50 ms)", n)
	}
	faulty[primary].SetStreaming(0)
	faulty[primary].SetDelay(500*time.Millisecond, 0) // no answer until 10x the deadline
	if got, err := r.ReadRange(context.Background(), sh, 10, 700); err != nil || !bytes.Equal(got, data[10:710]) {
		t.Fatalf("read around a store that does not answer: %v", err)
	}
	if m.hedged.Load() == 0 {
		t.Fatal("a store that did not answer within 10x its hedge deadline was not hedged")
	}
}

// A store that answers and then stalls mid-body (a process stopped while
// sending, a route that drops mid-transfer) is still hedged around, after a
// longer allowance for streaming: no read waits for it, on either path.
func TestStoreStalledMidBodyIsHedged(t *testing.T) {
	p := Params{4, 2, 256}
	data := bytes.Repeat([]byte("answered, then stalled "), 800)
	r, sh, faulty, m := faultyShard(t, p, data, HealthOptions{HedgeFloor: 20 * time.Millisecond})
	faulty[p.Placement(0, 0)].SetStreaming(time.Hour)
	for _, exact := range []bool{false, true} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		var got []byte
		var err error
		if exact {
			got, err = readExact(ctx, r, sh, 10, 700, func([]byte) bool { return true })
		} else {
			got, err = r.ReadRange(ctx, sh, 10, 700)
		}
		cancel()
		if err != nil || !bytes.Equal(got, data[10:710]) {
			t.Fatalf("exact %v: read around a store stalled mid-body: %v", exact, err)
		}
	}
	if m.hedged.Load() == 0 {
		t.Fatal("no read hedged around a store stalled mid-body")
	}
	if n := m.hedgesFor(HedgeStalled); n != int(m.hedged.Load()) {
		t.Fatalf("%d of %d hedges around a store stalled mid-body counted as %s", n, m.hedged.Load(), HedgeStalled)
	}
}

// Issue 11 item 3: when the whole store set answers slowly at once (the
// machine, or an endpoint the stores share, is overloaded) no store is
// slow: hedging would only ask k more GETs of the same overloaded set. A
// store that lags while the others keep up is still hedged, under the
// same concurrent load.
func TestSetSlowTogetherIsNotHedged(t *testing.T) {
	p := Params{4, 2, 256}
	data := bytes.Repeat([]byte("slow together, not one slow store "), 600)
	r, sh, faulty, m := faultyShard(t, p, data, HealthOptions{HedgeFloor: 50 * time.Millisecond})
	ctx := context.Background()
	frag := sh.FragSize
	// One read per data fragment, on both read paths, all at once.
	readAll := func() {
		var wg sync.WaitGroup
		for f := int64(0); f < int64(p.Data); f++ {
			off := f*frag + 10
			for _, exact := range []bool{false, true} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var got []byte
					var err error
					if exact {
						got, err = readExact(ctx, r, sh, off, 500, func([]byte) bool { return true })
					} else {
						got, err = r.ReadRange(ctx, sh, off, 500)
					}
					if err != nil || !bytes.Equal(got, data[off:off+500]) {
						t.Errorf("fragment %d, exact %v: %v", f, exact, err)
					}
				}()
			}
		}
		wg.Wait()
	}
	for i := 0; i < 10; i++ { // fast history: deadlines at the 50 ms floor
		readAll()
	}
	if n := m.hedged.Load(); n != 0 {
		t.Fatalf("%d hedges while every store answered at once", n)
	}
	for _, f := range faulty {
		f.SetDelay(120*time.Millisecond, 0) // every store 2.4x the deadline, together
	}
	readAll()
	if n := m.hedged.Load(); n != 0 {
		t.Fatalf("%d reads hedged when the whole set answered in 120 ms together (deadline 50 ms)", n)
	}
	for _, f := range faulty {
		f.SetDelay(0, 0)
	}
	faulty[p.Placement(sh.ID, 0)].SetDelay(time.Second, 0) // one store lags, the others keep up
	readAll()
	if m.hedged.Load() == 0 {
		t.Fatal("a store 1 s slow among stores answering at once was not hedged")
	}
}

// Issue 25 item 5: a hedge never piles onto a store that is already
// queueing (backend.Limit) while another can answer. The data fragment's
// store hangs, so the read hedges into a decode; of the parity stores, 4
// has every slot taken by reads that wait on it. The decode asks 5, not
// 4, and the read finishes with store 4 asked nothing more.
func TestHedgeSkipsAQueueingStore(t *testing.T) {
	p := Params{4, 2, 256}
	data := make([]byte, 4*256*8)
	rng := rand.New(rand.NewPCG(25, 5))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	r, sh, _ := testShard(t, p, 0, data)
	var faulty []*faultstore.Faulty
	var stores []backend.Store
	var limits []*backend.Limit
	for _, s := range r.stores {
		f := faultstore.New(s.Unwrap())
		l := backend.WithLimit(f, 2)
		faulty, limits, stores = append(faulty, f), append(limits, l), append(stores, l)
	}
	r, err := NewReader(r.codec, stores, fragKey, ReaderOptions{Health: HealthOptions{HedgeFloor: 20 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	faulty[1].SetDelay(time.Hour, 0) // the primary of fragment 1 hangs
	faulty[4].SetDelay(time.Hour, 0) // store 4 is behind: its two slots stay taken
	hold, release := context.WithCancel(context.Background())
	defer release()
	for range 2 {
		go limits[4].ReadAt(hold, fragKey(sh.ID, 4), make([]byte, 1), 0)
	}
	for !limits[4].Queueing() {
		time.Sleep(time.Millisecond)
	}
	asked := faulty[4].Calls()
	F := sh.FragSize
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	got, err := r.ReadRange(ctx, sh, F+100, 700)
	if err != nil || !bytes.Equal(got, data[F+100:F+800]) {
		t.Fatalf("read of fragment 1 with its store hung and store 4 queueing: %v", err)
	}
	if n := faulty[4].Calls() - asked; n != 0 || limits[4].Waiting() != 0 {
		t.Fatalf("the decode asked the queueing store 4 (%d calls reached it, %d waiting for a slot)", n, limits[4].Waiting())
	}
}

// A store marked down for wrong bytes still answers: when a read needs its
// fragment as a last resort and the answer comes after the hedge deadline
// (a local file read on a machine whose cores are all busy), the read
// waits for it, bounded by the probe timeout, instead of failing at the
// deadline as if the store were hung. The decode matrix failed this way on
// a busy machine: RS(10,4) with 4 fragments damaged and the fifth store,
// marked down by an earlier round's damage, read in 150+ ms.
func TestStoreDownForWrongBytesIsWaitedFor(t *testing.T) {
	p := Params{4, 2, 256}
	data := bytes.Repeat([]byte("wrong once, right now "), 400)
	r, sh, faulty, _ := faultyShard(t, p, data, HealthOptions{HedgeFloor: 20 * time.Millisecond})
	// Store 0 hands back flipped bits until it is marked down, then
	// answers right again.
	faulty[0].SetFlipBits(true)
	for i := 0; i < 10 && !r.StoreDown(0); i++ {
		r.ReadRange(context.Background(), sh, 0, 100)
	}
	faulty[0].SetFlipBits(false)
	if !r.StoreDown(0) || r.stores[0].Unreachable() {
		t.Fatalf("store 0 should be marked down for wrong bytes: down %v, unreachable %v", r.StoreDown(0), r.stores[0].Unreachable())
	}
	faulty[1].SetDown(true) // m = 2 stores really out: fragment 0 is needed
	faulty[2].SetDown(true)
	faulty[0].SetDelay(200*time.Millisecond, 0) // 10x the deadline, a fifth of the probe timeout
	for i := range 3 {
		got, err := r.ReadRange(context.Background(), sh, 10, 500)
		if err != nil || !bytes.Equal(got, data[10:510]) {
			t.Fatalf("read %d: with 2 stores out, the third marked down for wrong bytes and slow but right: %v", i, err)
		}
	}
}

// A store's hedge deadline comes from its own recent latency (×3, at least
// the floor), and a store slow a moment ago can have one past the caller's
// read timeout: TestFlowMetricsLive's read through a store that trickled
// right after 2 s of latency failed with EIO at the 10 s read timeout, no
// hedge asked in time. The caller's deadline bounds the hedge: with a
// floor of 2 s and 1 s to read, a hung store, a trickling one, and a hung
// store among a degraded read's fragments are each read around in time.
func TestHedgeBeforeTheCallersDeadline(t *testing.T) {
	p := Params{4, 2, 256}
	data := bytes.Repeat([]byte("in time, whatever the floor "), 300)
	hedged := func(m *countMetrics) bool { return m.hedged.Load() > 0 }
	// A degraded read asks fragments 1 to 4 first; fragment 5 only when
	// one of them is late: a hedge of the decode's own.
	askedTheLastFragment := func(m *countMetrics) bool { return m.reads[p.Placement(0, 5)].Load() > 0 }
	cases := []struct {
		name  string
		fault func(f []*faultstore.Faulty)
		hedge func(m *countMetrics) bool
	}{
		{"hung", func(f []*faultstore.Faulty) { f[p.Placement(0, 0)].SetDelay(time.Minute, 0) }, hedged},
		{"trickling", func(f []*faultstore.Faulty) { f[p.Placement(0, 0)].SetStreaming(time.Minute) }, hedged},
		{"hung while degraded", func(f []*faultstore.Faulty) {
			f[p.Placement(0, 0)].SetDown(true)
			f[p.Placement(0, 1)].SetDelay(time.Minute, 0)
		}, askedTheLastFragment},
	}
	for _, c := range cases {
		for _, exact := range []bool{false, true} {
			r, sh, faulty, m := faultyShard(t, p, data, HealthOptions{HedgeFloor: 2 * time.Second})
			c.fault(faulty)
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			var got []byte
			var err error
			if exact {
				got, err = readExact(ctx, r, sh, 10, 300, func(b []byte) bool { return bytes.Equal(b, data[10:310]) })
			} else {
				got, err = r.ReadRange(ctx, sh, 10, 300)
			}
			cancel()
			if err != nil || !bytes.Equal(got, data[10:310]) {
				t.Fatalf("%s, exact=%v: read within 1 s with a 2 s hedge floor: %v (hedged %d)", c.name, exact, err, m.hedged.Load())
			}
			if !c.hedge(m) {
				t.Fatalf("%s, exact=%v: the read came back without the hedge it needed", c.name, exact)
			}
		}
	}
}
