#!/usr/bin/env bash
# The main job: set up, build, produce the default input and print its report.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
preset=default
[ -x /usr/local/cuda/bin/nvcc ] || preset=no-cuda
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset"
bin="build/$preset/bin"
trace="build/$preset/demo.db"
# Default input: a synthetic 4-rank PipeMoE-shaped trace generated here (its
# timings are invented, see README). Replace with `moetrace report your.db`.
"$bin/moetrace" synth "$trace"
"$bin/moetrace" report "$trace"
