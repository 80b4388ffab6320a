"""Reads rank 0's epoch 0 of a mount through shardfs.Loader (torch
DataLoader workers, keys=True) and prints, per sample, its batch, its key
as the loader hands it back, and the key's repeat count:
"<batch> <key> <repeat>"."""
import sys

sys.path.insert(0, "../python")
import shardfs  # noqa: E402

loader = shardfs.Loader(sys.argv[1], rank=0, world_size=1, num_workers=2, decode=lambda body, name: body, keys=True)
loader.set_epoch(0)
for b, (samples, targets, keys) in enumerate(loader):
    for key in keys:
        print(b, key, key.repeat)
