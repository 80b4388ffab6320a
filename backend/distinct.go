package backend

import (
	"fmt"
	"net/url"
	"path"
	"path/filepath"
	"strings"
)

// location is where a store keeps its objects: a namespace (a local file
// system, or an endpoint and bucket) and a path within it.
func location(s Store) (space, dir string) {
	u, err := url.Parse(s.String())
	if err != nil {
		return s.String(), ""
	}
	switch u.Scheme {
	case "file":
		return "file", path.Clean("/" + u.Path)
	default:
		bucket, prefix, _ := strings.Cut(strings.TrimPrefix(u.Path, "/"), "/")
		return strings.ToLower(u.Host) + "/" + bucket, path.Clean("/" + prefix)
	}
}

// CheckDistinct refuses a store list in which two stores are the same place,
// or one lies inside another: such stores share a failure domain, so the
// erasure code's promise of surviving m lost stores would silently shrink.
func CheckDistinct(stores []Store) error {
	type loc struct{ space, dir string }
	locs := make([]loc, len(stores))
	for i, s := range stores {
		locs[i].space, locs[i].dir = location(s)
	}
	for i := range locs {
		for j := i + 1; j < len(locs); j++ {
			a, b := locs[i], locs[j]
			if a.space != b.space {
				continue
			}
			switch {
			case a.dir == b.dir:
				return fmt.Errorf("stores %d and %d are the same place (%s): every store must be its own failure domain; pass k+m different stores", i, j, stores[i])
			case within(a.dir, b.dir), within(b.dir, a.dir):
				return fmt.Errorf("stores %d (%s) and %d (%s) overlap: one lies inside the other; give every store its own bucket or a prefix outside the others", i, stores[i], j, stores[j])
			}
		}
	}
	return nil
}

// PathIn says where a source (a store's objects) lies in store: its path
// relative to the store's root ("" for the root itself), and whether it
// lies there at all. Ingest refuses a source in a dataset's namespace on
// a destination store, which purge and gc delete in.
func PathIn(source, store Store) (rel string, in bool) {
	sspace, sdir := location(source)
	return pathIn(sspace, sdir, store)
}

// DirIn is PathIn for a source in a local directory.
func DirIn(dir string, store Store) (rel string, in bool) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", false
	}
	return pathIn("file", path.Clean("/"+filepath.ToSlash(abs)), store)
}

func pathIn(sspace, sdir string, store Store) (string, bool) {
	space, dir := location(store)
	switch {
	case space != sspace:
		return "", false
	case sdir == dir:
		return "", true
	case within(sdir, dir):
		return strings.TrimPrefix(strings.TrimPrefix(sdir, dir), "/"), true
	}
	return "", false
}

// within reports whether dir is strictly below parent.
func within(dir, parent string) bool {
	return parent == "/" || strings.HasPrefix(dir, parent+"/")
}
