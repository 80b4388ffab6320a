#!/usr/bin/env bash
# Counts the places that branch on an order mode (window, affinity, mix,
# recency, feedback, follow), per mode, and their total, in the Go code outside tests: a line that tests the
# mode's field or flag, or its bit in layout's table of modes (modes.go), in an if, a case, or a && / ||
# condition. The table's rows (which modes combine) are data, not branches. With a
# git revision, counts that tree instead (e.g. the tree before a change).
#   scripts/order-branches.sh [REV]
set -euo pipefail
cd "$(dirname "$0")/.."
rev=${1:-}
total=0
for mode in window affinity mix recency feedback follow; do
 case $mode in
  window) pat='[.]([Ww]indow) *(>|==|!=) *0|modeWindow\b' ;;
  affinity) pat='[.][Aa]ffinity\b|rangeAffine|modeAffinity\b' ;;
  mix) pat='[.]Mix *(!=|==) *nil|[.]mix *(!=|==) *""|modeMix\b' ;;
  recency) pat='[.]Weights *(!=|==) *nil|[.]Recency *(!=|==) *nil|timed\(\)|mode(Recency|Weights)\b' ;;
  feedback) pat='[.][Ff]eedback *(!=|==) *(nil|"")|modeFeedback\b' ;;
  follow) pat='[.][Ff]ollow\b *(&&|\|\||\)|[{]|$|(!=|==) *nil)|![a-z]+[.][Ff]ollow\b|modeFollow\b' ;;
 esac
 if [ -n "$rev" ]; then
  out=$(git grep -nE "$pat" $rev -- '*.go' ':!*_test.go' | grep -E '\bif\b|\bcase\b|&&|\|\|' )
 else
  out=$(git grep -nE "$pat" -- '*.go' ':!*_test.go' | grep -E '\bif\b|\bcase\b|&&|\|\|')
 fi
 n=$(echo "$out" | grep -c . || true)
 if [ -n "$rev" ]; then files=$(echo "$out" | cut -d: -f2 | sort -u | wc -l); else files=$(echo "$out" | cut -d: -f1 | sort -u | wc -l); fi
 cli=$(echo "$out" | grep -c "cmd/shardfs" || true)
 echo "$mode: $n sites in $files files, $cli in the CLI"
 total=$((total + n))
done
echo "total: $total sites (issue 58 asks to halve it)"
