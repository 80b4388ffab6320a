// Package erasure owns the Reed-Solomon RS(k,m) layout of a shard: how a
// shard's bytes are cut into k contiguous data fragments plus m parity
// fragments, which store holds each fragment, the per-block checksums, and
// reading any byte range back, healthy or degraded.
//
// A shard of S bytes is split into k data fragments of F = ceil(S/k) bytes
// each (the last one zero-padded), so shard byte x lives in data fragment
// x/F at offset x%F. RS is systematic and works column by column: byte j of
// every parity fragment depends only on byte j of the data fragments. So a
// degraded read of fragment range [a,b) reads [a,b) of any k surviving
// fragments and decodes that range only.
//
// Every fragment is cut into blocks of BlockSize bytes, each with a CRC32C
// computed at ingest and carried in the manifest. A read is widened to whole
// blocks and every block is checked before a byte leaves this package. A
// missing fragment, a store error, a short body and a checksum mismatch are
// all the same thing here: an erasure, repaired by decoding from survivors.
// With more than m erasures in a range the read fails with *TooFewError.
//
// Fragment i of shard s lives on store (i+s) mod (k+m), so healthy reads
// spread evenly over all stores.
//
// Every GET is reported to Metrics with why it was made (ReadKind, kind.go):
// the caller's kind from its context (demand or prefetch), or hedge and
// degraded for the reads this package adds itself.
package erasure
