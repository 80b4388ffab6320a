package fs

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"syscall"
	"weak"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/shardfs/shardfs/layout"
)

// sampleIndex groups samples by stratum, each group sorted by the path
// below the stratum directory (the key without a leading "<stratum>/").
func (t *tree) sampleIndex() []layout.Positions {
	t.samplesOnce.Do(func() {
		groups := make([]layout.Positions, t.Catalog.NumStrata())
		n := len(t.Input.Stratum)
		for i := 0; i < n; i++ {
			c := t.Catalog.Stratum(i)
			groups[c].Append(int64(i))
		}
		for c, g := range groups {
			prefix := []byte(t.Catalog.StratumName(c) + "/")
			g.SortFunc(func(a, b int64) int {
				return bytes.Compare(relPath(t.Catalog.KeyBytes(int(a)), prefix), relPath(t.Catalog.KeyBytes(int(b)), prefix))
			})
		}
		t.byStratum = groups
	})
	return t.byStratum
}

// classDir is one stratum's samples sorted as sampleIndex sorts them, and
// the catalog that answers for them (holding their rows, with a Pinner).
type classDir struct {
	cat     TreeCatalog
	entries layout.Positions
}

type weakPinnedDir = weak.Pointer[classDir]

// class returns stratum c's sorted samples. With a Pinner their rows are
// fetched on first use and kept while a directory or file below uses them.
func (t *tree) class(ctx context.Context, c int) (*classDir, error) {
	p := t.Pinner
	if p == nil {
		return &classDir{cat: t.Catalog, entries: t.sampleIndex()[c]}, nil
	}
	t.pinMu.Lock()
	defer t.pinMu.Unlock()
	if t.pinned == nil {
		t.pinned = make([]weakPinnedDir, t.Catalog.NumStrata())
	}
	if d := t.pinned[c].Value(); d != nil {
		return d, nil
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pinTimeout)
	defer cancel()
	cat, samples, err := p.PinStratum(pctx, c)
	if err != nil {
		return nil, fmt.Errorf("samples/%s: %w", t.Catalog.StratumName(c), err)
	}
	prefix := []byte(t.Catalog.StratumName(c) + "/")
	samples.SortFunc(func(a, b int64) int {
		return bytes.Compare(relPath(cat.KeyBytes(int(a)), prefix), relPath(cat.KeyBytes(int(b)), prefix))
	})
	d := &classDir{cat: cat, entries: samples}
	t.pinned[c] = weak.Make(d)
	return d, nil
}

// relPath is key without a leading "<stratum>/": ImageFolder keys already
// start with their class directory.
func relPath(key, stratumPrefix []byte) []byte {
	if bytes.HasPrefix(key, stratumPrefix) {
		return key[len(stratumPrefix):]
	}
	return key
}

// samplesRoot is samples/, or with mixed datasets samples/<dataset>/: it
// lists the next path component of the stratum names below prefix.
type samplesRoot struct {
	dir
	prefix string // "" or "<dataset>/"
}

var (
	_ = (gofs.NodeLookuper)((*samplesRoot)(nil))
	_ = (gofs.NodeReaddirer)((*samplesRoot)(nil))
)

func (d *samplesRoot) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	var es []fuse.DirEntry
	seen := map[string]bool{}
	for c := 0; c < d.t.Catalog.NumStrata(); c++ {
		rest, ok := strings.CutPrefix(d.t.Catalog.StratumName(c), d.prefix)
		if !ok {
			continue
		}
		name, _, _ := strings.Cut(rest, "/")
		if !seen[name] {
			seen[name] = true
			es = append(es, fuse.DirEntry{Name: name, Mode: fuse.S_IFDIR, Ino: ino("samples/" + d.prefix + name)})
		}
	}
	return gofs.NewListDirStream(es), 0
}

func (d *samplesRoot) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	path := d.prefix + name
	for c := 0; c < d.t.Catalog.NumStrata(); c++ {
		sn := d.t.Catalog.StratumName(c)
		switch {
		case sn == path:
			cd, err := d.t.class(ctx, c)
			if err != nil {
				return nil, d.t.toErrno(err)
			}
			d.t.setAttr(&out.Attr, dirMode, 0)
			return d.NewInode(ctx, &sampleDir{dir: dir{t: d.t}, class: cd, stratum: c, prefix: "", entries: cd.entries},
				gofs.StableAttr{Mode: fuse.S_IFDIR, Ino: ino("samples/" + path)}), 0
		case strings.HasPrefix(sn, path+"/"):
			d.t.setAttr(&out.Attr, dirMode, 0)
			return d.NewInode(ctx, &samplesRoot{dir: dir{t: d.t}, prefix: path + "/"},
				gofs.StableAttr{Mode: fuse.S_IFDIR, Ino: ino("samples/" + path)}), 0
		}
	}
	return nil, syscall.ENOENT
}

// sampleDir is a directory below samples/<stratum>: the sorted entries
// whose relative path starts with prefix.
type sampleDir struct {
	dir
	class   *classDir // holds the rows of entries
	stratum int
	prefix  string // "" or "a/b/"
	entries layout.Positions
}

var (
	_ = (gofs.NodeLookuper)((*sampleDir)(nil))
	_ = (gofs.NodeReaddirer)((*sampleDir)(nil))
)

func (d *sampleDir) rel(i int) string {
	return string(relPath(d.class.cat.KeyBytes(int(d.entries.At(i))), []byte(d.t.Catalog.StratumName(d.stratum)+"/")))
}

func (d *sampleDir) dirPath() string {
	return "samples/" + d.t.Catalog.StratumName(d.stratum) + "/" + d.prefix
}

func (d *sampleDir) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	var es []fuse.DirEntry
	last := ""
	var members []layout.Member
	for i := range d.entries.Len() {
		rest := strings.TrimPrefix(d.rel(i), d.prefix)
		name, _, isDir := strings.Cut(rest, "/")
		if name == last {
			continue
		}
		last = name
		mode := uint32(fuse.S_IFREG)
		if isDir {
			mode = fuse.S_IFDIR
		} else if rc, ok := d.class.cat.(layout.RecordCatalog); ok {
			// A record: one file per member, <key>.<member>.
			members = rc.Record(members[:0], int(d.entries.At(i)))
			for _, m := range members {
				es = append(es, fuse.DirEntry{Name: name + "." + m.Name, Mode: mode, Ino: ino(d.dirPath() + name + "." + m.Name)})
			}
			continue
		}
		es = append(es, fuse.DirEntry{Name: name, Mode: mode, Ino: ino(d.dirPath() + name)})
	}
	return gofs.NewListDirStream(es), 0
}

func (d *sampleDir) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	if rc, ok := d.class.cat.(layout.RecordCatalog); ok {
		if key, member, ok := strings.Cut(name, "."); ok {
			if n, errno := d.lookupMember(ctx, rc, key, member, out); errno != syscall.ENOENT {
				return n, errno
			}
		}
	}
	target := d.prefix + name
	lo := sort.Search(d.entries.Len(), func(i int) bool { return d.rel(i) >= target })
	if lo == d.entries.Len() {
		return nil, syscall.ENOENT
	}
	if d.rel(lo) == target {
		s := int(d.entries.At(lo))
		d.t.setAttr(&out.Attr, fileMode, d.class.cat.Size(s))
		return d.NewInode(ctx, &sampleFile{t: d.t, cat: d.class.cat, sample: s}, gofs.StableAttr{Mode: fuse.S_IFREG, Ino: ino(d.dirPath() + name)}), 0
	}
	sub := target + "/"
	if !strings.HasPrefix(d.rel(lo), sub) {
		return nil, syscall.ENOENT
	}
	hi := lo + sort.Search(d.entries.Len()-lo, func(i int) bool { return !strings.HasPrefix(d.rel(lo+i), sub) })
	d.t.setAttr(&out.Attr, dirMode, 0)
	return d.NewInode(ctx, &sampleDir{dir: dir{t: d.t}, class: d.class, stratum: d.stratum, prefix: sub, entries: d.entries.Slice(lo, hi)},
		gofs.StableAttr{Mode: fuse.S_IFDIR, Ino: ino(d.dirPath() + name)}), 0
}

// lookupMember finds <key>.<member>, a member of a record below d.
func (d *sampleDir) lookupMember(ctx context.Context, rc layout.RecordCatalog, key, member string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	target := d.prefix + key
	i := sort.Search(d.entries.Len(), func(i int) bool { return d.rel(i) >= target })
	if i == d.entries.Len() || d.rel(i) != target {
		return nil, syscall.ENOENT
	}
	s := int(d.entries.At(i))
	var off int64
	for _, m := range rc.Record(nil, s) {
		if m.Name == member {
			d.t.setAttr(&out.Attr, fileMode, m.Size)
			f := &sampleFile{t: d.t, cat: d.class.cat, sample: s, off: off, size: m.Size, member: true}
			return d.NewInode(ctx, f, gofs.StableAttr{Mode: fuse.S_IFREG, Ino: ino(d.dirPath() + key + "." + member)}), 0
		}
		off += m.Size
	}
	return nil, syscall.ENOENT
}

type sampleFile struct {
	gofs.Inode
	t      *tree
	cat    TreeCatalog // holds the sample's row
	sample int
	// A record's member: its place in the record's bytes; size 0 and off 0
	// with member false: the whole sample.
	off, size int64
	member    bool
}

var (
	_ = (gofs.NodeOpener)((*sampleFile)(nil))
	_ = (gofs.NodeReader)((*sampleFile)(nil))
	_ = (gofs.NodeGetattrer)((*sampleFile)(nil))
	_ = (gofs.NodeGetxattrer)((*sampleFile)(nil))
	_ = (gofs.NodeListxattrer)((*sampleFile)(nil))
)

// fieldXattr prefixes a field's name to form its extended attribute.
const fieldXattr = "user.shardfs."

// fields returns the sample's listing fields, names and values.
func (f *sampleFile) fields() (names, values []string) {
	fc, ok := f.cat.(layout.FieldCatalog)
	if !ok || len(fc.FieldNames()) == 0 {
		return nil, nil
	}
	return fc.FieldNames(), fc.Fields(f.sample)
}

// Getxattr serves a listing field as user.shardfs.<field>.
func (f *sampleFile) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	names, values := f.fields()
	i := slices.Index(names, strings.TrimPrefix(attr, fieldXattr))
	if i < 0 || !strings.HasPrefix(attr, fieldXattr) || i >= len(values) {
		return 0, syscall.ENODATA
	}
	if len(dest) < len(values[i]) {
		return uint32(len(values[i])), syscall.ERANGE
	}
	return uint32(copy(dest, values[i])), 0
}

// Listxattr lists user.shardfs.<field> for every field.
func (f *sampleFile) Listxattr(ctx context.Context, dest []byte) (uint32, syscall.Errno) {
	names, _ := f.fields()
	var b []byte
	for _, n := range names {
		b = append(append(b, fieldXattr+n...), 0)
	}
	if len(dest) < len(b) {
		return uint32(len(b)), syscall.ERANGE
	}
	return uint32(copy(dest, b)), 0
}

// length is the file's size: the member's, or the sample's.
func (f *sampleFile) length() int64 {
	if f.member {
		return f.size
	}
	return f.cat.Size(f.sample)
}

func (f *sampleFile) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	f.t.setAttr(&out.Attr, fileMode, f.length())
	return 0
}

func (f *sampleFile) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	if flags&(syscall.O_WRONLY|syscall.O_RDWR) != 0 {
		return nil, 0, syscall.EROFS
	}
	return nil, fuse.FOPEN_KEEP_CACHE, 0
}

func (f *sampleFile) Read(ctx context.Context, fh gofs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if f.member {
		if off >= f.size {
			return fuse.ReadResultData(nil), 0
		}
		dest = dest[:min(int64(len(dest)), f.size-off)]
		off += f.off
	}
	n, err := f.t.Reader.ReadSample(ctx, f.sample, dest, off)
	if err != nil && err != io.EOF {
		return nil, f.t.toErrno(fmt.Errorf("sample %q at %d: %w", f.cat.Key(f.sample), off, err))
	}
	return fuse.ReadResultData(dest[:n]), 0
}
