"""A real trainer's view of a loader: a PyTorch DataLoader with 8 workers
reads batches for one pass while the "GPU" computes a fixed time per batch.
Prints one JSON line: batches, samples, wall seconds, seconds the trainer
waited for data (GPU idle), the stall fraction = waited / compute, and the
wait before each batch in ms (waits_ms[i] is batch i's; batch 0's is
start-up, not counted in the stall).

    trainer.py tars RANK_DIR COMPUTE_S [BATCHES]
    trainer.py files ROOT INDEX_CSV COMPUTE_S [BATCHES]

"tars" reads shardfs batch-*.tar files (one file per batch); "files" reads
the same samples as individual files, in the same batches (index.csv's
batch column), as an ImageFolder-style loader over a peer mount does.
"""
import csv
import json
import os
import sys
import tarfile
import time

import torch
from torch.utils.data import DataLoader, Dataset


class TarBatches(Dataset):
    def __init__(self, rank_dir, limit):
        files = sorted(f for f in os.listdir(rank_dir) if f.startswith("batch-"))
        self.files = [os.path.join(rank_dir, f) for f in files][:limit]

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        n = 0
        with tarfile.open(self.files[i]) as tf:
            for m in tf.getmembers():
                if not m.name.endswith(".cls"):
                    n += len(tf.extractfile(m).read())
        return torch.tensor(n)


class FileBatches(Dataset):
    def __init__(self, root, index_csv, limit):
        batches = {}
        with open(index_csv) as f:
            for row in csv.DictReader(f):
                batches.setdefault(int(row["batch"]), []).append(os.path.join(root, row["key"]))
        self.batches = [batches[b] for b in sorted(batches)][:limit]

    def __len__(self):
        return len(self.batches)

    def __getitem__(self, i):
        n = 0
        for p in self.batches[i]:
            with open(p, "rb") as f:
                n += len(f.read())
        return torch.tensor(n)


def main():
    mode = sys.argv[1]
    if mode == "tars":
        compute = float(sys.argv[3])
        limit = int(sys.argv[4]) if len(sys.argv) > 4 else None
        ds = TarBatches(sys.argv[2], limit)
    else:
        compute = float(sys.argv[4])
        limit = int(sys.argv[5]) if len(sys.argv) > 5 else None
        ds = FileBatches(sys.argv[2], sys.argv[3], limit)
    loader = DataLoader(ds, batch_size=None, num_workers=8, prefetch_factor=2)
    start = time.monotonic()
    waited, batches, nbytes, waits = 0.0, 0, 0, []
    it = iter(loader)
    while True:
        t0 = time.monotonic()
        try:
            n = next(it)
        except StopIteration:
            break
        w = time.monotonic() - t0
        waits.append(round(w * 1000, 2))
        if batches > 0:  # the first batch is start-up, not a stall
            waited += w
        batches += 1
        nbytes += int(n)
        time.sleep(compute)  # the GPU step
    wall = time.monotonic() - start
    print(json.dumps({"batches": batches, "bytes": nbytes, "wall": wall, "waited": waited, "waits_ms": waits,
                      "stall": waited / (compute * max(batches - 1, 1))}))


if __name__ == "__main__":
    main()
