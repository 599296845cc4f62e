#!/usr/bin/env bash
# Downloads (no install, no root) the Debian 12 packages tools/gpu_validate.sh
# needs on a lent GPU machine, which has CUDA 13, cmake and ninja but no
# Debian registry. Run it where the registry is reachable; the .deb files go
# to .debs/ (git-ignored), which the device tool carries: run(carry=[".debs"]).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-.debs}
mkdir -p "$dir"
cd "$dir"
# -dev packages and the runtime libraries their .so links point at.
apt-get download \
  libsqlite3-dev libsqlite3-0 \
  libfmt-dev libfmt9 \
  nlohmann-json3-dev \
  libcli11-dev \
  libsimdjson-dev libsimdjson14 \
  libisal-dev libisal2 \
  libgtest-dev libgmock-dev \
  zlib1g-dev zlib1g
ls -l
