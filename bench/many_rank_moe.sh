#!/bin/bash
# `moetrace report` of a folder of 1024 distinct PyTorch-profiler rank files
# of a simulated MoE run (BENCHMARKS.md, "1024 distinct rank files"). Usage:
#   bench/many_rank_moe.sh [MOETRACE] [RANKS] [DIR] [RUNS]
# 1. Simulates pipemoe on RANKS ranks (one expert per rank, zipf-skewed
#    routing s = 1.2, 4 layers, 3 iterations), one trace file per rank.
# 2. Writes each rank as a Kineto JSON file as its profiler would
#    (bench/sim_rank_kineto.py: per-rank kernel timings, host clock offsets,
#    NCCL collectives with sequence numbers, Megatron-Core module ranges, 3
#    ranks missing, 3 cut short).
# 3. Times `report DIR/prof` RUNS times (default 3) on 2 cores (taskset where
#    the machine has more) with /usr/bin/time: wall, user, peak RSS; and
#    checks that every run's JSON report holds the same sections.
# The machine's load average is printed before each run: other work on the
# cores slows the wall time.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
moetrace=${1:-build/ci/bin/moetrace}
ranks=${2:-1024}
dir=${3:-$(mktemp -d)}
runs=${4:-3}
mkdir -p "$dir"
if [ ! -f "$dir/sim/run.rank$((ranks - 1)).db" ]; then
  rm -rf "$dir/sim"
  mkdir -p "$dir/sim"
  /usr/bin/time -f "simulated run: %e s wall, %M KB peak RSS" \
    "$moetrace" run --backend sim -v pipemoe --ranks "$ranks" --experts "$ranks" --layers 4 -i 3 \
    --routing zipf --skew 1.2 -o "$dir/sim/run.db" --split-ranks -q
fi
if [ ! -d "$dir/prof" ]; then
  /usr/bin/time -f "Kineto files: %e s wall" python3 "$here/sim_rank_kineto.py" "$dir/sim" "$dir/prof"
fi
echo "$(ls "$dir"/prof | wc -l) rank files, $(du -sh "$dir/prof" | cut -f1)"
pin=()
if [ "$(nproc)" -gt 2 ] && command -v taskset >/dev/null; then pin=(taskset -c 0,1); fi
for i in $(seq 1 "$runs"); do
  echo "load average before run $i: $(cut -d' ' -f1-3 /proc/loadavg)"
  /usr/bin/time -f "report (run $i): %e s wall, %U s user, %M KB peak RSS" \
    "${pin[@]}" "$moetrace" report "$dir/prof" --format json -o "$dir/report$i.json" 2>"$dir/report$i.err" ||
    { cat "$dir/report$i.err"; exit 1; }
  tail -n 1 "$dir/report$i.err"
  python3 -c 'import json, sys
j = json.load(open(sys.argv[1]))
cp = j.get("critical_path", {})
print("  sections:", " ".join(sorted(j)), "| across ranks:", "yes" if cp.get("across_ranks") else "no",
      "| recommendations:", j.get("recommendations", {}).get("status"))' "$dir/report$i.json" | tee "$dir/sections$i.txt"
done
for i in $(seq 2 "$runs"); do
  cmp -s "$dir/sections1.txt" "$dir/sections$i.txt" || { echo "run $i holds other sections than run 1"; exit 1; }
done
echo "every run holds the same sections"
