#!/usr/bin/env bash
# Reproduces BENCHMARKS.md and docs/bench/*.png: shardfs against the FUSE
# ceiling, tmpfs, rclone mount and s3fs, stalls and degraded reads, all on
# this machine against local MinIO. Installs what it needs; takes ~20 minutes.
#
#   scripts/bench.sh --ab REV   this tree against git revision REV (a commit,
#                               tag or branch) in one run: the latency
#                               regime's shardfs rows read by both binaries
#                               in alternating pairs, each ratio's change
#                               with its spread (docs/bench/baseline.md)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--ab" ]; then
	[ -n "${2:-}" ] || { echo "bench.sh --ab REV: name the revision to compare with, e.g. --ab HEAD~1 or --ab main" >&2; exit 2; }
	git rev-parse --verify --quiet "$2^{commit}" >/dev/null || { echo "bench.sh --ab $2: not a revision of this repository" >&2; exit 2; }
	export SHARDFS_BENCH_ONLY=baseline SHARDFS_BENCH_BASELINE="$2"
elif [ -n "${1:-}" ]; then
	echo "bench.sh: unknown argument $1 (the only one is --ab REV)" >&2
	exit 2
fi
source scripts/deps.sh
if ! command -v rclone >/dev/null || ! command -v s3fs >/dev/null; then
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rclone s3fs >/dev/null
fi
export SHARDFS_BENCH_REPS="${SHARDFS_BENCH_REPS:-3}"
go test -tags benchharness -count=1 -timeout 90m -run TestBenchmarks -v ./bench/
