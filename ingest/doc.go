// Package ingest turns a source (an ImageFolder tree, a .csv / .jsonl
// listing, or records: WebDataset tar shards, local or on a store, a JSONL
// corpus or a Parquet file) into a committed dataset, or a new version of
// one: it
// places samples into shards by a seeded stratified shuffle, erasure-codes
// each shard, uploads all fragments in parallel with bounded memory, and
// writes the manifest to every store last. That write is the commit: an
// ingest killed at any moment leaves no visible dataset, and the next
// ingest of the same name removes what it left behind.
//
// Files: scan.go reads the source (tree or listing) into Items, and
// webdataset.go, jsonl.go and parquet.go sources of records (each Item a
// record of members, remade at upload, or read again window by window:
// place.go; sourcefiles.go reads local files or store objects, each as
// one version: oneversion.go for a local file, backend.Versions for a
// store's object, so a source written during the ingest is refused, never
// read as a mix); ingest.go
// plans, encodes and uploads a single-process ingest and commits it in a
// repository.Txn (the protocol lives there, beside the code that reads it;
// every object is written through repository, which alone spells keys);
// stream.go is the single-process ingest of a source of records read once,
// a chunk at a time, in memory flat in the records (keys.go checks its keys
// from sorted runs on local disk), which deletes what it wrote when it is
// refused part way;
// part.go is a distributed ingest: parts that upload with conditional
// writes and no coordination, and the Commit that checks and joins them;
// slice.go, its parts of WebDataset shards or of a JSONL corpus keyed by
// a field (its bytes cut at line starts, jsonl.go's slice), each of which
// reads only its slice of the source and writes a segment numbered on its own, which the
// commit maps onto the dataset's strata and members, merging the parts'
// sorted keys;
// append.go and rollback.go commit a dataset's next version (an append
// uploads only the new samples' shards, from one process or from parts;
// a rollback uploads nothing), each keeping the version it replaces
// (repository/version.go); migrate.go copies a dataset's kept versions to
// other stores, re-encoded, and commits them there.
//
// Safety: an ingest holds the dataset's lock (repository.Begin) from
// before its first write to its commit; fragments of a single-process
// ingest are named by a fresh ingest id, so no run writes into another's;
// a part's objects are named by an id every rerun of the part shares, so a
// part creates them only where none is and accepts an existing one only if
// it holds exactly its bytes (repository.CreateOrSame). Orphans are purged
// only by the lock holder, right after its commit (Txn.Purge), and never
// those of a distributed ingest that is still running.
package ingest
