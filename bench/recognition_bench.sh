#!/usr/bin/env bash
# What MoE recognition adds to `moetrace import` + `moetrace report`: each
# input is imported once (recognition runs when a trace is read, not at
# import), then `report --format json --no-recommendations` runs N times with
# recognition and N times with --no-moe-recognition, interleaved, and the
# medians are printed with import + report for both.
#   bench/recognition_bench.sh [-n N] [MOETRACE] INPUT...
set -euo pipefail
n=9
if [ "${1:-}" = "-n" ]; then n=$2; shift 2; fi
bin=${MOETRACE:-build/ci/bin/moetrace}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
now() { date +%s.%N; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
printf "%-40s %9s %9s %9s %9s %8s\n" input "import_s" "report_s" "plain_s" "added_s" "added_%"
for in in "$@"; do
  db="$tmp/$(basename "$in").db"
  t0=$(now); "$bin" import "$in" -o "$db" >/dev/null; t1=$(now)
  imp=$(echo "$t1 - $t0" | bc -l)
  : >"$tmp/on"; : >"$tmp/off"
  for _ in $(seq "$n"); do
    t0=$(now); "$bin" report "$db" --format json --no-recommendations >/dev/null; t1=$(now)
    echo "$t1 - $t0" | bc -l >>"$tmp/on"
    t0=$(now); "$bin" report "$db" --format json --no-recommendations --no-moe-recognition >/dev/null; t1=$(now)
    echo "$t1 - $t0" | bc -l >>"$tmp/off"
  done
  on=$(median <"$tmp/on"); off=$(median <"$tmp/off")
  added=$(echo "$on - $off" | bc -l)
  printf "%-40s %9.3f %9.3f %9.3f %9.3f %7.1f%%\n" "$(basename "$in")" "$imp" "$on" "$off" "$added" \
    "$(echo "100 * $added / ($imp + $off)" | bc -l)"
done
