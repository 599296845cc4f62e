#!/bin/bash
# Many PyTorch-profiler rank files: import them into one folder (one trace per
# rank, several at once) and report the folder as one run (BENCHMARKS.md,
# "Many Kineto rank files"). Usage:
#   bench/many_rank_kineto.sh [MOETRACE] [RANKS] [MB] [DIR] [JOBS...]
# Writes RANKS files of about MB megabytes each (the HTA NCCL test trace
# repeated by make_big_kineto.py, one distributedInfo rank per file), imports
# them once per JOBS value with `import DIR/prof -o DIR/run/ --jobs J`, then
# times `report DIR/run` with /usr/bin/time (wall, user, peak RSS).
set -euo pipefail
default_mb=10
source "$(dirname "$0")/many_rank_args.sh"
shift $(( $# < 4 ? $# : 4 ))
jobs=("$@")
[ ${#jobs[@]} -gt 0 ] || jobs=(1 2)
mkdir -p "$dir/prof"
make_template
python3 "$here/kineto_rank_files.py" "$dir" "$ranks"
rm -f "$dir/template.json"
echo "$(ls "$dir"/prof | wc -l) rank files, $(du -sh "$dir/prof" | cut -f1)"
for j in "${jobs[@]}"; do
  rm -rf "$dir/run"
  /usr/bin/time -f "import --jobs $j: %e s wall, %U s user, %S s sys, %M KB peak RSS" \
    "$moetrace" import "$dir/prof" -o "$dir/run/" --jobs "$j" 2>&1 | tail -2
done
echo "$(ls "$dir"/run | wc -l) traces, $(du -sh "$dir/run" | cut -f1)"
for i in 1 2; do
  /usr/bin/time -f "report (run $i): %e s wall, %U s user, %M KB peak RSS" \
    "$moetrace" report "$dir/run" -o /dev/null
done
/usr/bin/time -f "report --no-recommendations: %e s wall, %U s user, %M KB peak RSS" \
  "$moetrace" report "$dir/run" --no-recommendations -o /dev/null
