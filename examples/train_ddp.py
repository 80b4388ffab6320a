"""Train a tiny classifier on a shardfs mount with torchrun (CPU, gloo),
checkpointing every step, so a job killed at any moment resumes exactly.

    shardfs mount --daemon --world-size 2 --batch-size 8 --seed 11 pets /mnt/pets
    torchrun --nproc_per_node 2 examples/train_ddp.py --mount /mnt/pets --checkpoint /tmp/pets.ckpt

(Debian bookworm's torch 1.13 on Python 3.11 needs ``torchrun --redirects 1
--tee 1 ...``: its default of 0 for both fails to parse there.)

Run the same command again after a crash: it loads the checkpoint and goes
on with the batch after the last one it recorded. To go on with another
number of processes, remount with the --resume-at flag this script prints
(and writes to the progress file) and the new --world-size, then run
torchrun with the new --nproc_per_node.

Every step, rank 0 records which samples each rank trained on, with their
class index and the first pixel of the decoded image, in the checkpoint;
--record writes that record as JSON at the end, for tests.
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torchvision import transforms

# Use the repository's python/ when the package is not installed.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import shardfs  # noqa: E402


def save(path, obj):
    tmp = path + ".tmp"
    torch.save(obj, tmp)
    os.replace(tmp, path)  # a kill never leaves half a checkpoint


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mount", required=True)
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--step-delay", type=float, default=0, help="seconds of extra 'compute' per step")
    p.add_argument("--progress", help="JSON file rank 0 rewrites after every checkpoint")
    p.add_argument("--record", help="JSON file of every step's samples, written at the end")
    args = p.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    to_tensor = transforms.Compose([transforms.Resize((16, 16)), transforms.ToTensor()])
    loader = shardfs.Loader(args.mount, num_workers=args.workers, transform=to_tensor, keys=True)
    classes = loader.classes()
    model = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Flatten(), nn.Linear(3 * 16 * 16, len(classes))))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    steps = []
    if os.path.exists(args.checkpoint):
        ck = torch.load(args.checkpoint, weights_only=False)
        model.module.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        try:
            loader.load_state_dict(ck["loader"])
        except ValueError as e:
            if rank == 0:
                print("cannot resume:", e, file=sys.stderr)
            sys.exit(2)
        steps = ck["steps"]
        if rank == 0:
            print("resumed: epoch %d, batch %d of this rank, %d global batches"
                  % (loader.epoch, loader.batch, ck["loader"]["global_batches"]), flush=True)

    loss = None
    for epoch in range(loader.epoch, args.epochs):
        loader.set_epoch(epoch)
        first = loader.batch
        for images, labels, keys in loader:
            loss = nn.functional.cross_entropy(model(images), labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
            mine = [{"key": k, "class": int(c), "pixel": [round(float(v) * 255) for v in img[:, 0, 0]]}
                    for k, c, img in zip(keys, labels, images)]
            every = [None] * world
            dist.all_gather_object(every, mine)
            if rank == 0:
                steps.append({"epoch": epoch, "ranks": every})
                state = loader.state_dict()
                save(args.checkpoint, {"model": model.module.state_dict(), "opt": opt.state_dict(),
                                       "loader": state, "steps": steps})
                if args.progress:
                    with open(args.progress + ".tmp", "w") as f:
                        json.dump({"steps": len(steps), "loader": state, "resume": shardfs.resume_at(state)}, f)
                    os.replace(args.progress + ".tmp", args.progress)
            dist.barrier()
            if args.step_delay:
                time.sleep(args.step_delay)
        if rank == 0 and loss is not None:
            print("epoch %d done: batches %d-%d of %d samples on each of %d ranks, loss %.3f"
                  % (epoch, first, loader.batch - 1, loader.batch_size, world, loss.item()), flush=True)
    if rank == 0 and args.record:
        with open(args.record, "w") as f:
            json.dump({"classes": classes, "steps": steps}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
