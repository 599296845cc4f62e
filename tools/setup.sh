#!/usr/bin/env bash
# Installs the Debian 12 packages moetrace needs, where they are missing:
#   bash tools/setup.sh              # build and test (tools/main.sh, tools/test.sh)
#   bash tools/setup.sh sanitizers   # and clang for the fuzz stage (tools/sanitize.sh)
# The CUDA 13 toolkit (nvcc, CUPTI, NCCL, cuBLAS) is expected under
# /usr/local/cuda; it is not a Debian package.
set -euo pipefail

packages=(
  cmake ninja-build g++ pkg-config ccache
  libsqlite3-dev sqlite3 zlib1g-dev
  libfmt-dev nlohmann-json3-dev libcli11-dev libsimdjson-dev libisal-dev
  libgtest-dev libgmock-dev libvalijson-dev
  qt6-base-dev
  python3
  # the Python module (python/): pybind11's CMake files, Python's headers, and
  # what its DataFrames need
  pybind11-dev python3-dev python3-numpy python3-pandas
)
case ${1:-} in
  "") ;;
  # libFuzzer and clang's sanitizer runtimes (the fuzz preset, tools/fuzz.sh);
  # gcc's ASan, UBSan and TSan runtimes come with g++.
  sanitizers) packages+=(clang libclang-rt-14-dev) ;;
  *) echo "usage: setup.sh [sanitizers]" >&2; exit 2 ;;
esac

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "moetrace setup: installing ${missing[*]}" >&2
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ ! -x /usr/local/cuda/bin/nvcc ]; then
  echo "moetrace setup: no CUDA toolkit at /usr/local/cuda; use the 'no-cuda' preset" >&2
fi
