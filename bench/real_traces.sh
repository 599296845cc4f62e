# Sourced by the benchmarks that run over every real trace we have: fills
# the array `traces` with ../shared/data's Kineto and Nsight Systems traces,
# the PyTorch peer trace and the GPU fixtures of tests/data/gpu (inflated
# into the folder $1). Run from the repository root.
real_traces() {
  local work=$1 data=../shared/data/external f out
  [ -d "$data" ] || { echo "$data is missing" >&2; return 2; }
  traces=()
  for f in "$data"/kineto/*.json.gz "$data"/nsys/*.sqlite tests/data/gpu/torch_moe_peer.json.gz; do traces+=("$f"); done
  for f in tests/data/gpu/*.db.gz tests/data/gpu/pipemoe_sweep/*.db.gz; do
    out="$work/$(basename "${f%.gz}")"
    gzip -dc "$f" > "$out"
    traces+=("$out")
  done
}
