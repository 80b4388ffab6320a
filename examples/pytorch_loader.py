"""Read one rank's batches from a shardfs mount with a PyTorch DataLoader.

    python3 examples/pytorch_loader.py /mnt/train/epochs/0000/rank-000

Each batch-*.tar is a WebDataset-style tar: <key>.<ext> then <key>.cls. The
files are already in stratified, shuffled order, so the loader reads them in
sequence (one file per worker at a time) and needs no sampler.
"""
import os
import sys
import tarfile
import time

import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info


class ShardfsBatches(IterableDataset):
    def __init__(self, rank_dir):
        self.files = sorted(os.path.join(rank_dir, f) for f in os.listdir(rank_dir) if f.startswith("batch-"))

    def __iter__(self):
        info = get_worker_info()
        files = self.files if info is None else self.files[info.id :: info.num_workers]
        for path in files:
            with tarfile.open(path) as tf:
                members = tf.getmembers()
                labels, sizes = [], []
                for data, cls in zip(members[0::2], members[1::2]):
                    body = tf.extractfile(data).read()
                    # Decode here, in the worker (e.g. PIL.Image.open(io.BytesIO(body))),
                    # and yield model-ready tensors; this example keeps sizes only.
                    sizes.append(len(body))
                    labels.append(int(tf.extractfile(cls).read()))
                yield torch.tensor(labels), torch.tensor(sizes)  # one batch per file


if __name__ == "__main__":
    loader = DataLoader(ShardfsBatches(sys.argv[1]), batch_size=None, num_workers=int(os.environ.get("WORKERS", "2")))
    start, n, nbytes = time.time(), 0, 0
    counts = {}
    for labels, sizes in loader:
        n += len(labels)
        nbytes += int(sizes.sum())
        for label in labels.tolist():
            counts[label] = counts.get(label, 0) + 1
    dt = time.time() - start
    print(f"{n} samples, {nbytes / 1e6:.1f} MB in {dt:.2f}s: {n / dt:.0f} samples/s")
    print("samples per class:", dict(sorted(counts.items())))
