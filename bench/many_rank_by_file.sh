#!/bin/bash
# `report` over a run of many realistic PyTorch-profiler rank files, read one
# file at a time (`report --by-file`, run_by_file.h), with its time and peak
# memory (BENCHMARKS.md, "Runs of many rank files"). Usage:
#   bench/many_rank_by_file.sh [MOETRACE] [RANKS] [MB] [DIR] [BATCH]
# Writes RANKS Kineto files of about MB megabytes each (the HTA NCCL test
# trace repeated by make_big_kineto.py, one distributedInfo rank per file),
# BATCH at a time: each batch is imported into DIR/run/ (`import --jobs 2`)
# and its JSON removed, so the disk holds the traces and one batch of JSON
# only. Then times `report DIR/run --by-file` (wall, user, peak RSS) at
# --threads 2 and 1, and, where MERGED=1, `report --merged` for comparison.
set -euo pipefail
default_mb=16
source "$(dirname "$0")/many_rank_args.sh"
batch=${5:-32}
mkdir -p "$dir/prof" "$dir/run"
make_template
start=$(date +%s)
for ((first = 0; first < ranks; first += batch)); do
  last=$(( first + batch < ranks ? first + batch : ranks ))
  python3 "$here/kineto_rank_files.py" "$dir" "$ranks" "$first" "$last"
  "$moetrace" import "$dir/prof" -o "$dir/run/" --jobs 2 > /dev/null 2>&1 || { echo "import of ranks $first-$((last - 1)) failed"; exit 1; }
  rm -f "$dir"/prof/*.json
done
rm -f "$dir/template.json"
echo "$(ls "$dir"/run | wc -l) traces, $(du -sh "$dir/run" | cut -f1), written and imported in $(( $(date +%s) - start )) s"
for threads in 2 1; do
  /usr/bin/time -f "report --by-file --threads $threads: %e s wall, %U s user, %M KB peak RSS" \
    "$moetrace" report "$dir/run" --by-file --threads "$threads" -o /dev/null 2>&1 | grep -v warning
done
if [ "${MERGED:-0}" = 1 ]; then
  /usr/bin/time -f "report --merged --no-recommendations: %e s wall, %U s user, %M KB peak RSS" \
    "$moetrace" report "$dir/run" --merged --no-recommendations -o /dev/null 2>&1 | grep -v warning
fi
