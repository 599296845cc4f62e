#!/bin/bash
# `moetrace report` on a run split into one trace file per rank (BENCHMARKS.md,
# "Runs of many rank files"). Usage:
#   bench/multi_rank_bench.sh [MOETRACE] [RANKS] [LAYERS] [ITERATIONS] [DIR]
# Simulates dpmoe on RANKS ranks (one expert per rank), writes it split by rank
# (`moetrace run --split-ranks`), then times `report` over the directory three
# times with /usr/bin/time (wall seconds, peak RSS), with and without the
# recommendations.
set -euo pipefail
moetrace=${1:-build/ci/bin/moetrace}
ranks=${2:-1024}
layers=${3:-2}
iterations=${4:-2}
dir=${5:-$(mktemp -d)}
mkdir -p "$dir"
rm -f "$dir"/run.rank*.db
/usr/bin/time -f "split run: %e s wall, %M KB peak RSS" \
  "$moetrace" run --variant dpmoe --ranks "$ranks" --experts "$ranks" --layers "$layers" \
  --iterations "$iterations" -o "$dir/run.db" --split-ranks -q
echo "$(ls "$dir"/run.rank*.db | wc -l) rank files, $(du -sh "$dir" | cut -f1)"
for i in 1 2 3; do
  /usr/bin/time -f "report (run $i): %e s wall, %U s user, %M KB peak RSS" \
    "$moetrace" report "$dir" -o /dev/null
done
/usr/bin/time -f "report --no-recommendations: %e s wall, %M KB peak RSS" \
  "$moetrace" report "$dir" --no-recommendations -o /dev/null
/usr/bin/time -f "report --per-rank --format html: %e s wall, %M KB peak RSS" \
  "$moetrace" report "$dir" --per-rank --format html -o /dev/null
