"""Reads rank 0's epoch 0 of a --feedback mount through shardfs.Loader (a
torch DataLoader with 2 workers), sums a made-up "loss" per stratum (the
loss of a sample is 1, and 4 in stratum HIGH), and reports the mean per
stratum with loader.report(0, ...). Prints one JSON line: the samples read,
the strata, the report and what report() printed.

    feedback.py MOUNT WORLD HIGH SHARDFS_BINARY"""
import json
import sys

sys.path.insert(0, "../python")
import shardfs  # noqa: E402

mount, world, high, binary = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
loader = shardfs.Loader(mount, rank=0, world_size=world, num_workers=2)
loader.set_epoch(0)
strata = loader.strata_of(0)
sums, counts, n = {}, {}, 0
for b, (samples, classes) in enumerate(loader):
    assert len(samples) == len(strata[b]), (b, len(samples), len(strata[b]))
    for s in strata[b]:
        sums[s] = sums.get(s, 0.0) + (4.0 if s == high else 1.0)
        counts[s] = counts.get(s, 0) + 1
        n += 1
report = {s: sums[s] / counts[s] for s in sums}
out = loader.report(0, report, shardfs=binary)
print(json.dumps({"samples": n, "strata": loader.strata(), "report": report, "out": out}))
