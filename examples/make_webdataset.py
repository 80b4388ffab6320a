"""Writes a small WebDataset set to try shardfs's records with, following
the format's spec: RECORDS image-text pairs over SHARDS tar shards
(Python's tarfile), each record <key>.jpg (a real JPEG from PIL), <key>.txt
(a caption) and <key>.json (its fields: source, one of 5 with a skewed mix;
aesthetic, a score from 0 to 10; caption). Debian's python3-pil is all it
needs. docs/records.md and the integration tests use it.

usage: make_webdataset.py OUTDIR SHARDS RECORDS SEED"""
import io
import json
import os
import random
import sys
import tarfile

from PIL import Image

out, shards, records, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rng = random.Random(seed)
os.makedirs(out, exist_ok=True)
sources = ["web", "books", "news", "code", "forum"]
weights = [50, 25, 13, 8, 4]
per = (records + shards - 1) // shards


def add(tf, name, data):
    ti = tarfile.TarInfo(name)
    ti.size = len(data)
    ti.mtime = 1700000000
    tf.addfile(ti, io.BytesIO(data))


k = 0
for s in range(shards):
    with tarfile.open(os.path.join(out, "shard-%05d.tar" % s), "w", format=tarfile.USTAR_FORMAT) as tf:
        for _ in range(per):
            if k == records:
                break
            key = "%07d" % k
            img = Image.new("RGB", (8 + k % 9, 8 + k % 7), (k % 256, (k * 7) % 256, (k * 13) % 256))
            buf = io.BytesIO()
            img.save(buf, format="JPEG", quality=80)
            src = rng.choices(sources, weights)[0]
            fields = {"source": src, "aesthetic": round(rng.uniform(0, 10), 3), "caption": "a picture %d from %s" % (k, src)}
            add(tf, key + ".jpg", buf.getvalue())
            add(tf, key + ".txt", ("caption %d: %s" % (k, "x" * (k % 50))).encode())
            add(tf, key + ".json", json.dumps(fields).encode())
            k += 1
