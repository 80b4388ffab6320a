// Package prefetch owns the read path of the mount below the file system:
// it turns a virtual file's extents into verified bytes through the cache,
// and, because it knows the exact order of every open rank-epoch, it fetches
// ahead of the readers — exactly the chunks they will read next, coalesced
// into large ranged GETs — within a memory budget.
//
// Each open rank-epoch is a stream. Every open file handle on it has a
// position (a member index); the stream keeps lead bytes fetched or in
// flight past the lowest position, so several DataLoader workers reading
// batch b, b+1, ... at once are all covered. The lead is
// rate × (latency + margin), both measured, clamped to [MinLead, Budget].
// The GETs in flight that carry it are sized by Little's law, the readers'
// demand in GETs per second × a GET's latency, with a margin, up to the
// stores' request slots (depth.go): a fixed count starves fast readers of
// small samples on slow stores, and floods slow ones.
// Demand misses have their own GET slots, so prefetch never starves the
// bytes a reader is waiting for.
//
// Files, each one responsibility:
//
//	reader.go    Config, the Reader and its limits: demand GET slots, prefetch
//	             GET slots and prefetch bytes in flight, each a semaphore.Weighted
//	estimate.go  the lead: consumption rate (from the bytes this reader
//	             served) and GET latency, both measured
//	depth.go     the prefetch GETs in flight: depthFor (Little's law) and
//	             the gate whose slots it sets
//	demand.go    a read that misses the cache: one chunk fetched on demand
//	             within the read's timeout, and the samples/ view
//	disktier.go  how the reader gets shard bytes (source): straight from its
//	             Fetcher, or through DiskTier, a Fetcher in front of it that
//	             keeps whole verified samples on local disk
//	warm.go      Warm, which fills the disk tier, and the samples a read
//	             takes from the tier directly, bypassing the memory cache
//	vector.go    one GET whose response lands in its pieces' own buffers
//	handle.go    Handle, one open file: its extents and its position
//	stream.go    one open rank-epoch: its handles' positions, and each
//	             sample's next use, which the cache evicts by
//	sched.go     what each stream fetches next: targets, spans, bridging, rides
//	             and the fetch of a span
//	prime.go     Prime: a rank-epoch fetched ahead of a reader that has not
//	             opened it yet (mount --prime)
//	uses.go      memberIndex: the members of a rank-epoch that read a
//	             sample, for the next use the cache evicts by
package prefetch
