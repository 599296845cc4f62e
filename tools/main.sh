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
# Default input: a simulated run of a paper preset (pipemoe's released
# solver.py example layer on 16 RTX 2080 Ti over 100 Gb/s InfiniBand, with the
# paper's fitted alpha/beta cost model; see README). Replace with
# `moetrace report your.db`.
"$bin/moetrace" run --backend sim --preset pipemoe-solver-example -o "$trace"
"$bin/moetrace" report "$trace"
