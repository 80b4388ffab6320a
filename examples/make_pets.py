"""Writes the README's example data: an ImageFolder tree DIR/<class>/<n>.png
of 640 small PNG images in 4 imbalanced classes (cat 300, dog 200, bird
100, fish 40), each image one colour that encodes its class and number.

    /usr/bin/python3 examples/make_pets.py ./pets
"""
import os
import sys

from PIL import Image

COUNTS = {"bird": 100, "cat": 300, "dog": 200, "fish": 40}

if len(sys.argv) != 2:
    sys.exit("usage: make_pets.py DIR")
root = sys.argv[1]
for c, name in enumerate(sorted(COUNTS)):
    os.makedirs(os.path.join(root, name), exist_ok=True)
    for i in range(COUNTS[name]):
        colour = (i % 256, c * 60 % 256, i // 256 * 32 % 256)
        Image.new("RGB", (32, 24), colour).save(os.path.join(root, name, "%04d.png" % i))
print("wrote %d images in %d classes to %s: %s" % (sum(COUNTS.values()), len(COUNTS), root,
      " ".join("%s=%d" % (n, COUNTS[n]) for n in sorted(COUNTS))))
