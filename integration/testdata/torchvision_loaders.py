"""Reads a shardfs mount with real image loaders and prints what they saw.

imagefolder MOUNT: torchvision.datasets.ImageFolder over MOUNT/samples, every
  image decoded and resized through a DataLoader with 2 workers; prints
  "<path relative to samples> <label> <width>x<height>" per image.
webdataset RANKDIR: the rank's batch tars read WebDataset-style (tarfile,
  grouped by key, PIL decode, torchvision transforms) through a DataLoader
  with 2 workers; prints "<key> <cls> <width>x<height>" per sample.
"""
import io, os, sys, tarfile

import torch
from PIL import Image
from torch.utils.data import DataLoader, IterableDataset, get_worker_info
from torchvision import datasets, transforms

to_tensor = transforms.Compose([transforms.Resize((32, 32)), transforms.ToTensor()])


def imagefolder(mount):
    root = os.path.join(mount, "samples")
    ds = datasets.ImageFolder(root, transform=to_tensor)
    loader = DataLoader(ds, batch_size=16, num_workers=2)
    n = 0
    for x, y in loader:
        assert x.shape[1:] == (3, 32, 32)
        n += len(y)
    # The sizes, decoded once more here: the workers' decodes stay in the workers.
    for path, label in ds.samples:
        w, h = Image.open(path).size
        print(os.path.relpath(path, root), ds.classes[label], f"{w}x{h}")
    print("DECODED", n, file=sys.stderr)


class TarSamples(IterableDataset):
    def __init__(self, rank_dir):
        self.files = sorted(os.path.join(rank_dir, f) for f in os.listdir(rank_dir) if f.startswith("batch-"))

    def __iter__(self):
        info = get_worker_info()
        files = self.files if info is None else self.files[info.id :: info.num_workers]
        for path in files:
            groups = {}
            with tarfile.open(path) as tf:
                for m in tf.getmembers():
                    key, ext = m.name.split(".", 1) if "." in os.path.basename(m.name) else (m.name, "")
                    groups.setdefault(key, {})[ext] = tf.extractfile(m).read()
            for key, parts in groups.items():
                img = Image.open(io.BytesIO(parts["jpg"])).convert("RGB")
                yield key, int(parts["cls"]), f"{img.size[0]}x{img.size[1]}", to_tensor(img)


def webdataset(rank_dir):
    loader = DataLoader(TarSamples(rank_dir), batch_size=None, num_workers=2)
    for key, cls, size, x in loader:
        assert x.shape == (3, 32, 32)
        print(key, cls, size)


if __name__ == "__main__":
    {"imagefolder": imagefolder, "webdataset": webdataset}[sys.argv[1]](sys.argv[2])
