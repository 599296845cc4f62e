#!/usr/bin/env bash
# Every test, as CI runs it first: set up, build the `ci` preset (gcc 12,
# -O2, warnings as errors; the programs of tools/main.sh are the same
# objects), run every test through ctest. GPU tests skip cleanly without a
# GPU. The sanitizer and fuzz stages are tools/sanitize.sh; .ci/run runs this,
# then that.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
cmake --preset ci
cmake --build --preset ci
bash tools/ctest_stage.sh ci --preset ci -j2
