#!/usr/bin/env bash
# The whole test suite: the README's second command, and what .ci/run runs.
set -euo pipefail
cd "$(dirname "$0")/.."

source scripts/deps.sh

echo "== gofmt, go vet"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then echo "gofmt would change: $unformatted" >&2; exit 1; fi
go vet ./...

echo "== go test -race (all packages, including the MinIO integration tests)"
go test -race -count=1 -timeout 40m ./...

echo "== full erasure decode matrix (4,2) (6,3) (10,4), without -race"
go test -timeout 10m -run 'TestDecodeMatrix' -count=1 ./erasure/

echo "== layout property tests, full set, without -race (layout is pure: no goroutines)"
go test -timeout 10m -count=1 ./layout/

echo "== fuzz: manifest, top-level manifest, shard index, format-3 root and group, and part record decoders, key checks, tar names, file-map offset math, and the record sources' decoders (WebDataset shards, JSONL lines, Parquet files) (30s each)"
for target in manifest:FuzzDecode manifest:FuzzDecodeBody manifest:FuzzDecodeTop manifest:FuzzDecodeIndex manifest:FuzzDecodeRootBody ingest:FuzzDecodePart manifest:FuzzCheckKey layout:FuzzTarName layout:FuzzExtents ingest:FuzzWebDatasetShard ingest:FuzzJSONLRecord ingest:FuzzParquet; do
	go test -run '^$' -fuzz "^${target#*:}\$" -fuzztime 30s "./${target%%:*}/"
done

echo "== all tests passed"
