#!/usr/bin/env bash
# Runs the same shardfs commands with the binary of REV and with the working
# tree's, on fresh file:// stores, and diffs what they print (ingest ids,
# times, rates and pids normalised): 49 commands with --json where they
# have it, 3 mounts (info.json, index.csv and every batch file's hash) and
# 5 warm runs (the tier's files hashed). A refactor that changes no
# behaviour prints nothing but the last line. Needs FUSE (root).
#   scripts/behaviour-diff.sh REV
set -euo pipefail
cd "$(dirname "$0")/.."
rev=${1:?usage: scripts/behaviour-diff.sh REV}
tmp=$(mktemp -d /tmp/behaviour-diff.XXXX)
trap 'git worktree remove --force "$tmp/old" >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
git worktree add -q --detach "$tmp/old" "$rev"
(cd "$tmp/old" && go build -o "$tmp/shardfs-old" ./cmd/shardfs)
go build -o "$tmp/shardfs-new" ./cmd/shardfs

# outputs BIN OUT: runs the commands with BIN, keeping their outputs in OUT.
outputs() {
set +e
BIN=$1; OUT=$2
rm -rf "$OUT"; mkdir -p "$OUT"
W=$(mktemp -d /tmp/golden.XXXX)
python3 - "$W" <<'PY'
import os, sys, random, json
w = sys.argv[1]
r = random.Random(7)
for name, n0, classes in (("src", 0, 5), ("more", 1000, 5)):
    for c in range(classes):
        d = os.path.join(w, name, "class%d" % c); os.makedirs(d)
        for i in range(40 + 13 * c):
            open(os.path.join(d, "s%05d.bin" % (n0 + i)), "wb").write(r.randbytes(r.randint(100, 3000)))
os.makedirs(os.path.join(w, "t"))
with open(os.path.join(w, "t", "list.csv"), "w") as f:
    f.write("path,label,time,len\n")
    for i in range(300):
        p = "f%04d.bin" % i
        open(os.path.join(w, "t", p), "wb").write(r.randbytes(r.randint(50, 900)))
        f.write("%s,l%d,%d,%d\n" % (p, i % 3, 1700000000 + 86400 * (i % 90), r.randint(1, 1000)))
PY
S="file://$W/s0,file://$W/s1,file://$W/s2"
n=0
run() { # run NAME ARGS...: keeps stdout and stderr and the exit code
  n=$((n+1)); local f=$(printf "%s/%02d-%s" "$OUT" $n "$1"); shift
  "$BIN" "$@" > "$f.out" 2> "$f.err"; echo "rc=$?" >> "$f.out"
}
export SHARDFS_STORES=$S
run ingest ingest --data 2 --parity 1 --seed 3 --shard-size 64KiB "$W/src" ds
run list list --json
run versions versions ds --json
run plan plan ds --json --batch-size 16
run plan-window plan ds --json --batch-size 16 --window 2
run plan-world plan ds --json --batch-size 8 --world-size 2 --rank all
run plan-alpha plan ds --json --batch-size 16 --alpha 0 --epochs 2
run plan-affinity plan ds --json --batch-size 8 --world-size 2 --affinity
for v in 1 2 3 4; do run plan-v$v plan ds --json --batch-size 16 --order-version $v; done
run emit plan ds --batch-size 16 --emit index --epoch 1
run plan-text plan ds --batch-size 16 --epochs 2
run plan-affinity-text plan ds --batch-size 8 --world-size 2 --affinity
run plan-window-text plan ds --batch-size 8 --window 3 --compare-window 2
run append ingest --append "$W/more" ds
run versions2 versions ds --json
run plan-version1 plan ds --json --batch-size 16 --version 1
run plan-after-append plan ds --json --batch-size 16
run rollback rollback ds --to 1
run versions3 versions ds --json
run verify verify ds --json
rm -rf "$W/s1/ds/data"
run verify-lost verify ds --json
run repair repair ds
run verify-repaired verify ds --json
run gc gc ds --keep-last 1 --yes
run versions4 versions ds --json
run ingest-t ingest --data 2 --parity 1 --seed 5 --shard-size 32KiB --label-fields label --time-bucket time=30d --bins len=4 "$W/t/list.csv" dt
run plan-recency plan dt --json --batch-size 12 --recency-half-life 30d
run plan-timewindow plan dt --json --batch-size 12 --time-window 40d
run plan-minshare plan dt --json --batch-size 12 --min-share 0.01
echo '{"class0": 1, "class1": 2, "class2": 3}' > "$W/rep.json"
run report report ds --run r1 --epoch 0 "$W/rep.json"
run plan-feedback plan ds --json --batch-size 12 --feedback eg --run r1 --epochs 2
mount_look() { # mount_look NAME ARGS...: info.json, index.csv and the batch bytes of a mount
  local tag=$1; shift; mkdir -p "$W/mnt"
  "$BIN" mount "$@" --daemon "$W/mnt" > "$OUT/mount-$tag.log" 2>&1
  for i in $(seq 50); do [ -e "$W/mnt/.shardfs/info.json" ] && break; sleep 0.1; done
  cp "$W/mnt/.shardfs/info.json" "$OUT/mount-$tag-info.json" 2>/dev/null
  (cd "$W/mnt" && find . -type f -not -path './.shardfs/stats*' -not -name info.json | sort | xargs sha256sum) > "$OUT/mount-$tag-files" 2>&1
  umount "$W/mnt"; for i in $(seq 50); do grep -q " $W/mnt " /proc/mounts || break; sleep 0.1; done
}
mount_look ds ds --batch-size 16 --epochs 2
mount_look window ds --batch-size 16 --window 2 --world-size 2 --rank 1
mount_look dt dt --batch-size 12 --recency-half-life 30d
run plan-synthetic plan --synthetic 200000 --json --batch-size 64
run plan-synthetic-tb plan --synthetic 50000 --synthetic-time-buckets 4 --json
run list2 list --json
run warm warm ds --cache-dir "$W/cd" --world-size 2 --batch-size 8 --seed 4
run warm-again warm ds --cache-dir "$W/cd" --world-size 2 --batch-size 8 --seed 4
run warm-part warm ds --cache-dir "$W/cd2" --rank 1 --world-size 2 --batch-size 8 --epoch 1 --batches 2 --alpha 0
run warm-window warm ds --cache-dir "$W/cd3" --window 2 --batch-size 8
run warm-nodir warm ds --batch-size 8
(cd "$W" && find cd cd2 cd3 -type f | sort | xargs sha256sum) > "$OUT/zz-warmed" 2>&1
run ingest-again ingest --data 2 --parity 1 --seed 3 "$W/src" ds
run ingest-force ingest --data 2 --parity 1 --seed 3 --force "$W/src" ds
run versions5 versions ds --json
run delete-refused delete ds
run delete delete ds --yes
run list3 list --json
run bad-name ingest --data 2 --parity 1 "$W/src" "bad name"
run bad-stores plan ds --stores "file://$W/s0"
(cd "$W" && find s0 s1 s2 -type f | sort) > "$OUT/zz-objects"
for f in "$OUT"/*; do
  sed -E -i 's/[0-9]{8}T[0-9]{6}Z-[0-9a-f]{8}/INGEST/g; s/[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z/TIME/g; s/[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9:]+( UTC)?/TIME/g; s/"(created_unix|elapsed[a-z_]*|seconds|wall_s|time_unix|duration_s)": ?[0-9.e+-]+/"\1": N/g; s/in [0-9.]+(ms|s|µs)/in D/g; s/[0-9.]+(ms|µs|s) elapsed/D elapsed/g; s#'"$W"'#W#g; s/time=[^ ]+ //g; s/pid [0-9]+/pid P/g; s/mount-mnt-[0-9TZ-]+.log/LOG/g; s/[0-9.]+ MB\/s, [0-9.]+(ms|s)/R/g' "$f"
done
rm -rf "$W"
}

outputs "$tmp/shardfs-old" "$tmp/old-out"
outputs "$tmp/shardfs-new" "$tmp/new-out"
n=$(ls "$tmp/new-out" | wc -l)
if diff -r "$tmp/old-out" "$tmp/new-out"; then
  echo "behaviour-diff: $n outputs identical at $rev and in the working tree"
else
  echo "behaviour-diff: the outputs above differ between $rev and the working tree" >&2
  exit 1
fi
