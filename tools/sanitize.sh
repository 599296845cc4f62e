#!/usr/bin/env bash
# The test suite under sanitizers and the fuzz targets, as CI runs them after
# tools/test.sh (2 cores, no GPU; times per stage in RELIABILITY.md):
# - ci-asan: every test of the ci build except those needing CUDA (there is no
#   GPU, and nvcc code is not instrumented), built with clang, ASan and UBSan
#   (no recovery: the first report fails the test), -O1, LeakSanitizer on,
#   warnings as errors. The same build holds the libFuzzer targets: its code
#   carries libFuzzer's coverage instrumentation, so one build serves both.
# - fuzz: the libFuzzer targets of that build, each for MOETRACE_FUZZ_SECONDS
#   (default 30) on its seed corpus, after replaying the inputs that once
#   crashed them (tests/fuzz/regressions).
# - tsan: the threaded parts (trace writer, Kineto JSON splitter, the analyses
#   run side by side, GUI core's threaded preparation) under ThreadSanitizer
#   (ctest -L tsan).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh sanitizers

cmake --preset ci-asan
cmake --build --preset ci-asan
bash tools/ctest_stage.sh ci-asan --preset ci-asan -j2

MOETRACE_FUZZ_PRESET=ci-asan bash tools/fuzz.sh all "${MOETRACE_FUZZ_SECONDS:-30}"

cmake --preset tsan
cmake --build --preset tsan
bash tools/ctest_stage.sh tsan --preset tsan -j2
