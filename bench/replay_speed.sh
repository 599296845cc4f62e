#!/usr/bin/env bash
# Speed of `moetrace replay` and of each what-if on one rank (BENCHMARKS.md,
# "Replay and what-ifs: speed"): synthetic one-rank traces of about 100 k and
# 1 M events (`moetrace synth`: MoE layers at r = 1, a launching call per
# kernel), each command's wall time, CPU time (user + sys) and peak RSS.
#   bash bench/replay_speed.sh [build/ci/bin/moetrace] [EVENTS ...]
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-build/ci/bin/moetrace}
shift || true
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(100000 1000000)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
what_ifs=("" "pipeline_degree=4" "reuse=S2" "placement=pro-prophet" "overlap=on" "overlap=off")
printf '%-9s %-24s %8s %8s %9s\n' events what-if wall_s cpu_s peak_MiB
for n in "${sizes[@]}"; do
  trace="$work/rank_$n.db"
  "$bin" synth --ranks 1 --layers 4 --chunks 1 --events "$n" "$trace" > /dev/null 2>&1
  for w in "${what_ifs[@]}"; do
    args=(replay "$trace" --format json -o "$work/out.json")
    [ -z "$w" ] || args+=(--what-if "$w")
    /usr/bin/time -f '%e %U %S %M' -o "$work/time" "$bin" "${args[@]}" 2> /dev/null
    read -r wall user sys rss < "$work/time"
    printf '%-9s %-24s %8.2f %8.2f %9.0f\n' "$n" "${w:-(replay only)}" "$wall" "$(echo "$user + $sys" | bc)" \
      "$(echo "$rss / 1024" | bc)"
  done
done
