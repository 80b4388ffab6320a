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

echo "== fuzz: manifest, top-level manifest, shard index, format-3 root and group, and part record decoders, key checks, tar names, file-map offset math, and the record sources' decoders (WebDataset shards, their plain tar headers against archive/tar, JSONL lines, Parquet files) (about 30s each)"
# Each target runs a count of inputs, about 30 s of them on a 2-core
# machine, and minimises nothing. A duration (-fuzztime 30s) failed CI with
# "context deadline exceeded" and no failing input: the fuzzer spent the
# whole 30 s minimising FuzzWebDatasetShard's first interesting input (a
# tar is 1 KiB or more and minimising is quadratic in its length: 6 inputs
# run in 30 s), and a deadline that ends the run mid-call fails it
# (go.dev/issue/75804). A count has no deadline to race, and a crashing
# input is still written to testdata/fuzz, whole.
for target in manifest:FuzzDecode:1500000 manifest:FuzzDecodeBody:450000 manifest:FuzzDecodeTop:100000 manifest:FuzzDecodeIndex:160000 manifest:FuzzDecodeRootBody:350000 ingest:FuzzDecodePart:200000 manifest:FuzzCheckKey:1200000 layout:FuzzTarName:1500000 layout:FuzzExtents:1200000 ingest:FuzzWebDatasetShard:60000 ingest:FuzzPlainTarHeaders:120000 ingest:FuzzJSONLRecord:240000 ingest:FuzzParquet:60000; do
	IFS=: read -r pkg name count <<<"$target"
	go test -run '^$' -fuzz "^${name}\$" -fuzztime "${count}x" -fuzzminimizetime 0x "./${pkg}/"
done

echo "== all tests passed"
