#!/usr/bin/env bash
# Builds moetrace with the CUDA executor and the CUPTI collector and runs the
# tests labelled `gpu` (plus the CPU-side CUDA tests) on a machine with a GPU.
#
# Made for the lent GPU machines (H100 / H200, CUDA 13 toolkit with NCCL,
# cmake, ninja, no Debian registry): the build dependencies travel as .deb
# files (tools/fetch_gpu_debs.sh downloads them into .debs/ elsewhere) and are
# unpacked here with `dpkg -x` into a private prefix; nothing is installed.
# Packages: libsqlite3-dev (+ libsqlite3-0), libfmt-dev (+ libfmt9),
# nlohmann-json3-dev, libsimdjson-dev (+ libsimdjson14), libcli11-dev,
# libgtest-dev (+ libgmock-dev). Qt is not
# needed (-DMOETRACE_GUI=OFF). Where a package is already installed, the
# system copy is used.
#
#   tools/gpu_validate.sh [DEB_DIR]        (default: .debs)
# Environment: MOETRACE_GPU_BUILD (build dir, default build/gpu),
# MOETRACE_CUDA_ARCHITECTURES (default 90), JOBS (default: all cores).
set -euo pipefail
cd "$(dirname "$0")/.."
deb_dir=${1:-.debs}
build=${MOETRACE_GPU_BUILD:-build/gpu}
prefix=$PWD/$build/deps
arch_dir=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
jobs=${JOBS:-$(nproc)}

echo "== GPU"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || echo "(nvidia-smi failed)"
[ -x /usr/local/cuda/bin/nvcc ] || { echo "gpu_validate: no CUDA toolkit at /usr/local/cuda" >&2; exit 1; }
/usr/local/cuda/bin/nvcc --version | tail -1

echo "== dependencies"
have_header() { echo "#include <$1>" | g++ -std=c++20 -x c++ -fsyntax-only - 2>/dev/null; }
missing=${MOETRACE_FORCE_DEBS:-0}
for h in sqlite3.h fmt/format.h nlohmann/json.hpp simdjson.h CLI/CLI.hpp gtest/gtest.h; do
  have_header "$h" || missing=1
done
cmake_prefix=""
if [ "$missing" = 1 ]; then
  shopt -s nullglob
  debs=("$deb_dir"/*.deb)
  if [ ${#debs[@]} -eq 0 ]; then
    echo "gpu_validate: build dependencies are missing and there are no .deb files in $deb_dir" >&2
    echo "  (run tools/fetch_gpu_debs.sh where the Debian registry is reachable, carry .debs/)" >&2
    exit 1
  fi
  rm -rf "$prefix"
  mkdir -p "$prefix"
  for d in "${debs[@]}"; do
    echo "unpacking $(basename "$d")"
    dpkg -x "$d" "$prefix"
  done
  cmake_prefix="$prefix/usr"
  export CPATH="$prefix/usr/include${CPATH:+:$CPATH}"
  export LIBRARY_PATH="$prefix/usr/lib/$arch_dir${LIBRARY_PATH:+:$LIBRARY_PATH}"
  export LD_LIBRARY_PATH="$prefix/usr/lib/$arch_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi

echo "== configure"
cmake -S . -B "$build" -G Ninja \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DMOETRACE_CUDA=ON -DMOETRACE_GUI=OFF -DMOETRACE_BENCH=OFF -DMOETRACE_WERROR=ON \
  -DMOETRACE_CUDA_ARCHITECTURES="${MOETRACE_CUDA_ARCHITECTURES:-90}" \
  ${cmake_prefix:+-DCMAKE_PREFIX_PATH="$cmake_prefix"}

echo "== build"
cmake --build "$build" -j "$jobs" --target cuda_gpu_tests cuda_probe_tests cuda_host_tests cupti_convert_tests moetrace

echo "== tests"
status=0
# The CPU-side logic of the GPU path, then the tests that need the GPU.
for t in cuda_host_tests cupti_convert_tests cuda_probe_tests; do
  "$build/bin/$t" --gtest_brief=1 || status=1
done
log=$build/gpu_tests.log
ctest --test-dir "$build" -L gpu --output-on-failure --timeout 900 -V 2>&1 | tee "$log" || status=1
# End to end: a small PipeMoE through `moetrace run --backend cuda`, then its trace.
smoke=$build/gpu_smoke.db
if "$build/bin/moetrace" run --backend cuda --variant pipemoe --ranks 4 --experts 8 --layers 2 \
     --iterations 2 --tokens 512 -r 2 -o "$smoke"; then
  "$build/bin/moetrace" info "$smoke" || status=1
  "$build/bin/moetrace" report "$smoke" | head -40 || status=1
else
  status=1
fi
# A gpu test skipped for want of a GPU means none was usable: a failure here.
# (Others may skip by design: the NCCL test needs two GPUs.)
if grep -q "needs a CUDA GPU and driver" "$log"; then
  echo "gpu_validate: gpu tests were skipped, no usable GPU:" >&2
  grep -m1 "needs a CUDA GPU and driver" "$log" >&2
  status=1
fi
[ $status = 0 ] && echo "gpu_validate: all passed" || echo "gpu_validate: FAILED" >&2
exit $status
