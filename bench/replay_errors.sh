#!/usr/bin/env bash
# The replay error table of BENCHMARKS.md ("Replay"): `moetrace replay` of
# every real trace we have (../shared/data, tests/data/gpu, the PyTorch peer
# trace), worst iteration and worst MoE-layer error, graph make-up.
#   bash bench/replay_errors.sh [build/ci/bin/moetrace]
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-build/ci/bin/moetrace}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source bench/real_traces.sh
real_traces "$work"
printf '%-44s %5s %5s %8s %8s %9s %9s %6s %6s %s\n' trace ranks iters worst_it worst_ly shift_p50 shift_p99 infer unexpl "missing"
for f in "${traces[@]}"; do
  if ! j=$("$bin" replay "$f" --format json 2>/dev/null); then
    printf '%-52s %s\n' "$(basename "$f")" "(replay failed)"
    continue
  fi
  printf '%s' "$j" > "$work/replay.json"
  python3 - "$f" "$work/replay.json" <<'PY'
import json, os, sys
j = json.load(open(sys.argv[2]))
it = j["iterations"]
ranks = len({r["rank"] for r in it})
g = j["graph"]
miss = "; ".join(m.split(":")[0] for m in g["missing"])
print("%-44s %5d %5d %7.2f%% %8s %7.1fus %7.1fus %6d %6d %s" % (os.path.basename(sys.argv[1])[:44], ranks, len(it),
      100 * j["max_iteration_error"], ("%.2f%%" % (100 * j["max_layer_error"])) if j["layers"] else "-",
      g["start_shift_p50_ns"] / 1e3, g["start_shift_p99_ns"] / 1e3,
      g["edge_counts"]["inferred_cross_stream"], g["unexplained"], miss))
PY
done
