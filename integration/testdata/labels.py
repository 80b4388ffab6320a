"""Reads one rank-epoch of a mount through shardfs.Loader (torch DataLoader
workers) and prints, per sample, its key and the class name its target
names: "target <key> <class>"; first "classes <count> <names,...>"."""
import sys

sys.path.insert(0, "../python")
import shardfs  # noqa: E402

mount, rank, world = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
loader = shardfs.Loader(mount, rank=rank, world_size=world, num_workers=2, decode=lambda body, name: body, keys=True)
classes = loader.classes()
print("classes", len(classes), ",".join(classes))
loader.set_epoch(0)
for samples, targets, keys in loader:
    for key, target in zip(keys, targets.tolist()):
        print("target", key, classes[target])
