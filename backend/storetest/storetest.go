// Package storetest is the conformance suite every backend.Store must pass,
// and Sums, which snapshots what stores hold for tests that compare.
package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/shardfs/shardfs/backend"
)

// Run runs the suite against the empty store that newStore returns.
func Run(t *testing.T, newStore func(t *testing.T) backend.Store) {
	ctx := context.Background()
	t.Run("PutReadStat", func(t *testing.T) {
		s := newStore(t)
		data := bytes.Repeat([]byte("0123456789abcdef"), 4096+7)
		if err := s.Put(ctx, "ds/a/frag", data); err != nil {
			t.Fatal(err)
		}
		size, err := s.Stat(ctx, "ds/a/frag")
		if err != nil || size != int64(len(data)) {
			t.Fatalf("Stat = %d, %v; want %d", size, err, len(data))
		}
		for _, r := range [][2]int{{0, len(data)}, {1, 1}, {100, 5000}, {len(data) - 3, 3}, {len(data), 0}} {
			p := make([]byte, r[1])
			if err := s.ReadAt(ctx, "ds/a/frag", p, int64(r[0])); err != nil {
				t.Fatalf("ReadAt(%d,%d): %v", r[0], r[1], err)
			}
			if !bytes.Equal(p, data[r[0]:r[0]+r[1]]) {
				t.Fatalf("ReadAt(%d,%d): wrong bytes", r[0], r[1])
			}
		}
	})
	t.Run("ReadAtV", func(t *testing.T) {
		s := newStore(t)
		data := bytes.Repeat([]byte("0123456789abcdef"), 4096+7)
		if err := s.Put(ctx, "ds/a/frag", data); err != nil {
			t.Fatal(err)
		}
		// Buffers of odd lengths, an empty one among them: the range fills them in turn.
		lens := []int{1, 4095, 0, 7, 30000, 3}
		bufs := make([][]byte, len(lens))
		total := 0
		for i, n := range lens {
			bufs[i] = make([]byte, n)
			total += n
		}
		const off = 17
		if err := s.ReadAtV(ctx, "ds/a/frag", bufs, off); err != nil {
			t.Fatal(err)
		}
		if got := bytes.Join(bufs, nil); !bytes.Equal(got, data[off:off+total]) {
			t.Fatalf("ReadAtV: wrong bytes")
		}
		for i, n := range lens {
			if len(bufs[i]) != n {
				t.Fatalf("ReadAtV changed the caller's buffer %d to %d bytes, was %d", i, len(bufs[i]), n)
			}
		}
		// More buffers than one preadv(2) takes (IOV_MAX, 1024), and none but empty ones.
		many := make([][]byte, 3000)
		for i := range many {
			many[i] = make([]byte, 1+i%5)
		}
		if err := s.ReadAtV(ctx, "ds/a/frag", many, 5); err != nil {
			t.Fatal(err)
		}
		if got := bytes.Join(many, nil); !bytes.Equal(got, data[5:5+len(got)]) {
			t.Fatalf("ReadAtV of %d buffers: wrong bytes", len(many))
		}
		if err := s.ReadAtV(ctx, "ds/a/frag", [][]byte{{}, {}}, int64(len(data))); err != nil {
			t.Fatalf("ReadAtV of empty buffers at the end: %v", err)
		}
		// Past the end: the last buffer cannot be filled.
		short := [][]byte{make([]byte, 10), make([]byte, 10)}
		if err := s.ReadAtV(ctx, "ds/a/frag", short, int64(len(data)-15)); !errors.Is(err, backend.ErrShortRead) {
			t.Fatalf("ReadAtV past end: %v, want ErrShortRead", err)
		}
		if err := s.ReadAtV(ctx, "nope", [][]byte{make([]byte, 2), make([]byte, 2)}, 0); !errors.Is(err, backend.ErrNotExist) {
			t.Fatalf("ReadAtV missing: %v, want ErrNotExist", err)
		}
	})
	t.Run("EmptyObject", func(t *testing.T) {
		s := newStore(t)
		if err := s.Put(ctx, "empty", nil); err != nil {
			t.Fatal(err)
		}
		if size, err := s.Stat(ctx, "empty"); err != nil || size != 0 {
			t.Fatalf("Stat = %d, %v", size, err)
		}
	})
	t.Run("ReadWhole", func(t *testing.T) {
		s := newStore(t)
		data := bytes.Repeat([]byte("0123456789abcdef"), 4096+7)
		if err := s.Put(ctx, "ds/a/frag", data); err != nil {
			t.Fatal(err)
		}
		if err := s.Put(ctx, "empty", nil); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			key  string
			max  int64
			want []byte // nil: too large to read
		}{{"ds/a/frag", int64(len(data)) + 100, data}, {"ds/a/frag", int64(len(data)), data}, {"ds/a/frag", int64(len(data)) - 1, nil}, {"ds/a/frag", 0, nil}, {"empty", 10, []byte{}}, {"empty", 0, []byte{}}} {
			var asked []int64
			var got []byte
			size, whole, err := s.ReadWhole(ctx, c.key, c.max, func(n int64) []byte {
				asked = append(asked, n)
				got = make([]byte, n)
				return got
			})
			wantSize := int64(len(data))
			if c.key == "empty" {
				wantSize = 0
			}
			if err != nil || size != wantSize || whole != (c.want != nil) {
				t.Fatalf("ReadWhole(%s, at most %d) = %d, %v, %v; want %d, %v", c.key, c.max, size, whole, err, wantSize, c.want != nil)
			}
			// A larger object's first max bytes are read, once.
			first := data[:max(0, min(c.max, wantSize))]
			if c.want != nil {
				first = c.want
			}
			if len(asked) != 1 || asked[0] != int64(len(first)) || !bytes.Equal(got, first) {
				t.Fatalf("ReadWhole(%s, at most %d): buffers asked %v, %d bytes read (want %d), equal %v", c.key, c.max, asked, len(got), len(first), bytes.Equal(got, first))
			}
		}
		if _, _, err := s.ReadWhole(ctx, "nope", 8, func(n int64) []byte { return make([]byte, n) }); !errors.Is(err, backend.ErrNotExist) {
			t.Fatalf("ReadWhole missing: %v, want ErrNotExist", err)
		}
	})
	t.Run("NotExist", func(t *testing.T) {
		s := newStore(t)
		if _, err := s.Stat(ctx, "nope"); !errors.Is(err, backend.ErrNotExist) {
			t.Fatalf("Stat missing: %v, want ErrNotExist", err)
		}
		if err := s.ReadAt(ctx, "nope", make([]byte, 4), 0); !errors.Is(err, backend.ErrNotExist) {
			t.Fatalf("ReadAt missing: %v, want ErrNotExist", err)
		}
		if err := s.Delete(ctx, "nope"); err != nil {
			t.Fatalf("Delete missing: %v, want nil", err)
		}
	})
	t.Run("ShortRead", func(t *testing.T) {
		s := newStore(t)
		if err := s.Put(ctx, "k", []byte("hello")); err != nil {
			t.Fatal(err)
		}
		for _, off := range []int64{3, 5, 100} {
			err := s.ReadAt(ctx, "k", make([]byte, 4), off)
			if !errors.Is(err, backend.ErrShortRead) {
				t.Fatalf("ReadAt past end at %d: %v, want ErrShortRead", off, err)
			}
		}
	})
	t.Run("OverwriteAndDelete", func(t *testing.T) {
		s := newStore(t)
		for i := 0; i < 3; i++ {
			if err := s.Put(ctx, "k", []byte(fmt.Sprint("version", i))); err != nil {
				t.Fatal(err)
			}
		}
		p := make([]byte, 8)
		if err := s.ReadAt(ctx, "k", p, 0); err != nil || string(p) != "version2" {
			t.Fatalf("after overwrite: %q, %v", p, err)
		}
		if err := s.Delete(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Stat(ctx, "k"); !errors.Is(err, backend.ErrNotExist) {
			t.Fatalf("after delete: %v", err)
		}
	})
	t.Run("PinnedVersions", func(t *testing.T) {
		// Reads under a Versions' Pin see the version the first saw, or
		// fail with ErrChanged: a Stat, a ranged read, a vectored read and
		// a ReadWhole after the object is replaced by one of the same size.
		s := newStore(t)
		v1, v2 := bytes.Repeat([]byte("a"), 1000), bytes.Repeat([]byte("b"), 1000)
		if err := s.Put(ctx, "k", v1); err != nil {
			t.Fatal(err)
		}
		pinned := backend.NewVersions().Pin(ctx)
		if size, err := s.Stat(pinned, "k"); err != nil || size != 1000 {
			t.Fatalf("Stat = %d, %v; want 1000", size, err)
		}
		p := make([]byte, 10)
		if err := s.ReadAt(pinned, "k", p, 5); err != nil || !bytes.Equal(p, v1[:10]) {
			t.Fatalf("pinned ReadAt of the version the Stat saw: %q, %v", p, err)
		}
		if err := s.Put(ctx, "k", v2); err != nil {
			t.Fatal(err)
		}
		if err := s.ReadAt(pinned, "k", p, 500); !errors.Is(err, backend.ErrChanged) {
			t.Fatalf("pinned ReadAt after the object was replaced: %q, %v; want ErrChanged", p, err)
		}
		if err := s.ReadAtV(pinned, "k", [][]byte{make([]byte, 3), make([]byte, 4)}, 0); !errors.Is(err, backend.ErrChanged) {
			t.Fatalf("pinned ReadAtV after the object was replaced: %v; want ErrChanged", err)
		}
		if _, _, err := s.ReadWhole(pinned, "k", 100, func(n int64) []byte { return make([]byte, n) }); !errors.Is(err, backend.ErrChanged) {
			t.Fatalf("pinned ReadWhole after the object was replaced: %v; want ErrChanged", err)
		}
		if _, err := s.Stat(pinned, "k"); !errors.Is(err, backend.ErrChanged) {
			t.Fatalf("pinned Stat after the object was replaced: %v; want ErrChanged", err)
		}
		// Unpinned, and under other Versions, the new version reads.
		if err := s.ReadAt(ctx, "k", p, 500); err != nil || !bytes.Equal(p, v2[:10]) {
			t.Fatalf("ReadAt: %q, %v", p, err)
		}
		again := backend.NewVersions().Pin(ctx)
		var got []byte
		if _, whole, err := s.ReadWhole(again, "k", 2000, func(n int64) []byte { got = make([]byte, n); return got }); err != nil || !whole || !bytes.Equal(got, v2) {
			t.Fatalf("ReadWhole under new Versions: whole %v, %v", whole, err)
		}
		if err := s.ReadAt(again, "k", p, 0); err != nil || !bytes.Equal(p, v2[:10]) {
			t.Fatalf("ReadAt under new Versions: %q, %v", p, err)
		}
	})
	t.Run("PinnedPut", func(t *testing.T) {
		// A Put under the Pin of a version it read replaces that version
		// only: again after its own write, never over another writer's,
		// nor over a deleted object; of two such Puts of one version, one
		// wins.
		s := newStore(t)
		if err := s.Put(ctx, "lock", []byte("v1")); err != nil {
			t.Fatal(err)
		}
		mine := backend.NewVersions().Pin(ctx)
		if _, err := s.Stat(mine, "lock"); err != nil {
			t.Fatal(err)
		}
		for _, v := range []string{"m1", "m2"} {
			if err := s.Put(mine, "lock", []byte(v)); err != nil {
				t.Fatalf("pinned Put of %s over the version it read: %v", v, err)
			}
		}
		other := backend.NewVersions().Pin(ctx)
		if _, err := s.Stat(other, "lock"); err != nil {
			t.Fatal(err)
		}
		if err := s.Put(other, "lock", []byte("o1")); err != nil {
			t.Fatal(err)
		}
		if err := s.Put(mine, "lock", []byte("m3")); !errors.Is(err, backend.ErrChanged) {
			t.Fatalf("pinned Put over another writer's version: %v, want ErrChanged", err)
		}
		got := make([]byte, 2)
		if err := s.ReadAt(ctx, "lock", got, 0); err != nil || string(got) != "o1" {
			t.Fatalf("after a refused pinned Put the object holds %q (%v), want the other writer's o1", got, err)
		}
		if err := s.Delete(ctx, "lock"); err != nil {
			t.Fatal(err)
		}
		if err := s.Put(other, "lock", []byte("o2")); !errors.Is(err, backend.ErrChanged) {
			t.Fatalf("pinned Put over a deleted object: %v, want ErrChanged", err)
		}
		if _, err := s.Stat(ctx, "lock"); !errors.Is(err, backend.ErrNotExist) {
			t.Fatalf("after a refused pinned Put of a deleted object: %v, want it still gone", err)
		}
		// Two writers pinned to one version: exactly one replaces it.
		if err := s.Put(ctx, "lock", []byte("v2")); err != nil {
			t.Fatal(err)
		}
		var wins, changed int
		var mu sync.Mutex
		var wg sync.WaitGroup
		pins := make([]context.Context, 8)
		for i := range pins {
			pins[i] = backend.NewVersions().Pin(ctx)
			if _, err := s.Stat(pins[i], "lock"); err != nil {
				t.Fatal(err)
			}
		}
		for i := range pins {
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := s.Put(pins[i], "lock", []byte(fmt.Sprintf("w%d", i)))
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					wins++
				case errors.Is(err, backend.ErrChanged):
					changed++
				default:
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		if wins != 1 || changed != len(pins)-1 {
			t.Fatalf("%d writers pinned to one version: %d replaced it, %d were told it changed; want 1 and %d", len(pins), wins, changed, len(pins)-1)
		}
	})
	t.Run("CreateOnlyIfAbsent", func(t *testing.T) {
		s := newStore(t)
		if err := s.Create(ctx, "ds/lock", []byte("first")); err != nil {
			t.Fatalf("Create of a new key: %v", err)
		}
		if err := s.Create(ctx, "ds/lock", []byte("second")); !errors.Is(err, backend.ErrExists) {
			t.Fatalf("Create of an existing key: %v, want ErrExists", err)
		}
		p := make([]byte, 5)
		if err := s.ReadAt(ctx, "ds/lock", p, 0); err != nil || string(p) != "first" {
			t.Fatalf("after a refused Create the object is %q, %v; want the first", p, err)
		}
		// Of many concurrent Creates of one key, exactly one wins.
		var wg sync.WaitGroup
		var mu sync.Mutex
		wins := 0
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := s.Create(ctx, "ds/race", []byte(fmt.Sprint(i)))
				if err == nil {
					mu.Lock()
					wins++
					mu.Unlock()
				} else if !errors.Is(err, backend.ErrExists) {
					t.Errorf("concurrent Create: %v", err)
				}
			}()
		}
		wg.Wait()
		if wins != 1 {
			t.Fatalf("%d of 8 concurrent Creates won, want exactly 1", wins)
		}
		if keys, _ := s.List(ctx, "ds/"); len(keys) != 2 {
			t.Fatalf("List after Creates: %v, want ds/lock and ds/race only (no temporary files)", keys)
		}
	})
	t.Run("List", func(t *testing.T) {
		s := newStore(t)
		keys := []string{"a/1", "a/2", "a/sub/3", "ab/4", "b/5"}
		for _, k := range keys {
			if err := s.Put(ctx, k, []byte(k)); err != nil {
				t.Fatal(err)
			}
		}
		for prefix, want := range map[string][]string{
			"a/": {"a/1", "a/2", "a/sub/3"}, "a": {"a/1", "a/2", "a/sub/3", "ab/4"}, "": keys, "c/": nil,
		} {
			got, err := s.List(ctx, prefix)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("List(%q) = %v, want %v", prefix, got, want)
			}
		}
	})
	t.Run("BadKeys", func(t *testing.T) {
		s := newStore(t)
		for _, k := range []string{"", "/abs", "../up", "a/../b", "a//b", "nul\x00"} {
			if err := s.Put(ctx, k, []byte("x")); !errors.Is(err, backend.ErrBadKey) {
				t.Errorf("Put(%q) = %v, want ErrBadKey", k, err)
			}
		}
	})
	t.Run("Concurrent", func(t *testing.T) {
		s := newStore(t)
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		for i := 0; i < 16; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				key := fmt.Sprintf("c/%d", i)
				want := bytes.Repeat([]byte{byte(i)}, 10000+i)
				if err := s.Put(ctx, key, want); err != nil {
					errs <- err
					return
				}
				got := make([]byte, len(want))
				if err := s.ReadAt(ctx, key, got, 0); err != nil {
					errs <- err
				} else if !bytes.Equal(got, want) {
					errs <- fmt.Errorf("%s: wrong bytes", key)
				}
			}(i)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	})
	t.Run("ErrorNamesStore", func(t *testing.T) {
		s := newStore(t)
		_, err := s.Stat(ctx, "missing")
		if err == nil || !bytes.Contains([]byte(err.Error()), []byte(s.String())) {
			t.Fatalf("error %v does not name store %s", err, s)
		}
	})
}
