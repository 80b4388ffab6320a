package fs

import (
	"context"
	"fmt"
	"sync"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/shardfs/shardfs/layout"
)

// rankDir holds one rank-epoch; its order is computed on first use.
type rankDir struct {
	dir
	params layout.Params
	path   string

	mu      sync.Mutex // guards members; a failed load is tried again
	members *layout.Members
}

var (
	_ = (gofs.NodeLookuper)((*rankDir)(nil))
	_ = (gofs.NodeReaddirer)((*rankDir)(nil))
)

func (d *rankDir) load(ctx context.Context) (*layout.Members, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.members != nil {
		return d.members, nil
	}
	if m := d.t.takePrimed(ctx, d.params); m != nil {
		d.members = m
		return m, nil
	}
	m, err := d.t.loadMembers(ctx, d.params, d.path)
	if err != nil {
		return nil, err
	}
	d.members = m
	return m, nil
}

// loadMembers computes the order of the rank-epoch params name, and its
// member table; with a Pinner, it fetches the rows the order reads first.
func (t *tree) loadMembers(ctx context.Context, params layout.Params, path string) (*layout.Members, error) {
	p := t.Pinner
	if p == nil {
		o, err := layout.Order(t.Input, params)
		if err != nil {
			return nil, err
		}
		return layout.NewMembers(o, t.Catalog), nil
	}
	// The member table keeps the pinned rows: they live as long as it does.
	// The next epoch's are fetched meanwhile, so that its first read does
	// not wait for them.
	a := t.pinAhead(p, params.Epoch, params.Rank, params)
	select {
	case <-a.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	t.dropAhead(params.Epoch, params.Rank, a)
	if a.err != nil {
		return nil, fmt.Errorf("%s: %w", path, a.err)
	}
	m := layout.NewMembers(a.order, a.cat)
	t.pinAhead(p, params.Epoch+1, params.Rank, layout.Params{})
	return m, nil
}

// aheadPin is the order and pinned rows of one rank-epoch, being fetched.
type aheadPin struct {
	done  chan struct{}
	order *layout.RankOrder
	cat   layout.SampleCatalog
	err   error
}

// pinAhead starts (or finds) the pin of rank's epoch e, with params p, or
// the params the tree gives that rank-epoch when p is zero. Nothing is
// fetched past the last epoch.
func (t *tree) pinAhead(pn Pinner, e, rank int, p layout.Params) *aheadPin {
	t.pinMu.Lock()
	defer t.pinMu.Unlock()
	key := [2]int{e, rank}
	if a := t.ahead[key]; a != nil {
		return a
	}
	a := &aheadPin{done: make(chan struct{})}
	ahead := p.Batch == 0
	if ahead && t.Epochs > 0 && e >= t.Epochs {
		a.err = fmt.Errorf("epoch %d is past the last", e)
		close(a.done)
		return a
	}
	if t.ahead == nil {
		t.ahead = map[[2]int]*aheadPin{}
	}
	t.ahead[key] = a
	go func() {
		defer close(a.done)
		if ahead {
			p = t.Order
			p.Epoch, p.Rank = e, rank
			if t.ParamsAt != nil {
				if p, a.err = t.ParamsAt(e, rank); a.err != nil {
					return
				}
			}
		}
		if a.order, a.err = layout.Order(t.Input, p); a.err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), pinTimeout)
		defer cancel()
		a.cat, a.order.Samples, a.err = pn.Pin(ctx, a.order.Samples)
		if a.err != nil && ahead {
			t.log.Warn("fetching the next epoch's shard indexes ahead failed; its first read fetches them", "epoch", e, "rank", rank, "err", a.err)
		}
	}()
	return a
}

// dropAhead forgets a (used, or failed so that it is tried again).
func (t *tree) dropAhead(e, rank int, a *aheadPin) {
	t.pinMu.Lock()
	defer t.pinMu.Unlock()
	if t.ahead[[2]int{e, rank}] == a {
		delete(t.ahead, [2]int{e, rank})
	}
}

func (d *rankDir) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	steps, err := layout.Steps(d.t.Input, d.params)
	if err != nil {
		return nil, d.t.toErrno(err)
	}
	return &countedStream{n: steps + 2, entry: func(i int) fuse.DirEntry {
		var name string
		switch i - steps {
		case 0:
			name = "epoch.tar"
		case 1:
			name = "index.csv"
		default:
			name = layout.BatchName(i)
		}
		return fuse.DirEntry{Name: name, Mode: fuse.S_IFREG, Ino: ino(d.path + "/" + name)}
	}}, 0
}

func (d *rankDir) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	m, err := d.load(ctx)
	if err != nil {
		return nil, d.t.toErrno(err)
	}
	var fm *layout.FileMap
	switch name {
	case "epoch.tar":
		fm = m.Epoch()
	case "index.csv":
		fm = m.Index()
	default:
		b, ok := layout.ParseBatchName(name)
		if !ok || b >= m.Order().Batches {
			return nil, syscall.ENOENT
		}
		fm = m.Batch(b)
	}
	d.t.setAttr(&out.Attr, fileMode, fm.Size())
	return d.NewInode(ctx, &virtFile{t: d.t, fm: fm}, gofs.StableAttr{Mode: fuse.S_IFREG, Ino: ino(d.path + "/" + name)}), 0
}
