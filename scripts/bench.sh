#!/usr/bin/env bash
# Reproduces BENCHMARKS.md and docs/bench/*.png: shardfs against the FUSE
# ceiling, tmpfs, rclone mount and s3fs, stalls and degraded reads, all on
# this machine against local MinIO. Installs what it needs; takes ~20 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
if ! command -v rclone >/dev/null || ! command -v s3fs >/dev/null; then
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rclone s3fs >/dev/null
fi
export SHARDFS_BENCH_REPS="${SHARDFS_BENCH_REPS:-3}"
go test -tags benchharness -count=1 -timeout 90m -run TestBenchmarks -v ./bench/
