#!/usr/bin/env bash
# Builds moetrace with the CUDA executor and the CUPTI collector and runs the
# tests labelled `gpu` (plus the CPU-side CUDA tests) on a machine with a GPU.
#
# Made for the lent GPU machines (H100 / H200, CUDA 13 toolkit with NCCL,
# cmake, ninja, no Debian registry): the build dependencies travel as .deb
# files (tools/fetch_gpu_debs.sh downloads them into .debs/ elsewhere) and are
# unpacked here with `dpkg -x` into a private prefix; nothing is installed.
# Packages: libsqlite3-dev (+ libsqlite3-0), libfmt-dev (+ libfmt9),
# nlohmann-json3-dev, libsimdjson-dev (+ libsimdjson14), libisal-dev (+ libisal2), libcli11-dev,
# libgtest-dev (+ libgmock-dev), zlib1g-dev (+ zlib1g). Qt is not needed
# (-DMOETRACE_GUI=OFF). Where every header is already there, the system
# copies are used.
#
#   tools/gpu_validate.sh build [DEB_DIR]   configure and build (DEB_DIR default: .debs)
#   tools/gpu_validate.sh test              CPU-side CUDA tests, `ctest -L gpu`, a smoke run
#   tools/gpu_validate.sh all [DEB_DIR]     both, one after the other
#   tools/gpu_validate.sh bundle [DIR]      (on a machine without a GPU) build, then put
#                                           the stripped binaries and the libraries they
#                                           need from outside CUDA and glibc into DIR
#                                           (default .gpu, about 15 MB): carried to the GPU
#                                           machine, the build costs no device time there
#   tools/gpu_validate.sh device            (on the GPU machine) everything that needs the
#                                           GPU in one go, from the bundle in .gpu (where
#                                           it does not load there, or there is none,
#                                           from a build there: carry .debs as well):
#                                           the gpu tests,
#                                           compute-sanitizer memcheck / racecheck /
#                                           synccheck on the every-variant test, a trace of
#                                           every variant (two more in CUDA graph mode),
#                                           tools/gpu_bench.py; results
#                                           and logs in $OUT (default $build/out)
#
# `build` and `test` are separate so that each fits in one command of a
# lent machine (10 minutes a command): `test` reuses the build directory and
# the environment `build` left in it ($build/gpu_env.sh). `device` keeps to
# DEVICE_BUDGET_S seconds (default 540) by cutting the later stages short;
# MOETRACE_GPU_BUNDLE names the bundle (default .gpu); DEVICE_STAGES picks
# stages for a rerun (default
# "unit,sanitizers,gpu,traces,bench"; SANITIZER_TOOLS which of memcheck,
# racecheck, synccheck run, SANITIZER_TIMEOUT_S each one's cap (default 200);
# GPU_BENCH_PARTS the parts of the last;
# GPU_BENCH_KEEP_WORK=1 brings the measurements' traces back in work.tgz;
# GPU_BENCH_ARGS more options of tools/gpu_bench.py, e.g. "--overhead-runs 6").
# Environment: MOETRACE_GPU_BUILD (build dir, default build/gpu),
# MOETRACE_CUDA_ARCHITECTURES (default 90), JOBS (default: all cores),
# MOETRACE_WERROR (default OFF: the device machine's compiler is not CI's,
# and a warning new to it should not cost the lease; CI builds with it ON),
# GPU_TEST_TIMEOUT (seconds per gpu test, default 240).
set -euo pipefail
cd "$(dirname "$0")/.."

stage=all
case "${1:-}" in
  build | test | all | bundle | device) stage=$1; shift ;;
esac
if [ "$stage" = bundle ]; then
  bundle_dir=${1:-.gpu}
  deb_dir=.debs
else
  deb_dir=${1:-.debs}
fi
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
  for h in sqlite3.h zlib.h fmt/format.h nlohmann/json.hpp simdjson.h isa-l/igzip_lib.h CLI/CLI.hpp gtest/gtest.h; do
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

# The binaries the GPU machine needs, and the bundle's layout (bin/, lib/).
bundle_bins=(moetrace libmoetrace_cuda_backend.so cuda_gpu_tests cuda_host_tests cuda_probe_tests cupti_convert_tests)

do_bundle() {
  local dest=${1:-.gpu} b lib
  [[ $dest == /* ]] || dest=$PWD/$dest
  if [ -f "$build/CMakeCache.txt" ]; then
    # An existing build (this script's, or any with MOETRACE_CUDA=ON): brought up to date, not reconfigured.
    grep -q '^MOETRACE_CUDA:BOOL=ON' "$build/CMakeCache.txt" || { echo "gpu_validate: $build is not a CUDA build" >&2; exit 1; }
    # shellcheck disable=SC1090
    [ ! -f "$env_file" ] || . "$env_file"
    cmake --build "$build" -j "$jobs" --target cuda_gpu_tests cuda_probe_tests cuda_host_tests cupti_convert_tests moetrace
  else
    do_build
  fi
  rm -rf "$dest"
  mkdir -p "$dest/bin" "$dest/lib"
  for b in "${bundle_bins[@]}"; do
    # Debug info off (most of the size); symbols stay for the sanitizers' stacks.
    strip --strip-debug -o "$dest/bin/$b" "$build/bin/$b"
  done
  # Every shared library they load from outside glibc, the compiler's runtime
  # and CUDA: the GPU machine is another distribution without these packages.
  while IFS= read -r lib; do
    cp -L "$lib" "$dest/lib/"
  done < <(for b in "${bundle_bins[@]}"; do ldd "$build/bin/$b"; done |
             awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
             grep -Ev '/(libc|libm|libdl|librt|libpthread|libutil|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so' |
             grep -Ev '^/usr/local/cuda' || true)
  {
    echo "moetrace $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet 2>/dev/null || echo ' (modified tree)')"
    echo "built $(date -u +%Y-%m-%dT%H:%MZ) on $(. /etc/os-release && echo "$PRETTY_NAME"), $(g++ --version | head -1)"
    echo "$(/usr/local/cuda/bin/nvcc --version | tail -1), CUDA architectures $(sed -n 's/^MOETRACE_CUDA_ARCHITECTURES:STRING=//p' "$build/CMakeCache.txt")"
    echo "glibc $(ldd --version | head -1 | awk '{print $NF}'), libstdc++ up to $(strings "$(g++ -print-file-name=libstdc++.so.6)" | grep -E '^GLIBCXX_[0-9.]+$' | sort -V | tail -1)"
    (cd "$dest" && find bin lib -type f -printf '%s\t%p\n' | sort -k2)
  } >"$dest/MANIFEST"
  cat "$dest/MANIFEST"
  du -sh "$dest"
}

do_device() {
  local out=${OUT:-$build/out} bindir=""
  local budget=${DEVICE_BUDGET_S:-540} t_start=$SECONDS
  mkdir -p "$out"
  local logs=$out/logs traces=$out/traces
  mkdir -p "$logs" "$traces"
  # Seconds left of the budget, at least 1 (`timeout 0` would mean no limit).
  left() { local l=$((budget - (SECONDS - t_start))); echo $((l > 0 ? l : 1)); }
  local cuda_ld=/usr/local/cuda/lib64:/usr/local/cuda/lib:/usr/local/cuda/targets/x86_64-linux/lib
  cuda_ld=$cuda_ld:/usr/local/cuda/extras/CUPTI/lib64
  # CUDA's libraries as PyTorch's wheels carry them (nvidia/<lib>/lib), where the toolkit lacks one.
  local wheels
  wheels=$(python3 -c 'import nvidia, os; r = nvidia.__path__[0]; print(":".join(os.path.join(r, d, "lib") for d in sorted(os.listdir(r)) if os.path.isdir(os.path.join(r, d, "lib"))))' 2>/dev/null || true)
  # What the binaries in $1 cannot load with library path $2 ("" where all loads).
  unresolved() {
    local b
    for b in "$1"/*; do LD_LIBRARY_PATH=$2 ldd "$b" 2>&1 | grep 'not found' || true; done | sort -u
  }
  local ours_ld="" missing
  local bundle=${MOETRACE_GPU_BUNDLE:-.gpu}
  [[ $bundle == /* ]] || bundle=$PWD/$bundle
  if [ -x "$bundle/bin/moetrace" ]; then
    bindir=$bundle/bin
    # Our binaries see the bundle's libraries; nothing else does (python's
    # own sqlite3 and zlib must stay the system's).
    ours_ld=$bundle/lib:$cuda_ld
    missing=$(unresolved "$bindir" "$ours_ld")
    [ -z "$missing" ] || { ours_ld=$ours_ld${wheels:+:$wheels}; missing=$(unresolved "$bindir" "$ours_ld"); }
    if [ -n "$missing" ]; then
      # Built on another system than this one: build here instead (needs
      # the .debs of tools/fetch_gpu_debs.sh where headers are missing).
      echo "gpu_validate: the bundle in $bundle does not load here; building instead:" >&2
      echo "$missing" >&2
      bindir=""
    fi
  fi
  if [ -z "$bindir" ] || [ ! -x "$bindir/moetrace" ]; then
    if [ ! -x "$build/bin/moetrace" ] || [ ! -f "$env_file" ]; then
      local t=$SECONDS
      do_build >"$logs/build.log" 2>&1 || { tail -n 30 "$logs/build.log" >&2; exit 1; }
      echo "gpu_validate: built in $((SECONDS - t)) s" >&2
    fi
    bindir=$build/bin
    # shellcheck disable=SC1090
    . "$env_file"
    ours_ld=${deps_libs:+$deps_libs:}$cuda_ld
    missing=$(unresolved "$bindir" "$ours_ld")
    [ -z "$missing" ] || { ours_ld=$ours_ld${wheels:+:$wheels}; missing=$(unresolved "$bindir" "$ours_ld"); }
    [ -z "$missing" ] || { echo "gpu_validate: libraries not found for $bindir:" >&2; echo "$missing" >&2; exit 1; }
  fi
  # One entry point for every call of our programs (also tools/gpu_bench.py's).
  local moetrace=$out/moetrace.sh
  printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$ours_ld" "$bindir/moetrace" >"$moetrace"
  chmod +x "$moetrace"
  ours() { LD_LIBRARY_PATH=$ours_ld "$@"; }

  local summary=$out/summary.md status=0
  stage_result() {  # name, rc, seconds
    local verdict=passed
    [ "$2" = 0 ] || { verdict="FAILED (exit $2)"; status=1; }
    echo "| $1 | $verdict | $3 s |" >>"$summary"
    echo "gpu_validate: $1: $verdict ($3 s)" >&2
  }
  {
    echo "# moetrace on the GPU"
    echo
    echo '```'
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1 || true
    /usr/local/cuda/bin/nvcc --version 2>&1 | tail -1 || true
    python3 -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda)' 2>&1 | tail -1 || true
    [ -f "$bundle/MANIFEST" ] && head -4 "$bundle/MANIFEST"
    # The checkout's commit here can lag the one the bundle was built from
    # (the MANIFEST above names that); with a build here, it is the tree's.
    echo "checkout $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet 2>/dev/null || echo ' (modified tree)')"
    echo '```'
    echo
    echo "| stage | result | time |"
    echo "|---|---|---|"
  } >"$summary"

  local t rc stages=,${DEVICE_STAGES:-unit,sanitizers,gpu,traces,bench},
  want() { [[ $stages == *,$1,* ]]; }
  # 1. The CPU-side logic of the GPU path.
  t=$SECONDS; rc=0
  want unit && for b in cuda_host_tests cupti_convert_tests cuda_probe_tests; do
    ours "$bindir/$b" --gtest_brief=1 >"$logs/$b.log" 2>&1 || rc=$?
  done
  want unit && stage_result "CPU-side CUDA tests" $rc $((SECONDS - t))

  # 2. compute-sanitizer on the every-variant test (P = 4, both precisions),
  # in the background while the gpu tests and the traces run: correctness
  # only, no timing is taken meanwhile.
  local san_pids=() tool cs=""
  # racecheck's cases, a process each (MOETRACE_TEST_VARIANTS; ppmoe exists at P = 4 only).
  local racecheck_variants=(dpmoe pipemoe_r2 mpipemoe_n3_none mpipemoe_n3_S1 mpipemoe_n3_S2 mpipemoe_n3_S3
                            mpipemoe_n3_S4 pro_prophet_scheduled pro_prophet_unscheduled fastermoe ppmoe_t2_s2_mb4)
  local san_filter='EmulatedRanks/EveryVariant.*/P4:GpuExecutor.PpMoeMatchesTheReference'
  if ! want sanitizers; then :
  elif command -v compute-sanitizer >/dev/null || [ -x /usr/local/cuda/bin/compute-sanitizer ]; then
    cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
    for tool in ${SANITIZER_TOOLS:-memcheck racecheck synccheck}; do
      local filter=$san_filter
      # synccheck: every variant in one precision. racecheck tracks every
      # shared-memory access: at P = 4 it got through one variant of ten in
      # its 200 s on an H200, so it takes P = 2 (the same kernels, every
      # variant, fewer ranks), a process per variant (below).
      [ $tool = memcheck ] || filter='EmulatedRanks/EveryVariant.MatchesTheReferenceInBf16/P4'
      # (rc kept, not left to errexit: a failing test must not lose the verdict.)
      local cap=${SANITIZER_TIMEOUT_S:-200}
      if [ $tool = racecheck ]; then
        # One process per variant: in one process racecheck's host memory
        # passed the machine's 128 GB by the second variant and the kernel's
        # OOM killer ended it (exit 9, no verdict). The worst exit code is the
        # verdict's (99: a hazard); the variants the cap leaves out are named.
        # A variant whose process the OOM killer ends is run again on our
        # kernels only (`--kernel-name kns=moetrace`: a substring of their
        # mangled names, namespace moetrace::cuda::kernels; cuBLAS's then run
        # unchecked), where this compute-sanitizer has that option.
        ( t0=$SECONDS worst=0
          : >"$logs/sanitizer_$tool.log"
          only_ours=()
          if "$cs" --help 2>&1 | grep -q -- '--kernel-name'; then only_ours=(--kernel-name kns=moetrace); fi
          budget() {  # seconds left for the next process, or "" below 10
            local b=$((cap - (SECONDS - t0))) l
            l=$(left); [ "$l" -ge "$b" ] || b=$l
            [ "$b" -lt 10 ] || echo "$b"
          }
          race() {  # variant, P, seconds, compute-sanitizer options...
            local v=$1 p=$2 secs=$3
            shift 3
            MOETRACE_TEST_VARIANTS=$v LD_LIBRARY_PATH=$ours_ld timeout "$secs" \
              "$cs" --tool $tool "$@" --error-exitcode 99 --print-limit 50 "$bindir/cuda_gpu_tests" \
              --gtest_filter="EmulatedRanks/EveryVariant.MatchesTheReferenceInBf16/$p" --gtest_brief=1 \
              >>"$logs/sanitizer_$tool.log" 2>&1
          }
          for v in "${racecheck_variants[@]}"; do
            budget_v=$(budget)
            if [ -z "$budget_v" ]; then echo "racecheck $v: not reached (cap)" >>"$logs/sanitizer_$tool.log"; worst=124; continue; fi
            p=P2; [[ $v != ppmoe* ]] || p=P4
            rc=0
            race "$v" "$p" "$budget_v" || rc=$?
            if { [ $rc = 9 ] || [ $rc = 137 ]; } && [ ${#only_ours[@]} -gt 0 ] && budget_v=$(budget) && [ -n "$budget_v" ]; then
              echo "racecheck $v ($p): exit $rc, killed: out of host memory?; again on our kernels only" \
                >>"$logs/sanitizer_$tool.log"
              rc=0
              race "$v" "$p" "$budget_v" "${only_ours[@]}" || rc=$?
              echo "racecheck $v ($p, our kernels only): exit $rc" >>"$logs/sanitizer_$tool.log"
            else
              echo "racecheck $v ($p): exit $rc" >>"$logs/sanitizer_$tool.log"
            fi
            if [ $rc = 99 ] || { [ $worst != 99 ] && [ $rc != 0 ] && { [ $worst = 0 ] || [ $worst = 1 ]; }; }; then worst=$rc; fi
          done
          echo "$worst $((SECONDS - t0))" >"$logs/sanitizer_$tool.rc" ) &
      else
        ( t0=$SECONDS rc=0
          LD_LIBRARY_PATH=$ours_ld timeout $(( $(left) > cap ? cap : $(left) )) \
            "$cs" --tool $tool --error-exitcode 99 --print-limit 50 \
            "$bindir/cuda_gpu_tests" --gtest_filter="$filter" --gtest_brief=1 >"$logs/sanitizer_$tool.log" 2>&1 || rc=$?
          echo "$rc $((SECONDS - t0))" >"$logs/sanitizer_$tool.rc" ) &
      fi
      san_pids+=($!)
    done
  else
    echo "| compute-sanitizer | not found | - |" >>"$summary"
    status=1
  fi

  # 3. Every gpu test; one skipped for want of a GPU fails the stage.
  if want gpu; then
    t=$SECONDS; rc=0
    ours timeout "$(left)" "$bindir/cuda_gpu_tests" >"$logs/cuda_gpu_tests.log" 2>&1 || rc=$?
    if [ $rc = 0 ] && grep -q "needs a CUDA GPU and driver" "$logs/cuda_gpu_tests.log"; then rc=3; fi
    count() { grep -cE "^\[ *$1 *\] .* \([0-9]+ ms\)\$" "$logs/cuda_gpu_tests.log" || true; }
    stage_result "gpu tests ($(count OK) passed, $(count FAILED) failed, $(count SKIPPED) skipped)" $rc $((SECONDS - t))
  fi

  # 4. A small trace of every variant (tests/data/gpu fixtures), and two in
  # CUDA graph mode, each read back.
  if want traces; then
    t=$SECONDS; rc=0
    local shape=(--backend cuda --ranks 4 --layers 2 --experts 8 --top-k 2 --tokens 512 -q)
    local common=("${shape[@]}" -i 2 --warmup 1)
    local -a runs=(
      "dpmoe:-v dpmoe" "pipemoe:-v pipemoe -r 2" "ppmoe:-v ppmoe"
      "mpipemoe_none:-v mpipemoe -r 2 --strategy none" "mpipemoe_S1:-v mpipemoe -r 2 --strategy S1"
      "mpipemoe_S2:-v mpipemoe -r 2 --strategy S2" "mpipemoe_S3:-v mpipemoe -r 2 --strategy S3"
      "mpipemoe_S4:-v mpipemoe -r 2 --strategy S4" "pro_prophet:-v pro_prophet" "fastermoe:-v fastermoe"
      # CUDA graph mode (one graph per iteration), beside the same runs
      # launched op by op: its reports give each MoE layer's idle share.
      "pipemoe_graph:-v pipemoe -r 2 --cuda-graph" "dpmoe_graph:-v dpmoe --cuda-graph")
    local entry name args
    for entry in "${runs[@]}"; do
      name=${entry%%:*}
      read -r -a args <<<"${entry#*:}"
      # The exact command, for the fixture's record (tests/data/gpu/README.md).
      echo "moetrace run ${common[*]} ${args[*]} -o $name.db" >"$logs/trace_$name.log"
      if timeout "$(left)" "$moetrace" run "${common[@]}" "${args[@]}" -o "$traces/$name.db" >>"$logs/trace_$name.log" 2>&1 &&
         "$moetrace" info "$traces/$name.db" >>"$logs/trace_$name.log" 2>&1 &&
         "$moetrace" report "$traces/$name.db" >"$logs/trace_$name.report.txt" 2>&1; then :; else
        rc=1; echo "trace $name failed" >&2
        # Where the run failed on the GPU: the same run, no warm-up, under
        # memcheck, which names the kernel and the address at fault (without
        # the collector: the sanitizer holds CUPTI).
        if [ -n "${cs:-}" ] && [ "$(left)" -gt 60 ]; then
          LD_LIBRARY_PATH=$ours_ld timeout 90 "$cs" --tool memcheck --print-limit 20 \
            "$bindir/moetrace" run "${shape[@]}" "${args[@]}" -i 2 --warmup 0 --no-trace -o "$traces/${name}_memcheck.db" \
            >"$logs/trace_${name}_memcheck.log" 2>&1 || true
          rm -f "$traces/${name}_memcheck.db" "$traces/$name.db"
          head -n 40 "$logs/trace_${name}_memcheck.log" >&2
        fi
      fi
    done
    local made=("$traces"/*.db)
    [ -e "${made[0]}" ] || made=()
    stage_result "a trace of every variant (${#made[@]} of ${#runs[@]})" $rc $((SECONDS - t))
  fi

  # 5. The sanitizers' verdicts.
  for pid in "${san_pids[@]}"; do wait "$pid" || true; done
  for tool in memcheck racecheck synccheck; do
    if [ ! -f "$logs/sanitizer_$tool.rc" ]; then
      # Started, but its sub-shell ended without a verdict.
      if [ -n "$cs" ] && [[ " ${SANITIZER_TOOLS:-memcheck racecheck synccheck} " == *" $tool "* ]]; then
        stage_result "compute-sanitizer $tool (no verdict)" 2 0
      fi
      continue
    fi
    read -r rc t <"$logs/sanitizer_$tool.rc"
    # The sanitizer's verdict: its own exit code (99) and its summary line. A
    # test that fails on its numbers (exit 1) is the gpu tests stage's
    # failure, not a sanitizer finding; a run cut short (124) has no verdict.
    local said
    said=$(grep -m1 -oE '(ERROR SUMMARY: [0-9]+ errors?|RACECHECK SUMMARY: [0-9]+ hazards? displayed \([0-9]+ errors?)' \
             "$logs/sanitizer_$tool.log" || true)
    if [ $tool = racecheck ]; then
      # A summary per variant's process: the hazards of all of them.
      said="RACECHECK: $(grep -oE 'RACECHECK SUMMARY: [0-9]+ hazard' "$logs/sanitizer_$tool.log" |
                         awk '{n += $3} END {print n + 0}') hazards in all; $(grep -c ': exit 0$' \
                         "$logs/sanitizer_$tool.log" || true) of ${#racecheck_variants[@]} variants ended clean"
      local ours_only
      ours_only=$(grep -c 'our kernels only): exit 0$' "$logs/sanitizer_$tool.log" || true)
      [ "$ours_only" = 0 ] || said="$said ($ours_only of them on our kernels only, cuBLAS's out of host memory)"
    fi
    # A process the kernel's OOM killer ended (exit 9 or 137) has no verdict.
    if [ "$rc" = 9 ] || [ "$rc" = 137 ]; then said="$said; killed: out of host memory?"; fi
    if [ "$rc" = 1 ] && [[ $said =~ (SUMMARY: 0 error|\(0 error|RACECHECK: 0 hazards) ]]; then rc=0; fi
    [ -n "$said" ] || { said='no summary'; [ "$rc" != 0 ] || rc=2; }
    stage_result "compute-sanitizer $tool ($said)" "$rc" "$t"
  done

  # 6. The measurements (nothing else runs on the GPU now).
  t=$SECONDS; rc=0
  if ! want bench; then :
  elif [ "$(left)" -gt 30 ]; then
    PYTHONUNBUFFERED=1 timeout "$(left)" python3 tools/gpu_bench.py --moetrace "$moetrace" --out "$out/bench" \
      ${GPU_BENCH_PARTS:+--parts "$GPU_BENCH_PARTS"} ${GPU_BENCH_KEEP_WORK:+--keep-work} ${GPU_BENCH_ARGS:-} \
      >"$logs/gpu_bench.log" 2>&1 || rc=$?
  else
    rc=124; echo "no time left for the measurements" >"$logs/gpu_bench.log"
  fi
  want bench && stage_result "measurements (tools/gpu_bench.py)" $rc $((SECONDS - t))
  if [ -f "$out/bench/bench.md" ]; then { echo; cat "$out/bench/bench.md"; } >>"$summary"; fi

  # What comes back: at most 8 files (the device tool's limit).
  tar -C "$out" -czf "$out/traces.tgz" traces
  tar -C "$out" --exclude=bench/work -czf "$out/logs.tgz" logs bench 2>/dev/null || tar -C "$out" -czf "$out/logs.tgz" logs
  # The measurements' own traces (GPU_BENCH_KEEP_WORK=1), for reading them again elsewhere.
  # (Not the simulated ones, the overhead runs', the untraced and with-queries reruns' or the peer's
  # JSON: made again here, timed in bench.json or kept above.)
  [ ! -d "$out/bench/work" ] || tar -C "$out/bench" --exclude='*_sim.db' --exclude='*_untraced.db' --exclude='*_queries.db' --exclude='overhead_*' \
    --exclude='torch_moe_peer.json' -czf "$out/work.tgz" work
  [ -f "$out/bench/bench.json" ] && cp "$out/bench/bench.json" "$out/bench.json"
  rm -rf "$traces" "$logs" "$out/bench" "$moetrace"
  echo
  cat "$summary"
  [ $status = 0 ] && echo "gpu_validate: device: all passed" || echo "gpu_validate: device: FAILED" >&2
  return $status
}

case $stage in
  build) do_build ;;
  test) do_test ;;
  bundle) do_bundle "$bundle_dir" ;;
  device) do_device ;;
  all)
    do_build  # (not `do_build && do_test`: bash ignores set -e inside a function run as part of &&)
    do_test
    ;;
esac
