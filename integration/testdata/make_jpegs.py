"""Writes a small ImageFolder tree of real JPEGs with PIL: DIR/<class>/<n>.jpg,
several sizes, imbalanced classes. Prints "<key> <class index>" per image."""
import os, random, sys

from PIL import Image

root, per_class = sys.argv[1], [int(x) for x in sys.argv[2].split(",")]
rng = random.Random(5)
classes = [f"class{i:02d}" for i in range(len(per_class))]
for ci, (name, n) in enumerate(zip(classes, per_class)):
    os.makedirs(os.path.join(root, name), exist_ok=True)
    for j in range(n):
        w, h = rng.choice([(32, 24), (64, 48), (96, 128), (160, 120)])
        img = Image.new("RGB", (w, h), (rng.randrange(256), rng.randrange(256), rng.randrange(256)))
        for _ in range(20):
            x, y = rng.randrange(w), rng.randrange(h)
            img.putpixel((x, y), (rng.randrange(256), rng.randrange(256), rng.randrange(256)))
        key = f"{name}/{j:04d}.jpg"
        img.save(os.path.join(root, key), quality=rng.choice([60, 85, 95]))
        print(key, ci)
