#!/bin/bash
# A CPU profile of the daemon on a GPU node, in global order and in --window 4 at 20 ms, with the daemon's and
# toxiproxy's CPU ticks and stats.json: the set-up of ../shared/gpu-check/run.sh (60,000 samples of 48 KiB,
# 6 MinIO behind toxiproxy, RS(4,2), ResNet-18, 12 DataLoader workers). The profile starts once the trainer has
# read 50 MB: torch's start and cudnn's warm-up take seconds, and a profile of them is empty.
# Use: ../shared/gpu-check/prepare.sh && cp scripts/gpu-profile.sh .gpu/, then on the node (the device tool's
# run, carry [".gpu"]): bash .gpu/gpu-profile.sh. Results in $OUT: global.pprof, stats-*.json, cpu.txt,
# train-*.json (about 90 s). Read the profile here with: go tool pprof -top global.pprof
set -u
G=$(cd "$(dirname "$0")" && pwd); OUT=${OUT:-/tmp/gpuout}; mkdir -p "$OUT"
exec > >(tee -a "$OUT/log.txt") 2>&1
T0=$(date +%s); el(){ echo "[+$(( $(date +%s) - T0 ))s] $*"; }
N=${N:-60000}
[ -e /dev/fuse ] || mknod /dev/fuse c 10 229
W=/tmp/w; mkdir -p $W/bin
python3 - "$G" $W/bin <<'PY'
import lzma, os, sys, shutil
for f in os.listdir(sys.argv[1]):
    if f.endswith(".xz"):
        d = os.path.join(sys.argv[2], f[:-3])
        with lzma.open(os.path.join(sys.argv[1], f)) as i, open(d, "wb") as o: shutil.copyfileobj(i, o)
        os.chmod(d, 0o755)
PY
S=$W/bin/shardfs
python3 $G/gen.py $W/src $N >/dev/null || exit 1
export MINIO_ROOT_USER=gpuadmin MINIO_ROOT_PASSWORD=gpusecret-91 AWS_ACCESS_KEY_ID=gpuadmin AWS_SECRET_ACCESS_KEY=gpusecret-91
for i in 0 1 2 3 4 5; do mkdir -p $W/m$i; $W/bin/minio server --quiet --address 127.0.0.1:$((9100+i)) --console-address 127.0.0.1:$((9200+i)) $W/m$i > $W/m$i.log 2>&1 & done
$W/bin/toxiproxy-server -host 127.0.0.1 -port 8474 > $W/toxi.log 2>&1 &
sleep 4
python3 - <<'PY'
import json, time, urllib.request
for i in range(6):
    for t in range(40):
        try: urllib.request.urlopen("http://127.0.0.1:%d/minio/health/live" % (9100+i)).read(); break
        except Exception: time.sleep(0.5)
    r = urllib.request.Request("http://127.0.0.1:8474/proxies", data=json.dumps({"name": "s%d" % i, "listen": "127.0.0.1:%d" % (9300+i), "upstream": "127.0.0.1:%d" % (9100+i)}).encode(), method="POST")
    urllib.request.urlopen(r).read()
    urllib.request.urlopen(urllib.request.Request("http://127.0.0.1:8474/proxies/s%d/toxics" % i, data=json.dumps({"name": "lat", "type": "latency", "stream": "downstream", "attributes": {"latency": 20, "jitter": 5}}).encode(), method="POST")).read()
PY
ST=$(for i in 0 1 2 3 4 5; do printf "http://127.0.0.1:%d/bkt%d/ds," $((9300+i)) $i; done); ST=${ST%,}
el "ingest"
$S ingest --stores $ST --data 4 --parity 2 $W/src train 2>&1 | tail -2
ticks(){ awk '{print $14+$15}' /proc/$1/stat; }
for case in "global" "window:--window 4"; do
  name=${case%%:*}; flags=""; [ "$case" != "$name" ] && flags=${case#*:}
  m=$W/mnt-$name; mkdir -p $m
  $S mount --daemon --stores $ST --batch-size 256 --ready-file $W/ready-$name --metrics-addr 127.0.0.1:9977 --pprof $flags train $m || exit 1
  pid=$(head -n1 $W/ready-$name)
  tp=$(for d in /proc/[0-9]*; do [ "$(cat $d/comm 2>/dev/null)" = toxiproxy-serve ] && basename $d; done | head -1)
  d0=$(ticks $pid); t0=$(ticks $tp); m0=$(cat /proc/stat | head -1)
  el "train $name"
  python3 $G/train.py resnet18 $m 12 > $OUT/train-$name.json 2>$W/train.err &
  tr=$!
  # torch's start and cudnn's warm-up take seconds: profile once the trainer reads.
  python3 -c "
import json, sys, time
for _ in range(600):
    try:
        if json.load(open(sys.argv[1]))['bytes_served'] > 50e6: break
    except Exception: pass
    time.sleep(0.05)
" $m/.shardfs/stats.json
  fetch(){ python3 -c "import sys,urllib.request; open(sys.argv[2],'wb').write(urllib.request.urlopen(sys.argv[1], timeout=60).read())" "$1" "$2"; }
  fetch "http://127.0.0.1:9977/debug/pprof/profile?seconds=5" $OUT/$name.pprof
  fetch "http://127.0.0.1:9977/debug/pprof/goroutine?debug=1" $OUT/$name-goroutines.txt
  wait $tr
  d1=$(ticks $pid); t1=$(ticks $tp); m1=$(cat /proc/stat | head -1)
  cp $m/.shardfs/stats.json $OUT/stats-$name.json
  echo "$name daemon ticks $((d1-d0)) toxiproxy ticks $((t1-t0)) /proc/stat before: $m0 after: $m1" | tee -a $OUT/cpu.txt
  tail -n1 $OUT/train-$name.json
  umount $m; sleep 1
done
el "done"
