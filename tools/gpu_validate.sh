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
# libgtest-dev (+ libgmock-dev), zlib1g-dev (+ zlib1g). Qt is not needed
# (-DMOETRACE_GUI=OFF). Where every header is already there, the system
# copies are used.
#
#   tools/gpu_validate.sh build [DEB_DIR]   configure and build (DEB_DIR default: .debs)
#   tools/gpu_validate.sh test              CPU-side CUDA tests, `ctest -L gpu`, a smoke run
#   tools/gpu_validate.sh all [DEB_DIR]     both, one after the other
#
# `build` and `test` are separate so that each fits in one command of a
# lent machine (10 minutes a command): `test` reuses the build directory and
# the environment `build` left in it ($build/gpu_env.sh).
# Environment: MOETRACE_GPU_BUILD (build dir, default build/gpu),
# MOETRACE_CUDA_ARCHITECTURES (default 90), JOBS (default: all cores),
# MOETRACE_WERROR (default OFF: the device machine's compiler is not CI's,
# and a warning new to it should not cost the lease; CI builds with it ON),
# GPU_TEST_TIMEOUT (seconds per gpu test, default 240).
set -euo pipefail
cd "$(dirname "$0")/.."

stage=all
case "${1:-}" in
  build | test | all) stage=$1; shift ;;
esac
deb_dir=${1:-.debs}
build=${MOETRACE_GPU_BUILD:-build/gpu}
[[ $build == /* ]] || build=$PWD/$build
prefix=$build/deps
arch_dir=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
jobs=${JOBS:-$(nproc)}
env_file=$build/gpu_env.sh

# Unpacks every .deb of $deb_dir into $prefix and makes its libraries usable
# from there. Debian's -dev packages link `libz.so` with an absolute path
# (/lib/x86_64-linux-gnu/libz.so.1.2.13) that need not exist on another
# distribution: absolute links are re-pointed into the prefix.
unpack_debs() {
  shopt -s nullglob
  local debs=("$deb_dir"/*.deb)
  shopt -u nullglob
  if [ ${#debs[@]} -eq 0 ]; then
    echo "gpu_validate: build dependencies are missing and there are no .deb files in $deb_dir" >&2
    echo "  (run tools/fetch_gpu_debs.sh where the Debian registry is reachable, carry .debs/)" >&2
    exit 1
  fi
  rm -rf "$prefix"
  mkdir -p "$prefix"
  local d link target
  for d in "${debs[@]}"; do
    echo "unpacking $(basename "$d")"
    dpkg -x "$d" "$prefix"
  done
  while IFS= read -r link; do
    target=$(readlink "$link")
    if [[ $target == /* && -e $prefix$target ]]; then ln -sfn "$prefix$target" "$link"; fi
  done < <(find "$prefix" -type l)
}

do_build() {
  echo "== GPU"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || echo "(nvidia-smi failed)"
  [ -x /usr/local/cuda/bin/nvcc ] || { echo "gpu_validate: no CUDA toolkit at /usr/local/cuda" >&2; exit 1; }
  /usr/local/cuda/bin/nvcc --version | tail -1
  g++ --version | head -1
  cmake --version | head -1
  for h in cupti.h nccl.h; do
    [ -f "/usr/local/cuda/include/$h" ] || echo "gpu_validate: warning: /usr/local/cuda/include/$h not found" >&2
  done

  echo "== dependencies"
  have_header() { echo "#include <$1>" | g++ -std=c++20 -x c++ -fsyntax-only - 2>/dev/null; }
  local missing=${MOETRACE_FORCE_DEBS:-0} h
  for h in sqlite3.h zlib.h fmt/format.h nlohmann/json.hpp simdjson.h CLI/CLI.hpp gtest/gtest.h; do
    have_header "$h" || { echo "missing: $h"; missing=1; }
  done
  mkdir -p "$build"
  : >"$env_file"
  local cmake_prefix=""
  if [ "$missing" = 1 ]; then
    unpack_debs
    cmake_prefix="$prefix/usr"
    # The build finds the libraries through CMAKE_PREFIX_PATH and the test
    # binaries through their build RPATH; LD_LIBRARY_PATH is set for the
    # test stage only (deps_libs), so that the toolchain's own programs keep
    # the system's (newer) libz and libsqlite3.
    cat >"$env_file" <<EOF
export CPATH="$prefix/usr/include\${CPATH:+:\$CPATH}"
export LIBRARY_PATH="$prefix/usr/lib/$arch_dir\${LIBRARY_PATH:+:\$LIBRARY_PATH}"
deps_libs="$prefix/usr/lib/$arch_dir:$prefix/lib/$arch_dir"
EOF
  fi
  # shellcheck disable=SC1090
  . "$env_file"

  echo "== configure"
  cmake -S . -B "$build" -G Ninja \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DMOETRACE_CUDA=ON -DMOETRACE_GUI=OFF -DMOETRACE_BENCH=OFF \
    -DMOETRACE_WERROR="${MOETRACE_WERROR:-OFF}" \
    -DMOETRACE_CUDA_ARCHITECTURES="${MOETRACE_CUDA_ARCHITECTURES:-90}" \
    ${cmake_prefix:+-DCMAKE_PREFIX_PATH="$cmake_prefix"}

  echo "== build"
  local t0=$SECONDS
  cmake --build "$build" -j "$jobs" --target cuda_gpu_tests cuda_probe_tests cuda_host_tests cupti_convert_tests moetrace
  echo "gpu_validate: built in $((SECONDS - t0)) s"
}

do_test() {
  [ -f "$env_file" ] || { echo "gpu_validate: no build in $build (run: tools/gpu_validate.sh build)" >&2; exit 1; }
  # shellcheck disable=SC1090
  . "$env_file"
  if [ -n "${deps_libs:-}" ]; then export LD_LIBRARY_PATH="$deps_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; fi
  echo "== tests"
  local status=0 t
  # The CPU-side logic of the GPU path, then the tests that need the GPU.
  for t in cuda_host_tests cupti_convert_tests cuda_probe_tests; do
    "$build/bin/$t" --gtest_brief=1 || status=1
  done
  local log=$build/gpu_tests.log
  ctest --test-dir "$build" -L gpu --output-on-failure --timeout "${GPU_TEST_TIMEOUT:-240}" -V >"$log" 2>&1 || status=1
  tail -n 60 "$log"
  # End to end: a small PipeMoE through `moetrace run --backend cuda`, then its trace.
  local smoke=$build/gpu_smoke.db report=$build/gpu_smoke_report.txt
  if timeout 180 "$build/bin/moetrace" run --backend cuda --variant pipemoe --ranks 4 --experts 8 --layers 2 \
       --iterations 2 --tokens 512 -r 2 -o "$smoke"; then
    "$build/bin/moetrace" info "$smoke" || status=1
    # To a file first: `report | head` would end report with SIGPIPE, which
    # pipefail counts as a failure.
    if "$build/bin/moetrace" report "$smoke" >"$report"; then
      head -n 40 "$report"
    else
      status=1
    fi
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
  if [ $status = 0 ]; then echo "gpu_validate: all passed"; else echo "gpu_validate: FAILED" >&2; fi
  return $status
}

case $stage in
  build) do_build ;;
  test) do_test ;;
  all)
    do_build  # (not `do_build && do_test`: bash ignores set -e inside a function run as part of &&)
    do_test
    ;;
esac
