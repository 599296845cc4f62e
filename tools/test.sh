#!/usr/bin/env bash
# The whole test suite, as CI runs it: set up, build with warnings as errors,
# run every test through ctest (GPU tests skip cleanly without a GPU); then
# the same suite under sanitizers and each fuzz target briefly.
#
# Sanitizers (2 cores, no GPU, 90 minutes in all; times measured on such a
# machine are in RELIABILITY.md):
# - ci-asan: every test of the ci build except those needing CUDA (there is no
#   GPU, and nvcc code is not instrumented), built with gcc, ASan and UBSan,
#   -O1; UBSan stops at the first report and LeakSanitizer is on. Warnings
#   are errors there too, except -Wmaybe-uninitialized, which gcc 12 raises
#   falsely inside libstdc++'s <regex> under sanitizer instrumentation (the
#   ci build keeps it).
# - fuzz: the libFuzzer targets (clang, ASan and UBSan), each for
#   MOETRACE_FUZZ_SECONDS (default 30) on its seed corpus, after replaying the
#   inputs that once crashed them (tests/fuzz/regressions).
# - tsan: the threaded parts (trace writer, Kineto JSON splitter, GUI core's
#   threaded preparation) under ThreadSanitizer (ctest -L tsan).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
cmake --preset ci
cmake --build --preset ci
ctest --preset ci -j2

cmake --preset ci-asan
cmake --build --preset ci-asan
ctest --preset ci-asan -j2

bash tools/fuzz.sh all "${MOETRACE_FUZZ_SECONDS:-30}"

cmake --preset tsan
cmake --build --preset tsan
ctest --preset tsan -j2
