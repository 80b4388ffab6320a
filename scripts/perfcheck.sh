#!/usr/bin/env bash
# The performance check (issue 56): five ratios of shardfs against floors
# measured in the same run (window and global order against the bare S3
# client's ceilings, the memory cache against the FUSE floor, ingest
# against its single-pass floor, and a cold epoch with a quarter cache at
# 400 ms against 20 ms: the prefetch depth), compared with
# bench/check-baseline.json. It fails only when a ratio falls clearly
# below the baseline's spread. About 3 minutes on 2 cores; scripts/test.sh
# runs it last. SHARDFS_CHECK_ONLY=depth,global measures only those.
#
#   scripts/perfcheck.sh              measure, and compare with the baseline
#   scripts/perfcheck.sh --calibrate  measure 4 times, the last 2 with both
#                                     cores spun by other processes, and
#                                     write the baseline from those runs
#   scripts/perfcheck.sh --calibrate --widen
#                                     the same, on a CI machine of another
#                                     kind: each ratio's range becomes the
#                                     committed one and these runs' together
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh

check() {
	go test -tags benchharness -count=1 -timeout 10m -run '^TestPerfCheck$' -v ./bench/ 2>&1 |
		grep -vE '^=== (RUN|PAUSE|CONT)' || return 1
}

if [ "${1:-}" != "--calibrate" ]; then
	[ -z "${1:-}" ] || { echo "perfcheck.sh: unknown argument $1 (--calibrate [--widen])" >&2; exit 2; }
	check
	exit
fi

case "${2:-}" in "" | --widen) ;; *) echo "perfcheck.sh --calibrate: unknown argument $2 (--widen)" >&2; exit 2 ;; esac
runs=$(mktemp -d)
trap 'rm -rf "$runs"' EXIT
for i in 1 2 3 4; do
	spinners=()
	if [ "$i" -gt 2 ]; then
		for _ in 1 2; do
			sh -c 'while :; do :; done' &
			spinners+=($!)
		done
	fi
	echo "== calibration run $i of 4 (busy cores: $([ "$i" -gt 2 ] && echo yes || echo no))"
	SHARDFS_CHECK_NO_BASELINE=1 SHARDFS_CHECK_OUT="$runs/$i.json" check || { kill "${spinners[@]}" 2>/dev/null; exit 1; }
	[ ${#spinners[@]} -eq 0 ] || kill "${spinners[@]}"
done
/usr/bin/python3 - "$runs" bench/check-baseline.json "$(nproc) cores, $(uname -m), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)" "${2:-}" <<'EOF'
import json, statistics, sys, glob
runs, out, machine, widen = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "--widen"
results = [json.load(open(p)) for p in sorted(glob.glob(runs + "/*.json"))]
ratios = {}
for name in results[0]:
    xs = [r[name] for r in results]
    ratios[name] = {"Median": round(statistics.median(xs), 4), "Lo": round(min(xs), 4), "Hi": round(max(xs), 4)}
n, busy = len(results), 2
# --widen: the CI machine is of another kind than the one the committed
# baseline was measured on, and a ratio whose two sides scale differently
# with the CPU moves with it (depth: its 400 ms side is bound by the bytes
# a quarter cache lets in flight, its 20 ms side by the CPU; 0.51 on one
# 2-core machine, 0.23 on a faster one). Each range becomes both
# machines' together, the median these runs'; neither machine fails on
# its own noise, and the tolerance below still applies.
if widen:
    old = json.load(open(out))
    for name, r in ratios.items():
        o = old["ratios"].get(name)
        if o:
            r["Lo"], r["Hi"] = min(r["Lo"], o["Lo"]), max(r["Hi"], o["Hi"])
    machine = old["machine"] + "; " + machine
    n, busy = n + old["Runs"], busy + old["Busy"]
# A ratio fails below 65% of the lowest calibration run's. On the 2-core
# CI machine, 2 idle and 2 busy runs gave medians of 1.05-2.21 (global
# order: busy cores slow the bare client more), 0.24-0.35 (memory cache),
# 0.19-0.24 (window) and 1.03-1.12 (ingest): a halving of the window or
# ingest ratio fails, noise does not.
# depth is held to 25% below its lowest run, not 35%: on the AMD EPYC
# 2-core machine its idle runs read 0.207-0.236 (medians 0.210-0.236;
# busy cores raise it, to 0.34-0.39, by slowing its 20 ms side), and a
# halved prefetch depth read 0.110-0.144 (median 0.140), which 35% below
# 0.2095 (0.136) let pass.
json.dump({"machine": machine, "Runs": n, "Busy": busy, "ratios": ratios, "tolerance": 0.35, "tolerances": {"depth": 0.25}}, open(out, "w"), indent=1)
print(open(out).read())
EOF
