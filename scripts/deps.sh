#!/usr/bin/env bash
# Installs what the tests need on a fresh Debian machine: MinIO, toxiproxy
# and csi-sanity (built with go install, reused when already in the Go bin directory), fio,
# fuse3, python3-torch, python3-torchvision, python3-pil, python3-sklearn and
# python3-matplotlib (the study), python3-pip,
# python3-setuptools and prometheus (promtool). Under CI=true anything
# missing afterwards is a failure.
set -euo pipefail

MINIO_VERSION=v0.0.0-20260212201848-7aac2a2c5b7c
TOXIPROXY_VERSION=v2.5.0
CSI_TEST_VERSION=v5.6.0 # csi-sanity, the CSI conformance suite
gobin="$(go env GOBIN)"
[ -n "$gobin" ] || gobin="$(go env GOPATH)/bin"

# A MINIO_BIN or TOXIPROXY_BIN already set (test.sh exports both) is used as it is.
if [ -n "${MINIO_BIN:-}" ] && [ -x "${MINIO_BIN}" ]; then
	minio_bin=$MINIO_BIN
else
	minio_bin="$gobin/minio"
	if [ ! -x "$minio_bin" ]; then
		echo "deps: building MinIO $MINIO_VERSION (about 4 minutes on 2 cores)"
		go install "github.com/minio/minio@$MINIO_VERSION"
	fi
fi
# go install names toxiproxy's server binary "server"; keep it under a clear name.
toxiproxy_bin="$gobin/toxiproxy-server"
if [ -n "${TOXIPROXY_BIN:-}" ] && [ -x "${TOXIPROXY_BIN}" ]; then
	toxiproxy_bin=$TOXIPROXY_BIN
elif [ ! -x "$gobin/toxiproxy-server" ]; then
	if [ ! -x "$gobin/server" ] || ! "$gobin/server" -version 2>&1 | grep -q toxiproxy; then
		echo "deps: building toxiproxy $TOXIPROXY_VERSION"
		go install "github.com/Shopify/toxiproxy/v2/cmd/server@$TOXIPROXY_VERSION"
	fi
	cp "$gobin/server" "$gobin/toxiproxy-server"
fi

csi_sanity_bin="$gobin/csi-sanity"
if [ ! -x "$csi_sanity_bin" ]; then
	echo "deps: building csi-sanity $CSI_TEST_VERSION"
	go install "github.com/kubernetes-csi/csi-test/v5/cmd/csi-sanity@$CSI_TEST_VERSION"
fi

need_apt=()
command -v fio >/dev/null || need_apt+=(fio)
# GNU time: the peak RSS of a command, which Go's rusage of a child
# overstates (integration's measurePeakRSS).
[ -x /usr/bin/time ] || need_apt+=(time)
command -v fusermount3 >/dev/null || need_apt+=(fuse3)
/usr/bin/python3 -c 'import torch' 2>/dev/null || need_apt+=(python3-torch)
/usr/bin/python3 -c 'import torchvision' 2>/dev/null || need_apt+=(python3-torchvision)
/usr/bin/python3 -c 'import PIL' 2>/dev/null || need_apt+=(python3-pil)
/usr/bin/python3 -c 'import sklearn' 2>/dev/null || need_apt+=(python3-sklearn)   # the study's digits
/usr/bin/python3 -c 'import matplotlib' 2>/dev/null || need_apt+=(python3-matplotlib) # the study's plot
# pip and setuptools: the test that installs python/ as the README says.
/usr/bin/python3 -m pip --version >/dev/null 2>&1 || need_apt+=(python3-pip)
/usr/bin/python3 -c 'import setuptools' 2>/dev/null || need_apt+=(python3-setuptools)
# promtool (and the server) for the monitoring tests.
command -v promtool >/dev/null || need_apt+=(prometheus)
if [ ${#need_apt[@]} -gt 0 ]; then
	if [ "$(id -u)" = 0 ]; then
		echo "deps: apt-get install ${need_apt[*]}"
		# Another apt run (unattended-upgrades, a second shell) may hold the
		# dpkg lock: wait for it, up to 10 minutes, rather than fail.
		apt_lock_wait=(-o DPkg::Lock::Timeout=600)
		for try in $(seq 1 60); do
			apt-get "${apt_lock_wait[@]}" update -qq && break
			[ "$try" = 60 ] && { echo "deps: apt-get update failed 60 times" >&2; exit 1; }
			echo "deps: apt-get update failed (the lists lock may be held): retrying in 10s" >&2
			sleep 10
		done
		DEBIAN_FRONTEND=noninteractive apt-get "${apt_lock_wait[@]}" install -y -qq "${need_apt[@]}" >/dev/null
	else
		echo "deps: missing ${need_apt[*]}: run as root, or: sudo apt-get install ${need_apt[*]}" >&2
	fi
fi

missing=()
[ -x "$minio_bin" ] || missing+=(minio)
[ -x "$toxiproxy_bin" ] || missing+=(toxiproxy)
[ -x "$csi_sanity_bin" ] || missing+=(csi-sanity)
command -v fio >/dev/null || missing+=(fio)
[ -x /usr/bin/time ] || missing+=(time)
command -v fusermount3 >/dev/null || missing+=(fuse3)
/usr/bin/python3 -c 'import torch' 2>/dev/null || missing+=(python3-torch)
/usr/bin/python3 -c 'import torchvision' 2>/dev/null || missing+=(python3-torchvision)
/usr/bin/python3 -c 'import PIL' 2>/dev/null || missing+=(python3-pil)
/usr/bin/python3 -c 'import sklearn' 2>/dev/null || missing+=(python3-sklearn)
/usr/bin/python3 -c 'import matplotlib' 2>/dev/null || missing+=(python3-matplotlib)
/usr/bin/python3 -m pip --version >/dev/null 2>&1 || missing+=(python3-pip)
/usr/bin/python3 -c 'import setuptools' 2>/dev/null || missing+=(python3-setuptools)
command -v promtool >/dev/null || missing+=(prometheus)
if [ ${#missing[@]} -gt 0 ]; then
	if [ "${CI:-}" = true ]; then
		echo "deps: CI=true and still missing: ${missing[*]}" >&2
		exit 1
	fi
	echo "deps: missing ${missing[*]}: the tests that need them will be skipped" >&2
fi
export MINIO_BIN="$minio_bin"
export TOXIPROXY_BIN="$toxiproxy_bin"
export CSI_SANITY_BIN="$csi_sanity_bin"
