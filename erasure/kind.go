package erasure

import "context"

// ReadKind says why a GET was made, so that what an epoch costs in requests
// can be told by cause (stats.json's gets_by_kind, Prometheus's
// shardfs_gets_total{kind}).
type ReadKind uint8

const (
	// ReadDemand: a reader waits for it. Reads with no kind are these.
	ReadDemand ReadKind = iota
	// ReadPrefetch: fetched ahead of the readers, by the known order.
	ReadPrefetch
	// ReadHedge: raced against a slow store, or made because of one.
	ReadHedge
	// ReadDegraded: rebuilding a range from the other fragments, because
	// a store is down or a fragment was missing or corrupt.
	ReadDegraded
	// NumReadKinds counts the kinds.
	NumReadKinds
)

var readKindNames = [NumReadKinds]string{"demand", "prefetch", "hedge", "degraded"}

func (k ReadKind) String() string { return readKindNames[k] }

type readKindKey struct{}

// WithReadKind returns ctx under which the reader's GETs count as kind k
// (a hedge or a degraded read made under it counts as that instead).
func WithReadKind(ctx context.Context, k ReadKind) context.Context {
	return context.WithValue(ctx, readKindKey{}, k)
}

func readKindOf(ctx context.Context) ReadKind {
	k, _ := ctx.Value(readKindKey{}).(ReadKind)
	return k
}
