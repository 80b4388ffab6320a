"""Drives shardfs.Loader's resume checks for TestLoaderResumeGuards.

    resume_guard.py save MOUNT STATE      read 3 batches of epoch 0, save the state, print the keys of the 4th
    resume_guard.py resume MOUNT STATE [WORLD]  load the state, print the first batch's keys, or the error
    resume_guard.py misuse MOUNT STATE    the bad states and arguments; one line each
    resume_guard.py workers MOUNT         two epochs with persistent workers: the worker pids of each
"""
import json
import os
import sys

import shardfs


def pid_decode(body, name):
    return os.getpid()


def main():
    mode, mount = sys.argv[1], sys.argv[2]
    if mode == "save":
        loader = shardfs.Loader(mount, rank=0, world_size=1, num_workers=2, keys=True)
        loader.set_epoch(0)
        it = iter(loader)
        for _ in range(3):
            next(it)
        state = loader.state_dict()
        _, _, keys = next(it)
        with open(sys.argv[3], "w") as f:
            json.dump(state, f)
        print(json.dumps({"next": keys}))
    elif mode == "resume":
        world = int(sys.argv[4]) if len(sys.argv) > 4 else 1
        loader = shardfs.Loader(mount, rank=0, world_size=world, num_workers=2, keys=True)
        with open(sys.argv[3]) as f:
            state = json.load(f)
        try:
            loader.load_state_dict(state)
        except ValueError as e:
            print(json.dumps({"error": str(e)}))
            return
        loader.set_epoch(state["epoch"])
        n = len(loader)
        _, _, keys = next(iter(loader))
        print(json.dumps({"next": keys, "len": n, "batch": loader.batch}))
    elif mode == "misuse":
        with open(sys.argv[3]) as f:
            good = json.load(f)
        out = {}
        for name, change in [("negative batch", {"batch": -3}),
                             ("batch without global batches", {"batch": 5, "global_batches": 0}),
                             ("not a number", {"epoch": "1"})]:
            state = dict(good, **change)
            try:
                shardfs.Loader(mount, rank=0, world_size=1, num_workers=0).load_state_dict(state)
                out[name] = "accepted"
            except ValueError as e:
                out[name] = str(e)
        try:
            shardfs.Loader(mount, rank=0, world_size=1, batch_size=4)
            out["batch_size"] = "accepted"
        except ValueError as e:
            out["batch_size"] = str(e)
        print(json.dumps(out))
    elif mode == "workers":
        loader = shardfs.Loader(mount, rank=0, world_size=1, num_workers=2, decode=pid_decode, persistent_workers=True)
        pids = []
        for epoch in range(2):
            loader.set_epoch(epoch)
            seen = set()
            for samples, _ in loader:
                seen.update(int(p) for p in samples)
            pids.append(sorted(seen))
        print(json.dumps({"pids": pids}))


main()
