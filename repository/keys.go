package repository

import (
	"fmt"

	"github.com/shardfs/shardfs/manifest"
)

// ManifestKey is the object key of a dataset's manifest.
func ManifestKey(name string) string { return name + "/manifest" }

// PendingManifestKey and PendingIdentityKey hold a store's manifest copy and
// identity while an ingest commits (see ingest's commit): written to every
// store before any real copy, so a commit killed after its first real copy
// still leaves every store a copy. They count only for an ingest some store
// holds a real copy of; the commit deletes them when it is done.
func PendingManifestKey(name string) string { return name + "/manifest.pending" }

// PendingIdentityKey: see PendingManifestKey.
func PendingIdentityKey(name string) string { return name + "/identity.pending" }

// DataPrefix is the prefix of all fragment objects of a dataset.
func DataPrefix(name string) string { return name + "/data/" }

// FragmentKey names fragment frag of shard in ingest ingestID of dataset name.
func FragmentKey(name, ingestID string, shard, frag int) string {
	return fmt.Sprintf("%s/data/%s/%08d.%02d", name, ingestID, shard, frag)
}

// ShardIndexKey is IndexKey of shard s of dataset name, whose header h
// says under which ingest and number it is stored (Header.ShardObject).
func ShardIndexKey(name string, h *manifest.Header, s int) string {
	id, n := h.ShardObject(s)
	return IndexKey(name, id, n)
}

// ShardFragmentKey is FragmentKey of fragment frag of shard s of dataset
// name, whose header h says under which ingest and number it is stored.
func ShardFragmentKey(name string, h *manifest.Header, s, frag int) string {
	id, n := h.ShardObject(s)
	return FragmentKey(name, id, n, frag)
}

// ShardHealHintKey is HealHintKey of shard s of dataset name, named as its
// other objects are (Header.ShardObject).
func ShardHealHintKey(name string, h *manifest.Header, s int) string {
	id, n := h.ShardObject(s)
	return HealHintKey(name, id, n)
}

// IndexKey names shard's index in ingest ingestID of dataset name (format
// 2): a copy on every store.
func IndexKey(name, ingestID string, shard int) string {
	return fmt.Sprintf("%s/index/%s/%08d", name, ingestID, shard)
}

// IndexPrefix is the prefix of all shard index objects of a dataset.
func IndexPrefix(name string) string { return name + "/index/" }

// IdentityKey is the object key of a store's identity for dataset name.
func IdentityKey(name string) string { return name + "/identity" }

// LockKey is the object key of the ingest lock of dataset name.
func LockKey(name string) string { return name + "/lock" }

// HealLockKey is the object of the healer's lock of dataset name: one
// healer writes at a time (heal).
func HealLockKey(name string) string { return name + "/heal/lock" }

// HealStateKey holds where the healer of dataset name is in its scrub, so
// a healer that restarts resumes there.
func HealStateKey(name string) string { return name + "/heal/state" }

// HealHintPrefix holds the shards a mount read degraded, for the healer
// to heal first: one object per shard, HealHintKey.
func HealHintPrefix(name string) string { return name + "/heal/hints/" }

// HealHintKey names the hint that shard of ingest ingestID read degraded.
func HealHintKey(name, ingestID string, shard int) string {
	return fmt.Sprintf("%s%s.%08d", HealHintPrefix(name), ingestID, shard)
}

// PartPrefix holds the part records of name's distributed ingests.
func PartPrefix(name string) string { return name + "/parts/" }

// PartKey names part i of n of distributed ingest id.
func PartKey(name, id string, i, n int) string {
	return fmt.Sprintf("%s%s/part-%06d-of-%06d", PartPrefix(name), id, i, n)
}

// PartKeysKey names object piece of the sorted keys of part i of n of
// distributed ingest id (a part that read only its slice).
func PartKeysKey(name, id string, i, n, piece int) string {
	return fmt.Sprintf("%s%s/keys-%06d-of-%06d.%06d", PartPrefix(name), id, i, n, piece)
}

// PartStartedKey marks distributed ingest id as running: purges of other
// ingests leave its fragments alone.
func PartStartedKey(name, id string) string { return PartPrefix(name) + id + "/started" }

// ProbePrefix holds the probe objects of one check that the stores are
// distinct places (see ingest's checkAliases).
func ProbePrefix(name, token string) string { return name + "/probe/" + token + "/" }
