// Package fs owns the mounted tree: the go-fuse nodes of every view, their
// inode numbers and attributes, and the translation of a kernel read into a
// ReadAt on the prefetching reader. It holds every go-fuse node and file
// handle; package mount, which assembles a mount, only calls NewRoot and
// Mount.
//
//	.shardfs/info.json                      dataset, EC and order parameters
//	.shardfs/stats.json                     live counters (read anew on every open)
//	samples/<stratum>/<key>                 the dataset as-is, ImageFolder style;
//	                                        a listing's fields as xattrs user.shardfs.<field>
//	epochs/<EEEE>/rank-<RRR>/batch-<BBBBBB>.tar
//	epochs/<EEEE>/rank-<RRR>/epoch.tar
//	epochs/<EEEE>/rank-<RRR>/index.csv      a row per member, a column per listing field
//
// Directories are built lazily on lookup, so mounting a 10M-sample dataset
// costs nothing until a directory is listed, and listing epochs fetches no
// data. Inode numbers are hashes of paths, stable across mounts. Files are
// immutable: the kernel may keep their pages (FOPEN_KEEP_CACHE) and their
// attributes for an hour; the mount is read-only, so every write is EROFS.
//
// Files, one node kind each:
//
//	fs.go       the tree every node shares, Options, the one toErrno, inode numbers;
//	            an epoch served from another read path (Source) gets a tree of its own
//	root.go     the root and .shardfs/ (info.json, stats.json)
//	epochs.go   epochs/ and epochs/<EEEE>/
//	rank.go     epochs/<EEEE>/rank-<RRR>/: its order, computed and pinned on first use
//	prime.go    Prime: the first epoch's orders computed as the mount starts, and
//	            their first batches fetched ahead, for the lookups to take
//	file.go     a batch tar, epoch.tar or index.csv, read through prefetch
//	samples.go  samples/ and the files below it
//	mount.go    mounting and unmounting; timed.go, FUSE op latency
package fs
