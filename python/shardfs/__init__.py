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
sample's ``.cls`` member: the position of its label in ``classes()``, which
lists ``.shardfs/info.json``'s classes in order. The label is what the
model learns, not the stratum a batch balances: a dataset stratified by
label x month has as many classes as labels.

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

The state also records the order it belongs to (``Loader.order()``: the
dataset and its version, --seed, --alpha, the order version and the other
order flags). ``load_state_dict()`` refuses a state saved under another
order, naming what differs, since resuming there would repeat or skip
samples; and it refuses numbers state_dict() cannot have written.

Feedback. A mount with ``--feedback eg --run NAME`` weights each epoch's
strata from the trainer's report of the epoch before. ``strata_of(e)``
gives each sample's stratum, batch by batch; sum the loss per stratum and
call ``report(e, {stratum: mean_loss})`` on rank 0 when the epoch ends
(it runs ``shardfs report``, so that node needs the binary and write
credentials; the mounts read the report from the stores). The mount opens
epoch e+1 once the report is recorded.

DataLoader arguments other than the batching ones pass through
(``persistent_workers=True`` keeps the workers across epochs); the mount
batches and shuffles, so ``batch_size``, ``shuffle``, ``sampler``,
``batch_sampler`` and ``drop_last`` are refused.
"""
import csv
import io
import json
import math
import multiprocessing
import os
import subprocess
import tarfile

import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

__all__ = ["Loader", "BatchDataset", "decode_image", "decode_member", "info", "resume_at"]

# The order flags (info.json's "order") that fix which sample comes when;
# world_size, batch_size, ranks and resume_at are checked on their own.
ORDER_KEYS = ("version", "seed", "alpha", "alpha_schedule", "tail", "window", "affinity", "epoch_size",
              "recency_half_life", "time_window", "time_window_step", "as_of", "feedback", "run", "follow")

_ORDER_NAMES = {"version": "order version (--order-version)", "seed": "--seed", "alpha": "--alpha",
                "alpha_schedule": "--alpha-schedule", "tail": "--tail", "window": "--window", "affinity": "--affinity",
                "epoch_size": "--epoch-size", "recency_half_life": "--recency-half-life", "time_window": "--time-window",
                "time_window_step": "--time-window-step", "as_of": "--as-of", "dataset": "dataset",
                "dataset_version": "dataset version (--version)", "ingest_id": "ingest", "mix": "--mix",
                "feedback": "--feedback", "run": "--run", "follow": "--follow"}


def _norm(v):
    """JSON round trips turn tuples into lists: compare them alike."""
    if isinstance(v, (list, tuple)):
        return [_norm(x) for x in v]
    return v


def _check_state(state):
    """Refuses a state whose numbers cannot come from state_dict()."""
    for k in ("epoch", "batch", "world_size", "batch_size", "global_batches"):
        v = state.get(k)
        if not isinstance(v, int) or isinstance(v, bool) or v < 0 or (k in ("world_size", "batch_size") and v < 1):
            raise ValueError("state[%r] = %r: want a whole number%s, as state_dict() writes" % (k, v, " of at least 1" if k in ("world_size", "batch_size") else " of at least 0"))
    after = state.get("resumed_after", 0)
    if not isinstance(after, int) or after < 0 or state["global_batches"] != after + state["batch"] * state["world_size"]:
        raise ValueError("state: global_batches %r is not resumed_after %r + batch %r x world_size %r: the state was edited or mixed from two saves"
                         % (state["global_batches"], after, state["batch"], state["world_size"]))

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


def decode_member(body, name):
    """Records' default decoder, WebDataset's usual ones by the member
    name's last extension: an image becomes an RGB PIL image, .txt a str,
    .json the object it holds, .cls an int, .npy a numpy array; anything
    else stays bytes."""
    ext = os.path.splitext(name)[1].lower()
    if ext in IMAGE_EXTS:
        from PIL import Image

        return Image.open(io.BytesIO(body)).convert("RGB")
    if ext in (".txt", ".text"):
        return body.decode("utf-8")
    if ext == ".json":
        return json.loads(body)
    if ext in (".cls", ".cls2", ".index"):
        return int(body)
    if ext == ".npy":
        import numpy

        return numpy.load(io.BytesIO(body), allow_pickle=False)
    return body


def _split_member(name):
    """A member's key and its name after the key, cut at the first '.' of
    its base name, as WebDataset cuts it."""
    d, b = os.path.split(name)
    i = b.index(".")
    return os.path.join(d, b[:i]) if d else b[:i], b[i + 1:]


class Key(str):
    """A sample's key as ingest stored it, with repeat: 0 for the first time
    the rank-epoch serves the sample, N for its N-th repeat. A mount names
    a repeat's members <key>~N (a key never holds '~' in a member name), and
    the loader hands back the plain key with its repeat count. A key of
    records is its members' stem byte for byte (ingest refuses one a
    member name cannot hold), so it is the key in index.csv and in the
    source; a plain sample's key, or a record's in a dataset ingested
    before that rule, may be mapped: any byte outside [A-Za-z0-9_/-]
    written as '_'. Repeats come
    from recycling: alpha < 1, stratum weights or an epoch longer than the
    data draw a small stratum's samples more than once an epoch; order
    version 4 puts no sample twice in one batch unless its stratum has
    fewer samples than the batch's quota of it."""

    def __new__(cls, stem):
        key, sep, n = stem.rpartition("~")
        if sep and n.isdigit():
            k = super().__new__(cls, key)
            k.repeat = int(n)
        else:
            k = super().__new__(cls, stem)
            k.repeat = 0
        return k


def _as_decoded(item):
    """A batch as the dataset made it (a module-level function, so that
    workers started by spawn can pickle it)."""
    return item


def _stack(values):
    if values and all(isinstance(v, torch.Tensor) and v.shape == values[0].shape for v in values):
        return torch.stack(values)
    if values and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return torch.tensor(values, dtype=torch.long)
    return values


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

    def __init__(self, mount, rank, decode=decode_image, transform=None, keys=False, records=False, to_tuple=None):
        self.mount, self.rank = mount, rank
        self.decode, self.transform, self.keys = decode, transform, keys
        self.records, self.to_tuple = records, to_tuple
        # epoch and start live in shared memory, so that persistent
        # DataLoader workers (forked once) see each epoch's values.
        self._where = multiprocessing.Array("q", [0, 0])

    @property
    def epoch(self):
        return self._where[0]

    @epoch.setter
    def epoch(self, e):
        self._where[0] = e

    @property
    def start(self):
        return self._where[1]

    @start.setter
    def start(self, b):
        self._where[1] = b

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

    def read_records(self, path):
        """A batch of records: a list of dicts of member name to decoded
        member (self.decode(body, name)), each with "__key__" (the plain
        key) and "__repeat__" (0, or N for the record's N-th repeat in this
        rank-epoch; see Key), in order; or
        with to_tuple, a tuple with one entry per name asked, each the
        batch's values (stacked into a tensor when they are tensors of one
        shape, or ints such as .cls)."""
        out, stems = [], []
        with tarfile.open(path) as tf:
            for m in tf.getmembers():
                stem, name = _split_member(m.name)
                if not stems or stems[-1] != stem:
                    key = Key(stem)
                    stems.append(stem)
                    out.append({"__key__": str(key), "__repeat__": key.repeat})
                out[-1][name] = self.decode(tf.extractfile(m).read(), m.name)
        if self.transform is not None:
            out = [self.transform(r) for r in out]
        if self.to_tuple is None:
            return out
        for r in out:
            missing = [n for n in self.to_tuple if n not in r]
            if missing:
                raise KeyError("%s: record %s has no member %s (it has %s)" % (path, r["__key__"], ", ".join(missing), ", ".join(sorted(k for k in r if not k.startswith("__")))))
        return tuple(_stack([r[n] for r in out]) for n in self.to_tuple)

    def read_batch(self, path):
        if self.records:
            return self.read_records(path)
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
                keys.append(Key(os.path.splitext(data.name)[0]))
        if samples and all(isinstance(s, torch.Tensor) and s.shape == samples[0].shape for s in samples):
            samples = torch.stack(samples)
        out = (samples, torch.tensor(classes, dtype=torch.long))
        return out + (keys,) if self.keys else out


class Loader:
    """A DataLoader over this rank's batches that counts what it handed out,
    for state_dict()/load_state_dict(). Iterate it once per epoch, after
    set_epoch(e)."""

    def __init__(self, mount, rank=None, world_size=None, num_workers=2, decode=None,
                 transform=None, keys=False, to_tuple=None, **dataloader_kwargs):
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
        clash = sorted(k for k in dataloader_kwargs if k in ("batch_size", "shuffle", "sampler", "batch_sampler", "drop_last"))
        if clash:
            raise ValueError(
                "Loader(%s=...): the mount already batches and shuffles (its --batch-size is %d, its order is the stratified "
                "shuffle): leave %s out, and mount with --batch-size N to change the batch size"
                % (clash[0], self.batch_size, ", ".join(clash)))
        # A dataset of records yields records (dicts of decoded members, or
        # to_tuple's selection); one of a file per sample, (samples, classes).
        # A mix's parts are all records or all not (the mount refuses others).
        parts = [self.info.get("dataset") or {}] + ((self.info.get("mix") or {}).get("parts") or [])
        records = any(p.get("members") for p in parts)
        if to_tuple is not None and not records:
            raise ValueError("Loader(to_tuple=...): %s holds one file per sample, not records: iterate (samples, classes)" % mount)
        if decode is None:
            decode = decode_member if records else decode_image
        self.dataset = BatchDataset(mount, self.rank, decode=decode, transform=transform, keys=keys,
                                    records=records, to_tuple=tuple(to_tuple) if to_tuple is not None else None)
        self.num_workers = num_workers
        self.dataloader_kwargs = dataloader_kwargs
        self._dl = None
        self.epoch, self.batch = 0, 0

    def classes(self):
        """Class names by class index: the labels' values (with --mix,
        "<dataset>/<class>"), never the strata."""
        if "classes" in self.info:
            return list(self.info["classes"])
        # A mount from before classes were told apart from strata.
        ds = self.info.get("dataset") or {}
        return [s["name"] for s in ds.get("strata", [])]

    def strata(self):
        """Stratum names, as a report names them: what each batch balances
        (the labels, and any time or value bins), which may be more than
        the classes."""
        ds = self.info.get("dataset") or {}
        return [s["name"] for s in ds.get("strata", [])]

    def strata_of(self, epoch=None):
        """The stratum of each sample this rank reads in epoch (default: the
        current one), batch by batch: strata_of()[b][i] is the stratum name
        of the i-th sample of the rank's batch b, in the order the loader
        yields them (from the rank's index.csv). With it a trainer sums its
        loss per stratum for report()."""
        e = self.epoch if epoch is None else epoch
        path = os.path.join(self.mount, "epochs", "%04d" % e, "rank-%03d" % self.rank, "index.csv")
        out = []
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                b = int(row["batch"])
                while len(out) <= b:
                    out.append([])
                out[b].append(row["stratum"])
        return out

    def report(self, epoch, values, shardfs="shardfs"):
        """Record what the trainer measured in epoch (a number per stratum
        name, higher meaning "needs more", e.g. the mean loss), so that
        mounts with --feedback weight epoch+1 from it. Call it on rank 0
        when the epoch ends, after summing over the ranks if every rank's
        samples should count; the first report of an epoch stands (a
        resumed job that reports again with other numbers is told so, and
        gets the weights it had). It runs `shardfs report`, which writes to
        the stores: this node needs the shardfs binary and write
        credentials (SHARDFS_STORES and the stores' keys in the
        environment, or the config file). Raises RuntimeError with
        shardfs's message when the report is refused."""
        order = self.info["order"]
        run = order.get("run")
        if not order.get("feedback") or not run:
            raise ValueError("the mount at %s has no --feedback and --run: nothing reads a report; mount with --feedback eg --run NAME" % self.mount)
        clean = {}
        for k, v in dict(values).items():
            x = float(v)
            if not math.isfinite(x):
                raise ValueError("report(%d): stratum %r has %r, not a finite number" % (epoch, k, v))
            clean[str(k)] = x
        ds = self.info["dataset"]
        cmd = [shardfs, "report", "--run", run, "--epoch", str(epoch), "--version", str(ds["version"]), ds["name"], "-"]
        p = subprocess.run(cmd, input=json.dumps(clean).encode(), capture_output=True)
        if p.returncode != 0:
            raise RuntimeError("shardfs report (run %s, epoch %d): %s" % (run, epoch, p.stderr.decode(errors="replace").strip()))
        return p.stdout.decode()

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
        """Batches of this rank still to come in the current epoch: all of
        them, or those after where load_state_dict resumed."""
        self.dataset.epoch = self.epoch
        return max(0, len(self.dataset.batches()) - self.batch)

    def __iter__(self):
        self.dataset.epoch, self.dataset.start = self.epoch, self.batch
        if self._dl is None:
            # One DataLoader for the run: with persistent_workers=True its
            # workers stay up across epochs, and read epoch and start from
            # the dataset's shared memory.
            # collate_fn: with batch_size=None a DataLoader converts each
            # item with default_convert, which turns numpy arrays into
            # tensors; a batch is handed out as decode made it (a .npy
            # member a numpy array, as documented), unless the caller
            # passes a collate_fn of their own.
            kwargs = dict(self.dataloader_kwargs)
            kwargs.setdefault("collate_fn", _as_decoded)
            self._dl = DataLoader(self.dataset, batch_size=None, num_workers=self.num_workers, **kwargs)
        for item in self._dl:
            self.batch += 1
            yield item

    def order(self):
        """What fixes the order of the mount's batches, besides the world
        size (which a resume may change: see resume_at): a state saved under
        one order does not resume under another."""
        o = self.info["order"]
        out = {k: o.get(k) for k in ORDER_KEYS}
        ds = self.info.get("dataset")
        if ds is not None:
            out["dataset"] = ds.get("name")
            out["dataset_version"] = ds.get("version")
            out["ingest_id"] = ds.get("ingest_id")
        mix = self.info.get("mix")
        if mix is not None:
            out["mix"] = [(p.get("name"), p.get("version"), p.get("ingest_id"), p.get("weight")) for p in mix.get("parts", [])]
        return out

    def state_dict(self):
        return {
            "epoch": self.epoch,
            "batch": self.batch,
            "world_size": self.world_size,
            "batch_size": self.batch_size,
            "resumed_after": self.resumed_after(self.epoch),
            "global_batches": self.resumed_after(self.epoch) + self.batch * self.world_size,
            "order": self.order(),
        }

    def load_state_dict(self, state):
        _check_state(state)
        if state["batch_size"] != self.batch_size:
            raise ValueError("the state was saved with batches of %d, the mount serves %d: mount with --batch-size %d"
                             % (state["batch_size"], self.batch_size, state["batch_size"]))
        saved = state.get("order")
        if saved is not None:
            now = self.order()
            diff = ["%s %r (this mount: %r)" % (_ORDER_NAMES.get(k, k), saved.get(k), now.get(k))
                    for k in sorted(set(saved) | set(now)) if _norm(saved.get(k)) != _norm(now.get(k))]
            if diff:
                raise ValueError(
                    "the state was saved under another order, so resuming here would repeat or skip samples: it had %s. "
                    "Mount as the saved run did (the same dataset version, --seed, --alpha and order flags), or start the run afresh"
                    % "; ".join(diff))
        e, n = state["epoch"], state["global_batches"]
        base = self.resumed_after(e)
        if base == n:
            self.epoch, self.batch = e, 0  # the mount resumed exactly here
        elif base == state.get("resumed_after", 0) and state["world_size"] == self.world_size:
            self.epoch, self.batch = e, state["batch"]  # the same order: go on where it stopped
        else:
            raise ValueError("the state stopped after %d global batches of epoch %d; remount with %s (the mount says --resume-at %r)"
                             % (n, e, resume_at(state), self.info["order"].get("resume_at") or ""))
