package mount

import (
	"context"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"

	"github.com/shardfs/shardfs/fs"
	"github.com/shardfs/shardfs/layout"
)

// primeHold is how long the first batches are kept fetched ahead of a
// trainer that has not opened them: a trainer starts reading within
// minutes of its mount (imports, the model, a checkpoint), and after that
// the bytes fetched stay cached as any prefetch's do, with no reader to
// keep them ahead of.
const primeHold = 10 * time.Minute

// startPrime fetches the first batches of the epoch the job starts in
// (its --resume-at epoch, else its first) for each rank served, as the
// mount starts (fs.Prime): the trainer's first batch then finds them
// cached, not a round of GETs away. A job that starts elsewhere (a loader
// resumed mid-epoch) ends the priming at its first open, having cost at
// most one lead of bytes. A mount with --follow does not prime: the
// epoch's dataset version is recorded when the epoch is first opened,
// and priming would record it before any reader asked.
func (mt *Mount) startPrime(root gofs.InodeEmbedder, spec *layout.Spec) {
	epoch := spec.FirstEpoch
	if spec.ResumeEpoch >= 0 {
		epoch = spec.ResumeEpoch
	}
	ctx, cancel := context.WithCancel(context.Background())
	mt.stopPrime, mt.primed = cancel, make(chan struct{})
	go func() {
		defer close(mt.primed)
		if err := fs.Prime(ctx, root, epoch, primeHold); err != nil && ctx.Err() == nil {
			mt.log.Warn("could not fetch the first batches ahead; the first reads fetch them", "epoch", epoch, "err", err)
		}
	}()
}
