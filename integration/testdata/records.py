"""Reads one rank's epoch 0 of a mount of records through shardfs.Loader
(a torch DataLoader with 2 workers), decoding every member, and prints
"records <count> <member names, sorted>"."""
import sys

sys.path.insert(0, "../python")
import shardfs  # noqa: E402

mount, rank, world = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
loader = shardfs.Loader(mount, rank=rank, world_size=world, num_workers=2)
loader.set_epoch(0)
n, names = 0, set()
for batch in loader:
    for r in batch:
        assert r["jpg"].mode == "RGB" and r["jpg"].size[0] >= 8, r["__key__"]
        assert isinstance(r["txt"], str) and r["txt"].startswith("caption "), r["__key__"]
        assert isinstance(r["json"], dict) and r["json"]["source"] in ("web", "books", "news", "code", "forum"), r["__key__"]
        assert isinstance(r["json"]["aesthetic"], float), r["__key__"]
        assert r["__repeat__"] == 0, r["__key__"]  # alpha 1: no sample is drawn twice
        names |= set(k for k in r if not k.startswith("__"))
        n += 1
print("records", n, ",".join(sorted(names)))
