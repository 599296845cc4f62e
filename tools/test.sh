#!/usr/bin/env bash
# The whole test suite, as CI runs it: set up, build with warnings as errors,
# run every test through ctest (GPU tests skip cleanly without a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
cmake --preset ci
cmake --build --preset ci
ctest --preset ci -j2
