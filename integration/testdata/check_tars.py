"""Reads every rank's batch tars, epoch.tar and index.csv of a shardfs mount
with Python's tarfile and csv modules and prints one JSON report. Bytes are
compared against the source tree; the caller asserts on the counts."""
import csv, hashlib, json, os, sys, tarfile

mnt, src, epoch = sys.argv[1], sys.argv[2], sys.argv[3]
strata = sorted(os.listdir(src))
report = {"ranks": {}, "mismatch": [], "cls_wrong": [], "epoch_tar_mismatch": [], "index_mismatch": []}
edir = os.path.join(mnt, "epochs", epoch)
for rank in sorted(os.listdir(edir)):
    rdir = os.path.join(edir, rank)
    rows = list(csv.DictReader(open(os.path.join(rdir, "index.csv"), newline="")))
    batches = sorted(f for f in os.listdir(rdir) if f.startswith("batch-"))
    members, keys = [], []
    pos = 0
    for b in batches:
        with tarfile.open(os.path.join(rdir, b)) as tf:
            items = tf.getmembers()
            for i in range(0, len(items), 2):
                data, cls = items[i], items[i + 1]
                row = rows[pos]
                pos += 1
                body = tf.extractfile(data).read()
                want = open(os.path.join(src, row["key"]), "rb").read()
                if body != want:
                    report["mismatch"].append(row["key"])
                label = tf.extractfile(cls).read().decode()
                if strata[int(label)] != row["key"].split("/")[0] or row["stratum"] != strata[int(label)]:
                    report["cls_wrong"].append(row["key"])
                if data.name.split(".")[0] != cls.name.split(".")[0] or int(row["batch"]) != int(b[6:12]) or int(row["size"]) != len(body):
                    report["index_mismatch"].append(row["key"])
                members += [data.name, cls.name]
                keys.append(row["key"])
    if pos != len(rows):
        report["index_mismatch"].append("row count %d vs %d members" % (len(rows), pos))
    with tarfile.open(os.path.join(rdir, "epoch.tar")) as tf:
        names = tf.getnames()
    if names != members:
        report["epoch_tar_mismatch"].append(rank)
    report["ranks"][rank] = {"batches": len(batches), "keys": keys}
print(json.dumps(report))
