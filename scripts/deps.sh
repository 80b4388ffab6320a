#!/usr/bin/env bash
# Installs what the tests need on a fresh Debian machine: MinIO (built with
# go install, reused when already in the Go bin directory), fio, fuse3 and
# python3-torch. Under CI=true anything missing afterwards is a failure.
set -euo pipefail

MINIO_VERSION=v0.0.0-20260212201848-7aac2a2c5b7c
gobin="$(go env GOBIN)"
[ -n "$gobin" ] || gobin="$(go env GOPATH)/bin"

if [ ! -x "$gobin/minio" ]; then
	echo "deps: building MinIO $MINIO_VERSION (about 4 minutes on 2 cores)"
	go install "github.com/minio/minio@$MINIO_VERSION"
fi

need_apt=()
command -v fio >/dev/null || need_apt+=(fio)
command -v fusermount3 >/dev/null || need_apt+=(fuse3)
/usr/bin/python3 -c 'import torch' 2>/dev/null || need_apt+=(python3-torch)
if [ ${#need_apt[@]} -gt 0 ]; then
	if [ "$(id -u)" = 0 ]; then
		echo "deps: apt-get install ${need_apt[*]}"
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
	else
		echo "deps: missing ${need_apt[*]}: run as root, or: sudo apt-get install ${need_apt[*]}" >&2
	fi
fi

missing=()
[ -x "$gobin/minio" ] || missing+=(minio)
command -v fio >/dev/null || missing+=(fio)
command -v fusermount3 >/dev/null || missing+=(fuse3)
/usr/bin/python3 -c 'import torch' 2>/dev/null || missing+=(python3-torch)
if [ ${#missing[@]} -gt 0 ]; then
	if [ "${CI:-}" = true ]; then
		echo "deps: CI=true and still missing: ${missing[*]}" >&2
		exit 1
	fi
	echo "deps: missing ${missing[*]}: the tests that need them will be skipped" >&2
fi
export MINIO_BIN="$gobin/minio"
