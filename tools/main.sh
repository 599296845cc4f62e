#!/usr/bin/env bash
# The main job: set up, build the programs (moetrace, its CUDA backend and
# moetrace-gui; no tests), produce the default input and print its report.
#
# It builds in build/ci, the tree and flags of the test command
# (tools/test.sh), which then builds only what is left: the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
if [ -x /usr/local/cuda/bin/nvcc ]; then
  cmake --preset ci >/dev/null
else
  cmake --preset ci -DMOETRACE_CUDA=OFF >/dev/null
fi
cmake --build --preset main
bin="build/ci/bin"
trace="build/ci/demo.db"
# Default input: a simulated run of a paper preset (pipemoe's released
# solver.py example layer on 16 RTX 2080 Ti over 100 Gb/s InfiniBand, with the
# paper's fitted alpha/beta cost model; see docs/building.md). Replace with
# `moetrace report your.db`.
"$bin/moetrace" run --backend sim --preset pipemoe-solver-example -o "$trace"
"$bin/moetrace" report "$trace"
