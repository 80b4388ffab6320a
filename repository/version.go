package repository

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/manifest"
)

// A dataset's versions on the stores. The manifest key holds the current
// version. Every version that another has replaced keeps its manifest, as
// it was committed, under VersionKey(name, its ingest id): a copy on every
// store, written before the commit that replaces it, and removed only by
// gc. The current manifest's history (manifest.Header.Versions) says which
// ingest id each version number is.

// VersionPrefix is the prefix of the kept manifests of a dataset's versions.
func VersionPrefix(name string) string { return name + "/versions/" }

// VersionKey names the kept manifest of the version committed by ingest id.
func VersionKey(name, ingestID string) string { return VersionPrefix(name) + ingestID }

// ErrNoVersion: the dataset has no such version, or gc removed it.
var ErrNoVersion = errors.New("no such version")

// Totals are m's samples and payload bytes, from whichever table m holds.
func Totals(m *manifest.Manifest) (samples, bytes int64) {
	if m.Root != nil && m.Top == nil {
		for _, g := range m.Root.Groups {
			bytes += g.Size
		}
		return m.Root.Samples(), bytes
	}
	for _, sh := range m.Shards {
		samples += int64(sh.NumSamples)
		bytes += sh.Size
	}
	return samples, bytes
}

// History is the current manifest's list of the dataset's versions.
func History(m *manifest.Manifest) []manifest.VersionInfo {
	return m.History(Totals(m))
}

// KeepVersion writes enc, the stored manifest of the version committed by
// ingest id, under VersionKey on every store; it must reach Quorum of
// them. A commit that replaces the current version first keeps it so.
func KeepVersion(ctx context.Context, stores []backend.Store, name, id string, enc []byte, k, m int) error {
	written, errs := backend.Split(backend.OnEvery(stores, func(i int, s backend.Store) error {
		if err := s.Put(ctx, VersionKey(name, id), enc); err != nil {
			return fmt.Errorf("store %d: %w", i, err)
		}
		return nil
	}))
	if q := Quorum(k, m); len(written) < q {
		return fmt.Errorf("keep version %s of %s: it reached %d of %d stores, and %d are needed (%v)", id, name, len(written), len(stores), q, errors.Join(errs...))
	}
	return nil
}

// RawManifest returns the stored bytes of the current manifest of ingest
// id, from the first store whose copy decodes as that ingest's, so that a
// version is kept byte for byte as it was committed.
func RawManifest(ctx context.Context, stores []backend.Store, name, id string) ([]byte, error) {
	var errs []error
	for i, s := range stores {
		b, m, err := readManifestBytes(ctx, s, ManifestKey(name))
		if err == nil && m.IngestID != id {
			err = fmt.Errorf("holds ingest %s", m.IngestID)
		}
		if err == nil {
			return b, nil
		}
		errs = append(errs, fmt.Errorf("store %d: %w", i, err))
	}
	return nil, fmt.Errorf("no intact manifest of %s ingest %s to keep as a version: %w", name, id, errors.Join(errs...))
}

// loadVersion returns the header of version n of the dataset whose current
// manifest is cur: cur itself, or the kept manifest of that version.
func loadVersion(ctx context.Context, stores []backend.Store, cur *manifest.Manifest, n int) (*manifest.Manifest, error) {
	history := History(cur)
	if n == cur.VersionNumber() {
		return cur, nil
	}
	v, ok := manifest.FindVersion(history, n)
	if !ok {
		return nil, fmt.Errorf("%w: %s has versions %s: run shardfs versions %s", ErrNoVersion, cur.Name, versionRange(history), cur.Name)
	}
	var errs []error
	missing := 0
	for i, s := range stores {
		_, m, err := readManifestBytes(ctx, s, VersionKey(cur.Name, v.IngestID))
		if err == nil && m.IngestID != v.IngestID {
			err = fmt.Errorf("%w: %s holds ingest %s", manifest.ErrCorrupt, VersionKey(cur.Name, v.IngestID), m.IngestID)
		}
		if err == nil {
			return m, nil
		}
		if errors.Is(err, backend.ErrNotExist) {
			missing++
		}
		errs = append(errs, fmt.Errorf("store %d: %w", i, err))
	}
	if missing == len(stores) {
		return nil, fmt.Errorf("%w: version %d of %s was removed by gc (no store holds %s)", ErrNoVersion, n, cur.Name, VersionKey(cur.Name, v.IngestID))
	}
	return nil, fmt.Errorf("version %d of %s: no intact copy of %s on any store: %w", n, cur.Name, VersionKey(cur.Name, v.IngestID), errors.Join(errs...))
}

// LoadVersionHeader is LoadHeader for version n (0: the current one).
func LoadVersionHeader(ctx context.Context, stores []backend.Store, name string, n int, log *slog.Logger) (*manifest.Manifest, error) {
	cur, err := LoadHeader(ctx, stores, name, log)
	if err != nil || n == 0 {
		return cur, err
	}
	return loadVersion(ctx, stores, cur, n)
}

// versionRange says which version numbers a history holds, as "1-4" or "1, 3-5".
func versionRange(history []manifest.VersionInfo) string {
	var parts []string
	for i := 0; i < len(history); {
		j := i
		for j+1 < len(history) && history[j+1].Number == history[j].Number+1 {
			j++
		}
		if i == j {
			parts = append(parts, fmt.Sprint(history[i].Number))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", history[i].Number, history[j].Number))
		}
		i = j + 1
	}
	return strings.Join(parts, ", ")
}
