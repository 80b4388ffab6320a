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

// CheckApart refuses a source store (a WebDataset set read by ingest) that
// is the same place as one of stores or lies inside one: what lies under
// a store is shardfs's, and purge and gc delete the objects of
// a dataset no version needs, so a source there could be deleted once it
// is ingested (issue 55: ingest --force from NAME/data/ committed, then
// its purge deleted the source objects). A store inside the source is
// allowed: shardfs writes and deletes only its own objects there.
func CheckApart(source Store, stores []Store) error {
	sspace, sdir := location(source)
	return checkApart(source.String(), sspace, sdir, stores)
}

// CheckApartDir is CheckApart for a source in a local directory.
func CheckApartDir(dir string, stores []Store) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	return checkApart(dir, "file", path.Clean("/"+filepath.ToSlash(abs)), stores)
}

func checkApart(source, sspace, sdir string, stores []Store) error {
	for i, s := range stores {
		space, dir := location(s)
		if space != sspace {
			continue
		}
		if sdir == dir || within(sdir, dir) {
			return fmt.Errorf("source %s lies in store %d (%s): shardfs deletes the objects under its stores that no dataset version needs (the purge after an ingest, gc), so a source there could be lost; keep the source outside every store", source, i, s)
		}
	}
	return nil
}

// within reports whether dir is strictly below parent.
func within(dir, parent string) bool {
	return parent == "/" || strings.HasPrefix(dir, parent+"/")
}
