"""A PyTorch DataLoader with 4 workers over an IterableDataset that reads one
rank's batch tars from a shardfs mount. Prints "<member name> <sha256> <cls>"
per sample, as the loader delivered it."""
import hashlib, os, sys, tarfile

import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info


class BatchTars(IterableDataset):
    def __init__(self, rank_dir):
        self.files = sorted(os.path.join(rank_dir, f) for f in os.listdir(rank_dir) if f.startswith("batch-"))

    def __iter__(self):
        info = get_worker_info()
        files = self.files if info is None else self.files[info.id :: info.num_workers]
        for path in files:
            with tarfile.open(path) as tf:
                items = tf.getmembers()
                for i in range(0, len(items), 2):
                    body = tf.extractfile(items[i]).read()
                    cls = int(tf.extractfile(items[i + 1]).read())
                    yield items[i].name, torch.frombuffer(bytearray(body), dtype=torch.uint8) if body else torch.zeros(0, dtype=torch.uint8), cls


loader = DataLoader(BatchTars(sys.argv[1]), batch_size=None, num_workers=4)
n = 0
for name, tensor, cls in loader:
    print(name, hashlib.sha256(tensor.numpy().tobytes()).hexdigest(), cls)
    n += 1
print("TOTAL", n, file=sys.stderr)
