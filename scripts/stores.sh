#!/usr/bin/env bash
# Starts, or stops, six local MinIO servers: the stores of the README's
# workflow. They listen on 127.0.0.1 only, on six ports from the first one
# given (9100..9105 by default; each one's console on the port 100 above),
# keep their data in DIR/store0..5, and take their credentials from
# AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY. stop ends exactly the
# processes start wrote to DIR/pids.
#
#   scripts/stores.sh start DIR [127.0.0.1:9100]
#   scripts/stores.sh stop DIR
#
# MinIO comes from $MINIO_BIN, PATH, or the Go bin directory, where
# scripts/deps.sh builds it.
set -euo pipefail

# ready: MinIO on $1:$2 answers its readiness check (the object layer is up).
ready() {
	exec 3<>"/dev/tcp/$1/$2" || return 1
	printf 'GET /minio/health/ready HTTP/1.0\r\nHost: %s:%s\r\n\r\n' "$1" "$2" >&3
	local status
	status=$(head -1 <&3)
	[[ $status == *" 200"* ]]
}

usage() { echo "usage: $0 start DIR [127.0.0.1:FIRSTPORT] | stop DIR" >&2; exit 2; }
[ $# -ge 2 ] || usage
cmd=$1 dir=$2 first=${3:-127.0.0.1:9100}
host=${first%:*} port=${first##*:}
case $host in 127.0.0.1|localhost) ;; *) echo "stores.sh: listen on 127.0.0.1 only (got $host)" >&2; exit 2 ;; esac

case $cmd in
start)
	minio=${MINIO_BIN:-}
	[ -n "$minio" ] || minio=$(command -v minio || true)
	[ -n "$minio" ] || minio="$(go env GOPATH 2>/dev/null)/bin/minio"
	if [ ! -x "$minio" ]; then
		echo "stores.sh: no minio binary: run ./scripts/deps.sh (it builds MinIO), or set MINIO_BIN" >&2
		exit 1
	fi
	: "${AWS_ACCESS_KEY_ID:?stores.sh: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY first: MinIO takes them as its credentials}"
	: "${AWS_SECRET_ACCESS_KEY:?stores.sh: set AWS_SECRET_ACCESS_KEY first}"
	if [ -s "$dir/pids" ]; then
		echo "stores.sh: $dir/pids exists: the stores may be running; stop them first: $0 stop $dir" >&2
		exit 1
	fi
	mkdir -p "$dir"
	for i in 0 1 2 3 4 5; do
		p=$((port + i))
		mkdir -p "$dir/store$i"
		MINIO_ROOT_USER=$AWS_ACCESS_KEY_ID MINIO_ROOT_PASSWORD=$AWS_SECRET_ACCESS_KEY MINIO_BROWSER=off MINIO_UPDATE=off MINIO_CI_CD=1 \
			setsid "$minio" server --quiet --address "$host:$p" --console-address "$host:$((p + 100))" "$dir/store$i" \
			>"$dir/store$i.log" 2>&1 </dev/null &
		echo $! >>"$dir/pids"
	done
	# Ready once each answers its readiness check (the object layer is up).
	for i in 0 1 2 3 4 5; do
		p=$((port + i))
		for try in $(seq 1 300); do
			if (ready "$host" "$p") 2>/dev/null; then
				break
			fi
			if [ "$try" = 300 ]; then
				echo "stores.sh: MinIO on $host:$p did not become ready in 30s; see $dir/store$i.log" >&2
				exit 1
			fi
			sleep 0.1
		done
	done
	echo "started 6 MinIO servers on $host:$port..$((port + 5)) (data in $dir); stop them with: $0 stop $dir"
	;;
stop)
	if [ ! -s "$dir/pids" ]; then
		echo "stores.sh: no $dir/pids: nothing started there" >&2
		exit 1
	fi
	n=0
	while read -r pid; do
		if kill "$pid" 2>/dev/null; then
			n=$((n + 1))
			for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		fi
	done <"$dir/pids"
	rm -f "$dir/pids"
	echo "stopped $n MinIO servers"
	;;
*) usage ;;
esac
