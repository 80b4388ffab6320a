"""PyTorch loading from a shardfs mount, with exact and elastic resume.

A shardfs mount already holds every rank's batches in their final,
stratified, shuffled order: ``epochs/EEEE/rank-RRR/batch-BBBBBB.tar``, each
a WebDataset-style tar of ``<key>.<ext>`` + ``<key>.cls`` pairs, exactly one
batch of the mount's ``--batch-size``. This module reads them with the
standard library, torch and PIL only::

    import shardfs
    loader = shardfs.Loader("/mnt/data", num_workers=4, transform=my_transform)
    for epoch in range(start, epochs):
        loader.set_epoch(epoch)
        for samples, classes in loader:
            ...
            torch.save({"model": ..., "loader": loader.state_dict()}, path)

The rank comes from torchrun's environment (RANK, WORLD_SIZE), and must
match the mount's ``--world-size``. A class index is the number in the
sample's ``.cls`` member: the position of its stratum in ``classes()``,
which lists ``.shardfs/info.json``'s strata in order.

Resume. ``state_dict()`` records the epoch and the batches this rank has
consumed of it (every rank consumes one batch per step, so the job has
consumed ``batch * world_size`` global batches, plus any the mount resumed
after). ``load_state_dict()`` maps it onto the mount:

* the same world size and the same mount flags: the loader starts at batch
  ``batch`` of the epoch, exactly where it stopped;
* another world size: remount with ``--resume-at E:N`` where N is
  ``state["global_batches"]`` (``resume_at(state)`` gives the flag); the new
  mount deals the rest of epoch E to the new ranks, and the loader starts at
  their first batch. Anything else raises ValueError naming the flag to use.
"""
import io
import json
import os
import tarfile

import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

__all__ = ["Loader", "BatchDataset", "decode_image", "info", "resume_at"]

IMAGE_EXTS = {".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff"}


def info(mount):
    """The mount's .shardfs/info.json as a dict."""
    with open(os.path.join(mount, ".shardfs", "info.json")) as f:
        return json.load(f)


def decode_image(body, name):
    """Default decoder: an image file becomes an RGB PIL image; any other
    sample stays the bytes it is (a uint8 tensor)."""
    if os.path.splitext(name)[1].lower() in IMAGE_EXTS:
        from PIL import Image

        img = Image.open(io.BytesIO(body))
        return img.convert("RGB")
    return torch.frombuffer(bytearray(body), dtype=torch.uint8)


def resume_at(state):
    """The mount flag that resumes state with any world size: --resume-at E:N."""
    return "--resume-at %d:%d" % (state["epoch"], state["global_batches"])


def _env_int(name, default):
    v = os.environ.get(name)
    return default if v in (None, "") else int(v)


class BatchDataset(IterableDataset):
    """One rank's batches of one epoch, one batch tar per item: a list of
    decoded samples and a tensor of class indices (and, with keys=True, the
    sample keys). DataLoader workers take batches in turn (worker w reads
    batches w, w+n, ...), and a DataLoader with batch_size=None hands them
    out in order."""

    def __init__(self, mount, rank, decode=decode_image, transform=None, keys=False):
        self.mount, self.rank = mount, rank
        self.decode, self.transform, self.keys = decode, transform, keys
        self.epoch, self.start = 0, 0

    def rank_dir(self):
        return os.path.join(self.mount, "epochs", "%04d" % self.epoch, "rank-%03d" % self.rank)

    def batches(self):
        """The batch tars of this rank-epoch, in order."""
        d = self.rank_dir()
        if not os.path.isdir(d):
            raise FileNotFoundError(
                "%s: no such rank-epoch; the mount shows epochs 0..--epochs-1 and ranks from --rank "
                "(mount without --epochs for open-ended epochs)" % d)
        return sorted(os.path.join(d, f) for f in os.listdir(d) if f.startswith("batch-") and f.endswith(".tar"))

    def __iter__(self):
        files = self.batches()[self.start:]
        w = get_worker_info()
        if w is not None:
            files = files[w.id::w.num_workers]
        for path in files:
            yield self.read_batch(path)

    def read_batch(self, path):
        samples, classes, keys = [], [], []
        with tarfile.open(path) as tf:
            members = tf.getmembers()
            if len(members) % 2:
                raise ValueError("%s: %d members, want <key>.<ext> and <key>.cls pairs" % (path, len(members)))
            for data, cls in zip(members[0::2], members[1::2]):
                sample = self.decode(tf.extractfile(data).read(), data.name)
                if self.transform is not None:
                    sample = self.transform(sample)
                samples.append(sample)
                classes.append(int(tf.extractfile(cls).read()))
                keys.append(os.path.splitext(data.name)[0])
        if samples and all(isinstance(s, torch.Tensor) and s.shape == samples[0].shape for s in samples):
            samples = torch.stack(samples)
        out = (samples, torch.tensor(classes, dtype=torch.long))
        return out + (keys,) if self.keys else out


class Loader:
    """A DataLoader over this rank's batches that counts what it handed out,
    for state_dict()/load_state_dict(). Iterate it once per epoch, after
    set_epoch(e)."""

    def __init__(self, mount, rank=None, world_size=None, num_workers=2, decode=decode_image,
                 transform=None, keys=False, **dataloader_kwargs):
        self.mount = mount
        self.info = info(mount)
        order = self.info["order"]
        self.rank = _env_int("RANK", 0) if rank is None else rank
        self.world_size = _env_int("WORLD_SIZE", 1) if world_size is None else world_size
        if self.world_size != order["world_size"]:
            raise ValueError(
                "this job runs %d ranks but the mount at %s was made with --world-size %d: "
                "mount with --world-size %d (to resume with a new world size, add --resume-at; see shardfs.resume_at)"
                % (self.world_size, mount, order["world_size"], self.world_size))
        self.batch_size = order["batch_size"]
        self.dataset = BatchDataset(mount, self.rank, decode=decode, transform=transform, keys=keys)
        self.num_workers = num_workers
        self.dataloader_kwargs = dataloader_kwargs
        self.epoch, self.batch = 0, 0

    def classes(self):
        """Class names by class index."""
        ds = self.info.get("dataset") or {}
        return [s["name"] for s in ds.get("strata", [])]

    def resumed_after(self, epoch):
        """Global batches of epoch the mount resumed after (--resume-at), else 0."""
        r = self.info["order"].get("resume_at") or ""
        if r:
            e, n = r.split(":")
            if int(e) == epoch:
                return int(n)
        return 0

    def set_epoch(self, epoch):
        """Read epoch next, from its first batch (or where load_state_dict said)."""
        if epoch != self.epoch:
            self.epoch, self.batch = epoch, 0

    def __len__(self):
        """Batches of this rank in the current epoch, from its first."""
        self.dataset.epoch = self.epoch
        return len(self.dataset.batches())

    def __iter__(self):
        self.dataset.epoch, self.dataset.start = self.epoch, self.batch
        dl = DataLoader(self.dataset, batch_size=None, num_workers=self.num_workers, **self.dataloader_kwargs)
        for item in dl:
            self.batch += 1
            yield item

    def state_dict(self):
        return {
            "epoch": self.epoch,
            "batch": self.batch,
            "world_size": self.world_size,
            "batch_size": self.batch_size,
            "resumed_after": self.resumed_after(self.epoch),
            "global_batches": self.resumed_after(self.epoch) + self.batch * self.world_size,
        }

    def load_state_dict(self, state):
        if state["batch_size"] != self.batch_size:
            raise ValueError("the state was saved with batches of %d, the mount serves %d: mount with --batch-size %d"
                             % (state["batch_size"], self.batch_size, state["batch_size"]))
        e, n = state["epoch"], state["global_batches"]
        base = self.resumed_after(e)
        if base == n:
            self.epoch, self.batch = e, 0  # the mount resumed exactly here
        elif base == state.get("resumed_after", 0) and state["world_size"] == self.world_size:
            self.epoch, self.batch = e, state["batch"]  # the same order: go on where it stopped
        else:
            raise ValueError("the state stopped after %d global batches of epoch %d; remount with %s (the mount says --resume-at %r)"
                             % (n, e, resume_at(state), self.info["order"].get("resume_at") or ""))
