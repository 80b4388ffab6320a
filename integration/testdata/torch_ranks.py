"""A PyTorch DataLoader with 4 workers reading the batch tars of several
ranks of one shardfs mount at once (one mount serving a node's GPUs).
Prints "<rank dir>/<member name> <sha256> <cls>" per sample as delivered."""
import hashlib, os, sys, tarfile

import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info


class RankBatches(IterableDataset):
    def __init__(self, rank_dirs):
        per_rank = [sorted(os.path.join(d, f) for f in os.listdir(d) if f.startswith("batch-")) for d in rank_dirs]
        # Interleave the ranks' files, so every worker reads from both ranks.
        self.files = [f for step in zip(*per_rank) for f in step]

    def __iter__(self):
        info = get_worker_info()
        files = self.files if info is None else self.files[info.id :: info.num_workers]
        for path in files:
            rank = os.path.basename(os.path.dirname(path))
            with tarfile.open(path) as tf:
                items = tf.getmembers()
                for i in range(0, len(items), 2):
                    body = tf.extractfile(items[i]).read()
                    cls = int(tf.extractfile(items[i + 1]).read())
                    yield rank + "/" + items[i].name, torch.frombuffer(bytearray(body), dtype=torch.uint8), cls


loader = DataLoader(RankBatches(sys.argv[1:]), batch_size=None, num_workers=4)
n = 0
for name, tensor, cls in loader:
    print(name, hashlib.sha256(tensor.numpy().tobytes()).hexdigest(), cls)
    n += 1
print("TOTAL", n, file=sys.stderr)
