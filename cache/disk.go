package cache

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
	"golang.org/x/sys/unix"

	"github.com/shardfs/shardfs/verify"
)

// Disk is the persistent tier below the memory cache: verified whole samples
// kept in local files that survive a remount and a kill -9 of the daemon.
//
// Layout under the cache directory (--cache-dir) DIR: the tier writes
// only inside TIER = DIR/shardfs-disk-tier, a directory it made and marked:
//
//	TIER/SHARDFS-DISK-TIER          the mark: this directory is the tier's
//	TIER/SHARDFS-DISK-TIER.tmp*     a mark being written (left by a kill; never deleted)
//	TIER/.lock                      flock'd around accounting and eviction
//	TIER/.usage                     bytes the tier holds, as decimal text
//	TIER/NAMESPACE/SSSSSSSS.dat     shard SSSSSSSS's sample bytes at their shard offsets (sparse)
//	TIER/NAMESPACE/SSSSSSSS.idx     one byte per sample of the shard: 1 = its bytes were written
//	TIER/NAMESPACE/SSSSSSSS.meta    the shard's index object (metadata format 2), as the stores hold it
//
// The user's own files may share DIR (a typo, $HOME, a CSI volume's
// attribute, and the daemon runs as root), so nothing outside TIER is
// ever read, written or deleted, and inside it eviction and the clean-up
// of cut-short writes delete only names the tier writes, one namespace
// level deep, never following a link. A TIER made by anyone else (no
// mark, and not empty) is refused, not adopted.
//
// NAMESPACE names the dataset's ingest, so a re-ingested dataset never meets
// the bytes of the one it replaced; with SetShardNamespace, each shard's
// namespace is the ingest that uploaded it, so the versions of a dataset
// share the entries of the shards they share. One large sparse file per shard lets the
// kernel's page cache do the copying, with one open file per shard instead of
// one per sample, for the maxOpenShards shards used last. A sample's bytes
// are written before its marker, so a crash between the two only loses the
// sample; every read is verified against the
// checksum written at ingest, and bytes that fail (bit rot, a torn write after
// power loss) are counted, dropped and fetched again, never served.
//
// Several mounts on one node may share ROOT: writes of one sample by two of
// them write the same bytes; a process that finds its open file unlinked by
// another's eviction reopens it. The bytes the tier's files hold never exceed
// the limit: a write reserves its space and lands while the tier's lock is
// held, and eviction deletes whole shard files, the least recently used
// first, truncating each before it unlinks it, since a file another mount
// still has open keeps its blocks until that mount closes it (evictFile).
// The lock is a mutex inside a process plus an flock across processes
// (goroutines share the flock'd file, so the flock alone excludes none of
// them). .usage is replaced by rename, so a crash or a full file system
// leaves the last whole count; one that cannot be read is measured again.
type Disk struct {
	root  string
	dir   string
	limit int64
	lock  *os.File
	// shardNS, if set, names each shard's namespace (SetShardNamespace);
	// else every shard is in dir. Set before use, never after.
	shardNS func(shard int) string

	lockMu sync.Mutex // taken before the flock on lock: the tier's lock within this process

	mu sync.Mutex // guards files; taken after lockMu when both are held
	// files are the open files of the shards read or written last, at most
	// maxOpenShards of them; evicted from it, a shard's files are closed
	// once no call uses them (shardFiles.users).
	files *simplelru.LRU[int, *shardFiles]

	// Counters, for metrics.
	Hits, HitBytes, Misses, Writes, WriteBytes, Evictions, Corrupt atomic.Int64
}

type shardFiles struct {
	dat, idx *os.File
	// users counts the calls between open and done; dropped says the files
	// left Disk.files. Both are guarded by Disk.mu. The files are closed
	// when both hold: no call is between open and done, and they are
	// dropped. Closed at the drop, a shard's files were closed under
	// another goroutine's read, which then missed (TestDiskReadWhileFilesRotate).
	users   int
	dropped bool
	touched atomic.Int64 // unix nanoseconds idx's mtime was last refreshed by a hit
	checked atomic.Int64 // unix nanoseconds the files were last seen linked
}

// Slot is where a sample lives in its shard, and its checksum.
type Slot struct {
	Shard int
	Index int   // position of the sample in its shard
	Off   int64 // offset of the sample in the shard's data
	Size  int64
	Sum   uint32 // CRC32C written at ingest
}

// slack is what a sample may add beyond its size: the file system blocks it
// shares with its neighbours at both ends, plus its marker's block.
const slack = 3 * 4096

// TierDir is the directory under --cache-dir that holds everything the
// disk tier writes.
const TierDir = "shardfs-disk-tier"

// tierMark is the file that marks TierDir as the tier's, and its content.
const (
	tierMark     = "SHARDFS-DISK-TIER"
	tierMarkText = "shardfs disk tier: every file below this directory is shardfs's cache, written and deleted by shardfs\n"
)

// validNamespace is whether ns is a name the tier keeps shards under.
func validNamespace(ns string) bool {
	return ns != "" && !strings.ContainsAny(ns, "/\x00") && !strings.HasPrefix(ns, ".")
}

// OpenDisk opens (creating if needed) the tier in cacheDir for namespace
// ns, holding at most limit bytes across every namespace of the tier.
// Everything it writes lies in cacheDir/TierDir.
func OpenDisk(cacheDir, ns string, limit int64) (*Disk, error) {
	if !validNamespace(ns) {
		return nil, fmt.Errorf("disk cache namespace %q: not a plain name", ns)
	}
	if limit < 16<<20 {
		return nil, fmt.Errorf("--cache-dir-size %d: use at least 16MiB", limit)
	}
	root, err := openTierDir(cacheDir)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(root, ns)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("--cache-dir %s: %w", cacheDir, err)
	}
	lock, err := os.OpenFile(filepath.Join(root, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("--cache-dir %s: %w", cacheDir, err)
	}
	files, _ := simplelru.NewLRU(maxOpenShards, func(_ int, f *shardFiles) { f.drop() }) // err only for a size below 1
	d := &Disk{root: root, dir: dir, limit: limit, lock: lock, files: files}
	// A smaller limit than a previous mount's: shrink to it now.
	if err := d.withLock(func() error { _, err := d.reserveLocked(0); return err }); err != nil {
		lock.Close()
		return nil, err
	}
	return d, nil
}

// openTierDir makes or finds cacheDir/TierDir, the tier's own directory,
// and returns its path. A TierDir that is a link, not a directory, or a
// directory without the tier's mark that holds anything is refused: it is
// someone else's, and the tier deletes what it finds in its own.
func openTierDir(cacheDir string) (string, error) {
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return "", fmt.Errorf("--cache-dir %s: %w", cacheDir, err)
	}
	root := filepath.Join(cacheDir, TierDir)
	if err := os.Mkdir(root, 0o755); err != nil && !os.IsExist(err) {
		return "", fmt.Errorf("--cache-dir %s: %w", cacheDir, err)
	}
	st, err := os.Lstat(root)
	if err != nil {
		return "", fmt.Errorf("--cache-dir %s: %w", cacheDir, err)
	}
	if !st.IsDir() {
		return "", fmt.Errorf("--cache-dir %s: %s is not a directory (a %v) and was not made by shardfs: move it away, or choose another --cache-dir", cacheDir, root, st.Mode().Type())
	}
	mark := filepath.Join(root, tierMark)
	marked := func() bool {
		b, err := os.ReadFile(mark)
		return err == nil && string(b) == tierMarkText
	}
	if marked() {
		return root, nil
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		return "", fmt.Errorf("--cache-dir %s: %w", cacheDir, err)
	}
	for _, e := range entries {
		if e.Name() == tierMark || strings.HasPrefix(e.Name(), tierMark+".tmp") {
			continue
		}
		// Mounts that start together race here: another may have made
		// the directory, marked it and written its lock between the
		// first look at the mark and the listing. The mark is only ever
		// renamed into place whole, and only into a directory that held
		// nothing else, so a mark found now still proves the directory is
		// the tier's; without one, it is someone else's.
		if marked() {
			return root, nil
		}
		return "", fmt.Errorf("--cache-dir %s: %s holds files (%s among them) but not shardfs's mark %s, so shardfs did not make it and will not delete in it: move it away, or choose another --cache-dir", cacheDir, root, e.Name(), tierMark)
	}
	// Empty: the tier's. The mark lands whole: written aside under a name
	// of this opener's own (openers that start together must not write
	// into one file), then renamed over whatever mark another put there,
	// whose text is the same.
	tmp, err := os.CreateTemp(root, tierMark+".tmp*")
	if err != nil {
		return "", fmt.Errorf("--cache-dir %s: %w", cacheDir, err)
	}
	_, werr := tmp.WriteString(tierMarkText)
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Chmod(tmp.Name(), 0o644)
	}
	if werr == nil {
		werr = os.Rename(tmp.Name(), mark)
	}
	if werr != nil {
		os.Remove(tmp.Name())
		return "", fmt.Errorf("--cache-dir %s: %w", cacheDir, werr)
	}
	return root, nil
}

// SetShardNamespace puts each shard's files under the namespace ns(shard)
// instead of the one OpenDisk was given: for a dataset with versions, the
// ingest that uploaded the shard, whose bytes, samples and offsets are the
// same in every version that holds it (an append adds shards; it never
// rewrites one), so that a new version's mount finds the shards it shares
// with the last one warm, and the tier holds them once. Call it before the
// tier is used.
func (d *Disk) SetShardNamespace(ns func(shard int) string) { d.shardNS = ns }

// dirOf is the directory of shard's files.
func (d *Disk) dirOf(shard int) string {
	if d.shardNS == nil {
		return d.dir
	}
	ns := d.shardNS(shard)
	if !validNamespace(ns) {
		return d.dir
	}
	return filepath.Join(d.root, ns)
}

// Close closes the tier's files; what they hold stays for the next mount.
func (d *Disk) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.files.Purge()
	return d.lock.Close()
}

// maxOpenShards bounds the shards whose files a mount keeps open: two
// descriptors each. Unbounded, a mount kept every shard it had read or
// written open for its life, and one over a dataset of 100,000 shards
// would hold 200,000 descriptors (TestDiskOpenFilesBounded).
const maxOpenShards = 512

// drop is the LRU's eviction of f: its files close now, or when the last
// call using them is done. The caller holds Disk.mu.
func (f *shardFiles) drop() {
	f.dropped = true
	f.closeIfUnused()
}

// done ends a use of f begun by open.
func (d *Disk) done(f *shardFiles) {
	d.mu.Lock()
	defer d.mu.Unlock()
	f.users--
	f.closeIfUnused()
}

// closeIfUnused closes f's files once they are dropped and no call uses
// them. The caller holds Disk.mu.
func (f *shardFiles) closeIfUnused() {
	if f.dropped && f.users == 0 {
		f.dat.Close()
		f.idx.Close()
	}
}

// Limit is the byte bound of the tier.
func (d *Disk) Limit() int64 { return d.limit }

// Used is the bytes the tier holds as its usage record says, across every
// mount that shares the directory (0 before the first write). The record
// is replaced whole by rename, so it is read without the lock.
func (d *Disk) Used() int64 {
	b, err := os.ReadFile(filepath.Join(d.root, ".usage"))
	if err != nil {
		return 0
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0
	}
	return v
}

// Get fills dst (len(dst) == s.Size) with sample s's bytes if the tier holds
// them and they verify. Bytes that fail their checksum are dropped and
// counted in Corrupt; the caller fetches them again.
func (d *Disk) Get(s Slot, dst []byte) bool { return d.get(s, dst, true) }

// Serve is Get for a reader's buffer: a sample the tier does not hold is
// not counted as a miss, since the caller falls back on the path that counts.
func (d *Disk) Serve(s Slot, dst []byte) bool { return d.get(s, dst, false) }

func (d *Disk) get(s Slot, dst []byte, countMiss bool) bool {
	miss := func() bool {
		if countMiss {
			d.Misses.Add(1)
		}
		return false
	}
	f := d.open(s.Shard, false)
	if f == nil {
		return miss()
	}
	defer d.done(f)
	var mark [1]byte
	if _, err := f.idx.ReadAt(mark[:], int64(s.Index)); err != nil || mark[0] != 1 {
		return miss()
	}
	if n, _ := f.dat.ReadAt(dst[:s.Size], s.Off); int64(n) != s.Size {
		return miss()
	}
	if !verify.Bytes(dst[:s.Size], s.Sum) {
		d.Corrupt.Add(1)
		f.idx.WriteAt([]byte{0}, int64(s.Index))
		return false
	}
	d.Hits.Add(1)
	d.HitBytes.Add(s.Size)
	if now, last := time.Now(), f.touched.Load(); now.UnixNano()-last > int64(10*time.Second) && f.touched.CompareAndSwap(last, now.UnixNano()) {
		os.Chtimes(f.idx.Name(), now, now) // recently used: evicted last
	}
	return true
}

// Has reports whether the tier holds a marker for sample s, without reading
// or verifying its bytes (Get does both).
func (d *Disk) Has(s Slot) bool {
	f := d.open(s.Shard, false)
	if f == nil {
		return false
	}
	defer d.done(f)
	var mark [1]byte
	_, err := f.idx.ReadAt(mark[:], int64(s.Index))
	return err == nil && mark[0] == 1
}

// Advise asks the kernel to read sample s's bytes into its page cache ahead
// of a Serve, if the tier holds them, and reports whether it does. It is
// the prefetch of tier-held samples: the page cache does the copying, and
// the bytes are still verified when served.
func (d *Disk) Advise(s Slot) bool {
	if !d.Has(s) {
		return false
	}
	if f := d.open(s.Shard, false); f != nil {
		unix.Fadvise(int(f.dat.Fd()), s.Off, s.Size, unix.FADV_WILLNEED)
		d.done(f)
	}
	return true
}

// Put stores sample s's bytes, which the caller has verified. It reports
// whether they were stored: not when the sample cannot fit the limit. The
// write happens under the tier's lock, after its space is reserved, so no
// eviction can measure the tier while bytes it did not count are landing.
func (d *Disk) Put(s Slot, b []byte) bool {
	stored := false
	d.withLock(func() error {
		ok, err := d.reserveLocked(s.Size + slack)
		if err != nil || !ok {
			return err
		}
		f := d.open(s.Shard, true)
		if f == nil {
			return nil
		}
		defer d.done(f)
		if _, err := f.dat.WriteAt(b[:s.Size], s.Off); err != nil {
			return err
		}
		if _, err := f.idx.WriteAt([]byte{1}, int64(s.Index)); err != nil {
			return err
		}
		stored = true
		return nil
	})
	if stored {
		d.Writes.Add(1)
		d.WriteBytes.Add(s.Size)
	}
	return stored
}

// GetMeta returns shard's index object if the tier holds it. The caller
// checks it against the checksum the dataset's manifest keeps.
func (d *Disk) GetMeta(shard int) ([]byte, bool) {
	name := d.metaPath(shard)
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, false
	}
	now := time.Now()
	os.Chtimes(name, now, now) // recently used: evicted last
	return b, true
}

// PutMeta stores shard's index object, which the caller has verified,
// within the limit; a crash leaves either the whole object or none.
func (d *Disk) PutMeta(shard int, b []byte) bool {
	stored := false
	d.withLock(func() error {
		ok, err := d.reserveLocked(int64(len(b)) + 4096)
		if err != nil || !ok {
			return err
		}
		name := d.metaPath(shard)
		os.MkdirAll(filepath.Dir(name), 0o755)
		tmp := fmt.Sprintf("%s.%d.tmp", name, os.Getpid())
		if err := os.WriteFile(tmp, b, 0o644); err != nil {
			os.Remove(tmp)
			return err
		}
		stored = os.Rename(tmp, name) == nil
		return nil
	})
	return stored
}

func (d *Disk) metaPath(shard int) string {
	return filepath.Join(d.dirOf(shard), fmt.Sprintf("%08d.meta", shard))
}

// open returns the open files of shard, reopening them if another mount's
// eviction unlinked them; with create (a write, under the tier's lock),
// missing files are created, and the files are always checked, since a
// write into a file another process evicted would take disk space that no
// one counts or frees. The caller uses them until it calls done: until then
// they stay open even if dropped from the files kept open.
func (d *Disk) open(shard int, create bool) *shardFiles {
	d.mu.Lock()
	defer d.mu.Unlock()
	if f, ok := d.files.Get(shard); ok {
		// Another mount's eviction may have unlinked the files: a read looks
		// at most once a second (two fstat calls per sample were a tenth of
		// a warm read).
		now := time.Now().UnixNano()
		if !create && now-f.checked.Load() < int64(time.Second) {
			f.users++
			return f
		}
		if linked(f.idx) && linked(f.dat) {
			f.checked.Store(now)
			f.users++
			return f
		}
		d.files.Remove(shard) // drops them: closed once no call uses them
	}
	dir := d.dirOf(shard)
	base := filepath.Join(dir, fmt.Sprintf("%08d", shard))
	flags := os.O_RDWR
	if create {
		flags |= os.O_CREATE
		if dir != d.dir {
			os.MkdirAll(dir, 0o755)
		}
	}
	// The marker file first: a marker never points into a .dat that is not there.
	idx, err := os.OpenFile(base+".idx", flags, 0o644)
	if err != nil {
		return nil
	}
	dat, err := os.OpenFile(base+".dat", flags, 0o644)
	if err != nil {
		idx.Close()
		return nil
	}
	f := &shardFiles{dat: dat, idx: idx, users: 1}
	d.files.Add(shard, f) // the least recently used shard's files are dropped past maxOpenShards
	return f
}

func linked(f *os.File) bool {
	var st syscall.Stat_t
	return syscall.Fstat(int(f.Fd()), &st) == nil && st.Nlink > 0
}

func (d *Disk) withLock(fn func() error) error {
	d.lockMu.Lock()
	defer d.lockMu.Unlock()
	if err := syscall.Flock(int(d.lock.Fd()), syscall.LOCK_EX); err != nil {
		return err
	}
	defer syscall.Flock(int(d.lock.Fd()), syscall.LOCK_UN)
	return fn()
}

// reserveLocked adds n bytes to the tier's usage, evicting the least
// recently used shard files of any namespace first if the limit needs it.
// The caller holds the flock.
func (d *Disk) reserveLocked(n int64) (bool, error) {
	usageFile := filepath.Join(d.root, ".usage")
	used := int64(-1) // unknown: measure
	if b, err := os.ReadFile(usageFile); err == nil {
		if v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && v >= 0 {
			used = v
		}
	}
	if used < 0 || used+n > d.limit {
		// The count only grows between evictions; measure what is really there.
		files, total := d.scanLocked()
		used = total
		evicted := false
		for i := 0; used+n > d.limit && i < len(files); i++ {
			evictFile(files[i].idx)
			if files[i].dat != "" {
				evictFile(files[i].dat)
			}
			used -= files[i].bytes
			d.Evictions.Add(1)
			evicted = true
		}
		if evicted {
			d.closeUnlinked()
		}
		if used+n > d.limit {
			d.writeUsage(usageFile, used)
			return false, nil
		}
	}
	return true, d.writeUsage(usageFile, used+n)
}

// evictFile frees the blocks of a tier file, then unlinks it. Unlinking
// alone frees nothing while some process has the file open, and every
// mount keeps the files of the shards it has read or written open (open):
// those of a shard it does not touch again stay open until it exits, so
// three mounts sharing a tier held 71-109 MB for a limit of 32 MiB
// (TestDiskBoundThreeProcesses, counting by statfs). Truncated, the file
// holds no blocks whoever has it open; a reader of it then reads short, a
// miss. The file is opened without following a link (scanLocked listed a
// regular file; a link put there since is unlinked, never followed) and
// checked regular before it is truncated.
func evictFile(path string) {
	if fd, err := unix.Open(path, unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0); err == nil {
		var st unix.Stat_t
		if unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG {
			unix.Ftruncate(fd, 0)
		}
		unix.Close(fd)
	}
	os.Remove(path)
}

// closeUnlinked closes this process's open shard files that an eviction
// (its own or another mount's) has unlinked. The caller holds the tier's
// lock.
func (d *Disk) closeUnlinked() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, shard := range d.files.Keys() {
		if f, ok := d.files.Peek(shard); ok && (!linked(f.idx) || !linked(f.dat)) {
			d.files.Remove(shard) // drops them: closed once no call uses them
		}
	}
}

// writeUsage replaces the usage record whole: written aside, then renamed.
func (d *Disk) writeUsage(name string, used int64) error {
	tmp := name + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.FormatInt(max(used, 0), 10)+"\n"), 0o644); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, name)
}

type diskFile struct {
	idx, dat string // a shard's two files, or an index object in idx alone
	bytes    int64
	used     time.Time
}

// scanLocked lists every shard file pair and index object of the tier,
// least recently used first, with the bytes they occupy on disk. It looks
// only at TIER/NAMESPACE/NAME for names the tier writes (shardName), one
// level of directories, links neither followed nor counted; on the way it
// deletes the temporary files of index objects a crash cut short (no one
// writes one outside the lock).
func (d *Disk) scanLocked() ([]diskFile, int64) {
	var out []diskFile
	var total int64
	namespaces, _ := os.ReadDir(d.root)
	for _, ns := range namespaces {
		if !ns.IsDir() || !validNamespace(ns.Name()) { // IsDir is false for a link
			continue
		}
		dir := filepath.Join(d.root, ns.Name())
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			kind := shardName(e.Name())
			if kind == "" || !e.Type().IsRegular() {
				continue
			}
			p := filepath.Join(dir, e.Name())
			switch kind {
			case ".tmp":
				os.Remove(p)
				continue
			case ".dat":
				continue // with its .idx
			}
			f := diskFile{idx: p}
			names := []string{p}
			if kind == ".idx" {
				f.dat = strings.TrimSuffix(p, ".idx") + ".dat"
				names = append(names, f.dat)
			}
			for _, name := range names {
				var st syscall.Stat_t
				if syscall.Lstat(name, &st) == nil && st.Mode&syscall.S_IFMT == syscall.S_IFREG {
					f.bytes += st.Blocks * 512
					if name == f.idx {
						f.used = time.Unix(st.Mtim.Sec, st.Mtim.Nsec)
					}
				}
			}
			total += f.bytes
			out = append(out, f)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].used.Before(out[j].used) })
	return out, total
}

// shardName is the kind of a file name the tier writes in a namespace:
// ".dat", ".idx" or ".meta" for SSSSSSSS and that extension (eight
// digits or more), ".tmp" for an index object's temporary SSSSSSSS.meta.PID.tmp;
// "" for any other name, which the tier never touches.
func shardName(name string) string {
	digits := func(s string) bool {
		for _, c := range []byte(s) {
			if c < '0' || c > '9' {
				return false
			}
		}
		return s != ""
	}
	dot := strings.IndexByte(name, '.')
	if dot < 8 || !digits(name[:dot]) { // %08d: eight digits or more
		return ""
	}
	switch rest := name[dot:]; rest {
	case ".dat", ".idx", ".meta":
		return rest
	default:
		if pid, ok := strings.CutPrefix(rest, ".meta."); ok {
			if pid, ok := strings.CutSuffix(pid, ".tmp"); ok && digits(pid) {
				return ".tmp"
			}
		}
	}
	return ""
}
