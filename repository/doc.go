// Package repository owns what is on the stores: it is the only code that
// writes, creates or deletes an object of a dataset, takes a lock on one,
// or spells a key (TestOnlyRepositoryTouchesTheStores holds every other
// package to that; backend implements the stores below it). Others hold
// typed handles (Object: FragmentObject, IndexObject, ...; object.go) and
// call the operations here.
//
// Every replacing or creating write is one transaction (Txn, txn.go): the
// lock, the refusal of a committed dataset, the parent version kept, the
// commit (commit.go's protocol) and the purge; ingest, append, rollback,
// a distributed ingest's commit, migrate, gc, repair, delete and the
// healer's mend of the metadata all begin one. Beside it: where objects
// live (keys.go), how the manifest is found among the k+m copies, the
// versions and the mounts' leases on them, the whole-dataset checks
// (verify, whole or a few shards at a time), fixes (repair) and clean-up
// (gc; delete.go removes a whole dataset); the distributed ingest's part
// objects (parts.go) and the probe that tells stores apart (probe.go);
// what the healer keeps on the stores: its lock, its state, the mounts'
// hints (healer.go; a mount's Hinter writes the hints); the run log of the
// trainer's reports that --feedback weights epochs from (runlog.go); and
// the catalogs the read path asks about samples, whole (ManifestCatalog)
// or read shard by shard as a mount needs them (LazyCatalog: in format 3,
// group by group too).
//
// Object layout in every store (keys.go names every key):
//
//	NAME/manifest                            the commit point, one copy per store
//	NAME/identity                            this store's place: dataset, ingest id, position
//	NAME/lock                                held by the one ingest of NAME that may commit
//	NAME/manifest.pending, identity.pending  a commit in progress (see PendingManifestKey)
//	NAME/data/INGEST-ID/SSSSSSSS.FF          fragment FF of shard SSSSSSSS (numbered within its segment when it is Local: manifest.Header.ShardObject)
//	NAME/index/INGEST-ID/SSSSSSSS            shard SSSSSSSS's index (metadata formats 2 and 3), a copy on every store
//	NAME/group/INGEST-ID/GGGGGGGG            group GGGGGGGG's object (format 3: per shard of the group, 1,024 by default, counts and index reference), a copy on every store
//	NAME/versions/INGEST-ID                  the manifest of a version a later commit replaced, as committed, a copy on every store (version.go)
//	NAME/leases/ID                           a running mount's lease on the version it serves, a copy on every store (lease.go)
//	NAME/parts/JOB-ID/part-IIIIII-of-NNNNNN  a finished part of a distributed ingest, until its commit
//	NAME/parts/JOB-ID/keys-IIIIII-of-NNNNNN.PPPPPP  piece PPPPPP of a part's sorted keys (a part that read only its slice), until its commit
//	NAME/parts/JOB-ID/started                a distributed ingest is running: purges leave it alone (also JOB-ID-pIIIIII, a slice part's segment)
//	NAME/probe/TOKEN/I                       ingest's probe that tells stores apart, removed at once
//	NAME/heal/lock                           held by the one healer of NAME that may write
//	NAME/heal/state                          where the healer is in its scrub, a copy on every store
//	NAME/heal/hints/INGEST-ID.SSSSSSSS       a mount read shard SSSSSSSS with a fragment missing or corrupt
//	NAME/runs/RUN/report-EEEEEE              the trainer's report of epoch EEEEEE of run RUN, written once, a copy on every store (runlog.go)
//
// Names are flat (letters, digits, '-', '_', '.'), so NAME/ is a namespace
// no other dataset's name can fall inside. A dataset's versions share
// objects: shard s of every version that holds it is under the ingest that
// uploaded it (manifest.Segment), and the current manifest's history names
// every version's ingest. Fragments of an ingest that never committed are
// named by no version; they are invisible and are removed by the next
// ingest of NAME that holds the lock. Those of versions no retention rule
// keeps are removed by gc (gc.go), never by an ingest.
//
// The manifest is chosen by agreement, not by age: the ingest id held by the
// most intact copies wins. When copies of another ingest are present too, the
// winner must also be held by at least Quorum stores. Alone, an ingest's
// copies count as committed unless the stores that provably hold no copy
// (they answer "no such object") leave it short of Quorum even if every
// store that did not answer held one: then its commit was interrupted, and
// the ingest is invisible, as a crashed ingest must be. Each
// store's identity then proves it sits at the position the manifest gives
// it, so a permuted, duplicated or foreign store is recognised before
// anything is read from it as ours, and never written into.
package repository
