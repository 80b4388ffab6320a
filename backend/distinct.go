package backend

import (
	"fmt"
	"net/url"
	"path"
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

// within reports whether dir is strictly below parent.
func within(dir, parent string) bool {
	return parent == "/" || strings.HasPrefix(dir, parent+"/")
}
