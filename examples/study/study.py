"""What stratified and re-weighted batches do to training, measured.

Long-tailed digits (scikit-learn's bundled 8x8 digits, the training split
thinned so class k keeps 126 * 20^(-k/9) samples: 126 down to 6) are
ingested into three file:// stores and read through real mounts and the
Python loader, one mount per arm and seed. A small MLP trains on each arm's
batches; every arm gets the same number of steps and the same test set.

Arms:
  shuffle      a plain shuffle (torch DataLoader, shuffle=True): no shardfs
  alpha=1      stratified batches, the natural mix
  alpha=0.5    temperature 0.5: the small classes drawn more often
  alpha=0      balanced classes
  decoupled    --preset decoupled:E: alpha 1, then alpha 0 for the last 20%
  min-share    --min-share 0.06: every class at least 6% of each epoch
  feedback     --feedback eg:step=1,floor=0.02: after each epoch the trainer
               reports its mean loss per stratum (loader.report), and the
               next epoch's share of a stratum ∝ its share now × exp(loss),
               each at least 2% (the exponentiated-gradient rule of DoReMi)

Arms of several fields (issue 60), on the same samples ingested a second
time from a listing whose strata are label x a synthetic source (5, mixed
50/25/13/8/4, independent of the digit) x 4 quantile bins of the mean pixel
value: about 120 strata for 427 samples, most under one sample a batch:
  fields:shuffle     a plain shuffle of them
  fields:joint       order version 4: the strata balanced, not each field
  fields:marginal    order version 5 (the default): each batch also within
                     one sample of its share of each label and each source
Besides the metrics below, they report each field's per-batch deviation,
|count - 32 x share|, mean and max over batches and values.

Metrics, each the mean and spread (standard deviation) over the seeds:
accuracy, balanced accuracy and worst-class recall on the test split after
the last step; the steps until balanced accuracy first reaches 80% (tested
every 5 steps); the variance of the step-to-step change of the batch loss
and of the gradient norm (how much one step differs from the next); and the
mean total variation between each batch's class mix and its epoch's target
mix (how faithfully batches follow the mix they are meant to have).

Usage (as root, FUSE available, the shardfs binary given or on PATH):
  /usr/bin/python3 examples/study/study.py [--quick] [--seeds N] [--epochs E]
      [--shardfs PATH] [--out DIR]
It writes DIR/results.md (the table), DIR/results.json (every number) and
DIR/results.png (balanced accuracy by step). --quick (2 seeds, 4 epochs) is
the plumbing test CI runs: it asserts nothing about accuracy.
"""
import argparse
import io
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch
from sklearn.datasets import load_digits

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import shardfs  # noqa: E402

BATCH = 32
ARMS = ["shuffle", "alpha=1", "alpha=0.5", "alpha=0", "decoupled", "min-share", "feedback"]
FIELD_ARMS = ["fields:shuffle", "fields:joint", "fields:marginal"]
FIELDS = ["label", "source", "value"]
SOURCES, SOURCE_MIX = ["web", "books", "news", "code", "forum"], [50, 25, 13, 8, 4]
FEEDBACK_STEP, FEEDBACK_FLOOR = 1.0, 0.02
TARGET = 0.8  # balanced accuracy for "steps to target"
EVAL_EVERY = 5


def long_tailed_digits():
    """The training split (long-tailed) and the test split (balanced), as
    float32 arrays in [0, 1]; the same on every run."""
    X, y = load_digits(return_X_y=True)
    X = (X / 16.0).astype(np.float32)
    rng = np.random.default_rng(0)
    train, test = [], []
    for c in range(10):
        idx = rng.permutation(np.flatnonzero(y == c))
        cut = int(round(0.3 * len(idx)))
        test.extend(idx[:cut])
        keep = int(round(126 * 20 ** (-c / 9)))
        train.extend(idx[cut:cut + keep])
    return X[train], y[train], X[test], y[test]


def write_tree(root, X, y):
    for i, (x, c) in enumerate(zip(X, y)):
        d = os.path.join(root, str(c))
        os.makedirs(d, exist_ok=True)
        buf = io.BytesIO()
        np.save(buf, x)
        with open(os.path.join(d, "%04d.npy" % i), "wb") as f:
            f.write(buf.getvalue())


def write_listing(root, X, y):
    """The same samples as a listing with fields: label, a synthetic
    source (seeded, independent of the digit) and the mean pixel value.
    Returns each sample's key (its path)."""
    rng = np.random.default_rng(60)
    p = np.array(SOURCE_MIX, dtype=float) / sum(SOURCE_MIX)
    keys = []
    with open(os.path.join(root, "list.jsonl"), "w") as f:
        for i, (x, c) in enumerate(zip(X, y)):
            key = "%d/%04d.npy" % (c, i)
            f.write(json.dumps({"path": key, "label": str(c), "source": SOURCES[rng.choice(5, p=p)], "value": round(float(x.mean()), 6)}) + "\n")
            keys.append(key)
    return keys


def decode_npy(body, name):
    return torch.from_numpy(np.load(io.BytesIO(body)))


def targets(counts, alpha, min_share=0.0, weights=None):
    """The class mix an epoch aims at: pi_c ∝ n_c^alpha (times weights_c),
    then at least min_share each (as shardfs's WithMinShare)."""
    w = np.array([n ** alpha for n in counts], dtype=float)
    if weights is not None:
        w = w * np.asarray(weights, dtype=float)
    pi = w / w.sum()
    if min_share > 0:
        order = np.argsort(pi, kind="stable")
        out, free, raised = np.zeros_like(pi), pi.sum(), 0
        for c in order:
            if pi[c] * (1 - min_share * raised) / free >= min_share:
                break
            out[c], free, raised = min_share, free - pi[c], raised + 1
        rest = 1 - min_share * raised
        for c in order[raised:]:
            out[c] = pi[c] * rest / free
        pi = out
    return pi


class Mount:
    """A shardfs mount of the digits for one arm and seed."""

    def __init__(self, shardfs_bin, stores, mnt, epochs, seed, flags, dataset="digits"):
        self.mnt = mnt
        env = dict(os.environ, SHARDFS_STORES=stores)
        subprocess.run([shardfs_bin, "mount", "--daemon", "--mkdir", "--batch-size", str(BATCH), "--epochs", str(epochs),
                        "--seed", str(seed)] + flags + [dataset, mnt], check=True, env=env, stdout=subprocess.DEVNULL)

    def batches(self, epoch):
        """(samples, digits, each sample's stratum name), batch by batch."""
        self.loader = shardfs.Loader(self.mnt, rank=0, world_size=1, num_workers=0, decode=decode_npy)
        # A class is the label's digit; a listing's class names join its
        # label fields with "+" (label+source): the digit comes first.
        classes = [int(c.split("+")[0]) for c in self.loader.classes()]
        self.loader.set_epoch(epoch)
        strata = self.loader.strata_of(epoch)
        for b, (samples, t) in enumerate(self.loader):
            yield samples, torch.tensor([classes[i] for i in t.tolist()]), strata[b]

    def report(self, epoch, values, shardfs_bin):
        self.loader.report(epoch, values, shardfs=shardfs_bin)

    def close(self):
        subprocess.run(["umount", self.mnt], check=True)


def shuffled_batches(X, y, seed, epoch, strata=None):
    g = torch.Generator().manual_seed(seed * 1000 + epoch)
    perm = torch.randperm(len(X), generator=g)
    for b in range(len(X) // BATCH):
        idx = perm[b * BATCH:(b + 1) * BATCH]
        yield torch.from_numpy(X)[idx], torch.from_numpy(y)[idx], None if strata is None else [strata[i] for i in idx.tolist()]


def field_deviations(batches, shares):
    """Per field, the mean and max over batches and values of |count -
    BATCH x share|; batches are lists of stratum names (label+source+bin)."""
    out = []
    for j, share in enumerate(shares):
        devs = []
        for names in batches:
            held = {}
            for n in names:
                v = n.split("+")[j]
                held[v] = held.get(v, 0) + 1
            devs.extend(abs(held.get(v, 0) - BATCH * p) for v, p in share.items())
        out.append((float(np.mean(devs)), float(np.max(devs))))
    return out


def evaluate(model, X, y):
    with torch.no_grad():
        pred = model(torch.from_numpy(X)).argmax(1).numpy()
    recalls = [float((pred[y == c] == c).mean()) for c in range(10)]
    return float((pred == y).mean()), float(np.mean(recalls)), float(min(recalls))


def run_arm(arm, seed, epochs, data, shardfs_bin, stores, work, fields=None):
    """fields, for the arms of several fields: each training sample's
    stratum name (label+source+bin), in the order of data's samples."""
    Xtr, ytr, Xte, yte = data
    counts = np.bincount(ytr, minlength=10)
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    flags = {"alpha=1": ["--alpha", "1"], "alpha=0.5": ["--alpha", "0.5"], "alpha=0": ["--alpha", "0"],
             "decoupled": ["--preset", "decoupled:%d" % epochs], "min-share": ["--min-share", "0.06"],
             "feedback": ["--feedback", "eg:step=%g,floor=%g" % (FEEDBACK_STEP, FEEDBACK_FLOOR), "--run", "study-%d" % seed],
             "fields:joint": ["--order-version", "4"], "fields:marginal": []}.get(arm)
    mount = None
    if flags is not None:
        mount = Mount(shardfs_bin, stores, os.path.join(work, "mnt-%s-%d" % (arm.replace(":", "-"), seed)), epochs, seed, flags,
                      "digits-fields" if arm.startswith("fields:") else "digits")
    served = []  # the arms of several fields: each batch's stratum names
    losses, norms, tvs, curve = [], [], [], []
    step, reached = 0, None
    mult = np.ones(10)  # the feedback arm's multipliers, as shardfs computes them
    try:
        for e in range(epochs):
            if arm == "decoupled":
                alpha = 0.0 if e >= epochs - max(1, round(0.2 * epochs)) else 1.0
            else:
                alpha = {"alpha=0.5": 0.5, "alpha=0": 0.0}.get(arm, 1.0)
            if arm == "feedback":
                pi = targets(counts, 1.0, FEEDBACK_FLOOR, mult)
            else:
                pi = targets(counts, alpha, 0.06 if arm == "min-share" else 0.0)
            loss_sum, loss_n = {}, {}
            batches = mount.batches(e) if mount else shuffled_batches(Xtr, ytr, seed, e, fields)
            for xb, yb, strata in batches:
                if fields is not None:
                    served.append(list(strata))
                mix = np.bincount(yb.numpy(), minlength=10) / len(yb)
                tvs.append(0.5 * float(np.abs(mix - pi).sum()))
                opt.zero_grad()
                per_sample = torch.nn.functional.cross_entropy(model(xb.float()), yb, reduction="none")
                if strata is not None and arm == "feedback":
                    for s, l in zip(strata, per_sample.detach().tolist()):
                        loss_sum[s], loss_n[s] = loss_sum.get(s, 0.0) + l, loss_n.get(s, 0) + 1
                loss = per_sample.mean()
                loss.backward()
                norms.append(float(torch.sqrt(sum((p.grad ** 2).sum() for p in model.parameters()))))
                losses.append(float(loss))
                opt.step()
                step += 1
                if step % EVAL_EVERY == 0:
                    bal = evaluate(model, Xte, yte)[1]
                    curve.append((step, bal))
                    if reached is None and bal >= TARGET:
                        reached = step
            if arm == "feedback" and e + 1 < epochs:
                # The trainer's report of the epoch: its mean loss per stratum.
                report = {s: loss_sum[s] / loss_n[s] for s in loss_sum}
                mount.report(e, report, shardfs_bin)
                r = np.array([report.get(str(c), np.nan) for c in range(10)])
                r = np.where(np.isnan(r), np.nanmean(r), r)
                logs = np.log(mult) + FEEDBACK_STEP * (r - r.mean())
                mult = np.maximum(1e-12, np.exp(logs - logs.max()))
    finally:
        if mount:
            mount.close()
    acc, bal, worst = evaluate(model, Xte, yte)
    out = {"arm": arm, "seed": seed, "steps": step, "accuracy": acc, "balanced_accuracy": bal, "worst_class_recall": worst,
           "steps_to_target": reached, "loss_change_variance": float(np.var(np.diff(losses))),
           "grad_norm_change_variance": float(np.var(np.diff(norms))), "batch_tv": float(np.mean(tvs)), "curve": curve}
    if fields is not None:
        shares = [{} for _ in FIELDS]
        for name in fields:
            for j, v in enumerate(name.split("+")):
                shares[j][v] = shares[j].get(v, 0) + 1 / len(fields)
        for f, (mean, worst_dev) in zip(FIELDS, field_deviations(served, shares)):
            out[f + "_deviation"], out[f + "_deviation_max"] = mean, worst_dev
    return out


METRICS = [("accuracy", "accuracy", 3), ("balanced_accuracy", "balanced accuracy", 3), ("worst_class_recall", "worst-class recall", 3),
           ("steps_to_target", "steps to 80% balanced", 0), ("loss_change_variance", "var. of loss change", 4),
           ("grad_norm_change_variance", "var. of grad-norm change", 3), ("batch_tv", "batch TV to target", 3)]


FIELD_METRICS = [(f + "_deviation", f + " deviation, mean", 2) for f in FIELDS] + [(f + "_deviation_max", f + " deviation, max", 2) for f in FIELDS] + METRICS[:4]


def table(results, seeds, arms=ARMS, metrics=METRICS):
    lines = ["| arm | " + " | ".join(m[1] for m in metrics) + " |", "|---" * (len(metrics) + 1) + "|"]
    for arm in arms:
        rs = [r for r in results if r["arm"] == arm]
        cells = []
        for key, _, digits in metrics:
            vals = [r[key] for r in rs if r[key] is not None]
            if not vals:
                cells.append("never")
                continue
            cell = "%.*f ± %.*f" % (digits, np.mean(vals), digits, np.std(vals))
            if len(vals) < len(rs):
                cell += " (%d of %d seeds)" % (len(vals), len(rs))
            cells.append(cell)
        lines.append("| %s | %s |" % (arm, " | ".join(cells)))
    return "\n".join(lines)


def plot(results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4))
    for arm in ARMS + FIELD_ARMS:
        curves = [r["curve"] for r in results if r["arm"] == arm]
        n = min(len(c) for c in curves)
        steps = [s for s, _ in curves[0][:n]]
        mean = np.mean([[b for _, b in c[:n]] for c in curves], axis=0)
        ax.plot(steps, mean, label=arm)
    ax.axhline(TARGET, color="grey", linewidth=0.5)
    ax.set_xlabel("step")
    ax.set_ylabel("balanced accuracy (test, mean over seeds)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="2 seeds, 4 epochs: the plumbing test")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--shardfs", default=shutil.which("shardfs") or "shardfs")
    ap.add_argument("--out", default=os.path.dirname(os.path.abspath(__file__)))
    a = ap.parse_args()
    if a.quick:
        a.seeds, a.epochs = 2, 4
    torch.set_num_threads(1)  # one thread: the same numbers on every run
    data = long_tailed_digits()
    work = tempfile.mkdtemp(prefix="shardfs-study-")
    try:
        tree = os.path.join(work, "train")
        write_tree(tree, data[0], data[1])
        stores = ",".join("file://%s/s%d" % (work, i) for i in range(3))
        os.environ["SHARDFS_STORES"] = stores  # the feedback arm's reports (shardfs report) go there
        subprocess.run([a.shardfs, "ingest", "--stores", stores, "--data", "2", "--parity", "1", tree, "digits"],
                       check=True, stdout=subprocess.DEVNULL)
        keys = write_listing(tree, data[0], data[1])
        subprocess.run([a.shardfs, "ingest", "--stores", stores, "--data", "2", "--parity", "1", "--label-fields", "label,source",
                        "--bins", "value=4", os.path.join(tree, "list.jsonl"), "digits-fields"], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        # Each sample's stratum, as shardfs named it: the order of W=1, B=1
        # lists every sample once.
        index = subprocess.run([a.shardfs, "plan", "--stores", stores, "--emit", "index", "--epoch", "0", "--rank", "0", "--world-size", "1",
                                "--batch-size", "1", "digits-fields"], check=True, capture_output=True, text=True).stdout.splitlines()
        head = index[0].split(",")
        stratum_of = {row[head.index("key")]: row[head.index("stratum")] for row in (l.split(",") for l in index[1:])}
        fields = [stratum_of[k] for k in keys]
        results = []
        for seed in range(a.seeds):
            for arm in ARMS + FIELD_ARMS:
                r = run_arm(arm, seed, a.epochs, data, a.shardfs, stores, work, fields if arm.startswith("fields:") else None)
                print("%-10s seed %d: balanced accuracy %.3f, worst-class recall %.3f" % (arm, seed, r["balanced_accuracy"], r["worst_class_recall"]), flush=True)
                results.append(r)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    counts = np.bincount(data[1], minlength=10).tolist()
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump({"train_counts": counts, "test_samples": len(data[3]), "epochs": a.epochs, "seeds": a.seeds, "batch": BATCH, "results": results}, f, indent=1)
    md = ("# Study: stratified and re-weighted batches on long-tailed digits\n\n"
          "Made by `/usr/bin/python3 examples/study/study.py%s` (see its docstring). Training classes %s (%d samples), "
          "a balanced test split of %d; an MLP 64-64-10, SGD lr 0.1 momentum 0.9, batches of %d, %d epochs of the training "
          "set's size, %d seeds; mean ± standard deviation over the seeds.\n\n%s\n\n"
          "## Several fields\n\nThe same samples, stratified by label x a synthetic source x 4 bins of the mean pixel value "
          "(%d strata); each field's per-batch deviation |count - %d x share|, mean and max over batches and values, and the "
          "training metrics above.\n\n%s\n"
          % (" --quick" if a.quick else "", counts, sum(counts), len(data[3]), BATCH, a.epochs, a.seeds, table(results, a.seeds),
             len(set(fields)), BATCH, table(results, a.seeds, FIELD_ARMS, FIELD_METRICS)))
    with open(os.path.join(a.out, "results.md"), "w") as f:
        f.write(md)
    plot(results, os.path.join(a.out, "results.png"))
    print(md)
    for r in results:
        for key, _, _ in METRICS:
            if r[key] is not None and not math.isfinite(r[key]):
                sys.exit("%s seed %d: %s is %r" % (r["arm"], r["seed"], key, r[key]))


if __name__ == "__main__":
    main()
