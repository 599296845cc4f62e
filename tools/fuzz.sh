#!/usr/bin/env bash
# libFuzzer targets of moetrace's readers (`*_fuzzer.cc` beside the code they
# test; built by the `fuzz` preset with ASan and UBSan, or by any preset with
# MOETRACE_FUZZ on: MOETRACE_FUZZ_PRESET=ci-asan uses the tree of the
# sanitizer tests, whose flags are the same, as tools/sanitize.sh does).
#
#   bash tools/fuzz.sh build                 # configure and build the fuzz preset
#   bash tools/fuzz.sh corpus                # seed corpora under build/<preset>/corpus/<target>
#   bash tools/fuzz.sh run TARGET SECONDS [libFuzzer flags...]
#   bash tools/fuzz.sh all SECONDS           # build, corpus, regressions, every target for SECONDS
#   bash tools/fuzz.sh list                  # the targets
#
# Seeds: the small hand-made inputs committed under tests/fuzz/corpus/<target>,
# traces and configurations written by this build's `moetrace` (synth, run,
# fit, import), the hand-made Nsight Systems export of the importer tests
# (tests/data/nsys/*.sql) and, where ../shared/data is present, its
# exports and reduced copies of its PyTorch-profiler traces. Inputs that once
# crashed a target are kept under tests/fuzz/regressions/<target> and replayed
# first. A finding is written to build/<preset>/artifacts/<target>/ and fails the
# run (exit status 1).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
preset=${MOETRACE_FUZZ_PRESET:-fuzz}
build=$root/build/$preset
shared=${MOETRACE_SHARED_DATA:-$root/../shared/data}/external

targets=(kineto_importer json_splitter nsys_importer nvtx_payload trace_loader moe_rules annotation run_spec cost_model)

# Per target: the largest input libFuzzer makes (database files need room).
max_len() {
  case $1 in
    nsys_importer|trace_loader) echo 262144 ;;
    kineto_importer) echo 131072 ;;
    moe_rules|run_spec|cost_model) echo 8192 ;;
    *) echo 4096 ;;
  esac
}

# Options besides max_len: rss_limit_mb leaves room for ASan's shadow; a run
# that allocates more than 2 GB for one input is a finding. Leak checking
# stays on (-detect_leaks=1 is the default).
fuzz_flags() {
  echo "-max_len=$(max_len "$1") -rss_limit_mb=3072 -timeout=30 -print_final_stats=1"
}

cmd_build() {
  cmake --preset "$preset" >/dev/null
  cmake --build "$build" --target fuzzers moetrace
}

# A trace database, shrunk to 1 KiB pages so that mutations land in rows
# rather than in empty page space.
shrink_db() {
  sqlite3 "$1" "PRAGMA journal_mode=DELETE; PRAGMA page_size=1024; VACUUM;" >/dev/null
}

cmd_corpus() {
  local cli=$build/bin/moetrace tmp
  [ -x "$cli" ] || { echo "fuzz.sh: build first ($cli missing)" >&2; exit 1; }
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' RETURN
  for t in "${targets[@]}"; do
    mkdir -p "$build/corpus/$t"
    cp "$root/tests/fuzz/corpus/$t/"* "$build/corpus/$t/" 2>/dev/null || true
  done

  # Nsight Systems: the importer tests' hand-made export, and the shared ones.
  cat "$root/tests/data/nsys/minimal_export.sql" "$root/tests/data/nsys/nccl_payloads.sql" | sqlite3 "$tmp/minimal.sqlite"
  shrink_db "$tmp/minimal.sqlite"
  cp "$tmp/minimal.sqlite" "$build/corpus/nsys_importer/hand-minimal.sqlite"
  for f in "$shared"/nsys/*.sqlite; do
    [ -f "$f" ] || continue
    # Exports over max_len would only be truncated; keep the small ones.
    [ "$(stat -c %s "$f")" -le "$(max_len nsys_importer)" ] || continue
    cp "$f" "$tmp/x.sqlite" && chmod u+w "$tmp/x.sqlite" && shrink_db "$tmp/x.sqlite"
    cp "$tmp/x.sqlite" "$build/corpus/nsys_importer/shared-$(basename "$f")"
  done

  # Kineto: the first events of each category of the shared traces, plain and
  # gzipped (the importer reads both).
  for f in "$shared"/kineto/*.json.gz; do
    [ -f "$f" ] || continue
    local base
    base=$(basename "$f" .json.gz)
    python3 - "$f" "$build/corpus/kineto_importer/shared-$base.json" <<'PY'
import collections, gzip, json, sys
doc = json.load(gzip.open(sys.argv[1]))
seen = collections.Counter()
events = []
for e in doc.get("traceEvents", []):
    cat = e.get("cat") or e.get("ph")
    if seen[cat] < 12:
        seen[cat] += 1
        events.append(e)
doc["traceEvents"] = events
open(sys.argv[2], "w").write(json.dumps(doc))
PY
    gzip -9 -c "$build/corpus/kineto_importer/shared-$base.json" > "$build/corpus/kineto_importer/shared-$base.json.gz"
  done
  for f in "$root/tests/fuzz/corpus/kineto_importer/"*.json; do
    gzip -9 -c "$f" > "$build/corpus/kineto_importer/$(basename "$f").gz"
    # The splitter's target: a byte choosing the read size (7), then the JSON.
    { printf '\007'; cat "$f"; } > "$build/corpus/json_splitter/$(basename "$f")"
  done

  # moetrace traces: synthetic, simulated, imported; the run's configuration
  # and a fitted cost model.
  "$cli" synth "$tmp/synth.db" --ranks 2 --layers 1 --iterations 1 --chunks 2 --kernels-per-op 1 >/dev/null 2>&1
  "$cli" run --variant pipemoe --ranks 2 --iterations 1 -o "$tmp/sim.db" >/dev/null 2>&1
  "$cli" import "$tmp/minimal.sqlite" -o "$tmp/nsys.db" >/dev/null 2>&1
  "$cli" import "$root/tests/fuzz/corpus/kineto_importer/small.json" -o "$tmp/kineto.db" >/dev/null 2>&1
  for db in synth sim nsys kineto; do
    shrink_db "$tmp/$db.db"
    cp "$tmp/$db.db" "$build/corpus/trace_loader/$db.db"
  done
  sqlite3 "$tmp/sim.db" "SELECT config_json FROM run" > "$build/corpus/run_spec/sim-pipemoe.json"
  "$cli" fit "$tmp/sim.db" -o "$build/corpus/cost_model/fitted.json" >/dev/null 2>&1
  cp "$root/analyzer/data/moe_rules.json" "$build/corpus/moe_rules/builtin.json"
  python3 - "$root/tests/data/annotation_names.json" "$build/corpus/annotation" <<'PY'
import json, sys, hashlib
def names(x):
    if isinstance(x, str):
        yield x
    elif isinstance(x, list):
        for y in x: yield from names(y)
    elif isinstance(x, dict):
        for y in x.values(): yield from names(y)
for n in set(names(json.load(open(sys.argv[1])))):
    # The target reads a byte choosing the NVTX domain (1: "moetrace") before the name.
    flag = b"\x01" if not n.startswith("moetrace:") else b"\x00"
    open(f"{sys.argv[2]}/vec-{hashlib.sha1(n.encode()).hexdigest()[:12]}", "wb").write(flag + n.encode())
PY
  for t in "${targets[@]}"; do
    echo "corpus $t: $(find "$build/corpus/$t" -type f | wc -l) files, $(du -sk "$build/corpus/$t" | cut -f1) KiB"
  done
}

# Replays the inputs that once crashed TARGET (they must pass now).
cmd_regressions() {
  local t=$1 dir=$root/tests/fuzz/regressions/$1
  [ -d "$dir" ] && [ -n "$(ls -A "$dir")" ] || return 0
  local log=$build/artifacts/$t-regressions.log
  mkdir -p "$build/artifacts"
  if ! "$build/fuzz/${t}_fuzzer" $(fuzz_flags "$t") "$dir"/* >"$log" 2>&1; then
    tail -n 60 "$log" >&2
    echo "fuzz.sh: $t crashes again on an input of tests/fuzz/regressions/$t" >&2
    exit 1
  fi
  echo "regressions $t: $(ls "$dir" | wc -l) inputs pass"
}

cmd_run() {
  local t=$1 seconds=$2
  shift 2
  local bin=$build/fuzz/${t}_fuzzer
  [ -x "$bin" ] || { echo "fuzz.sh: no $bin (build first)" >&2; exit 1; }
  mkdir -p "$build/corpus/$t" "$build/artifacts/$t"
  echo "== $t: ${seconds}s on $(find "$build/corpus/$t" -type f | wc -l) inputs" >&2
  "$bin" $(fuzz_flags "$t") -max_total_time="$seconds" \
    -artifact_prefix="$build/artifacts/$t/" "$@" "$build/corpus/$t"
}

case ${1:-} in
  build) cmd_build ;;
  corpus) cmd_corpus ;;
  run) [ $# -ge 3 ] || { echo "usage: fuzz.sh run TARGET SECONDS [flags]" >&2; exit 2; }; cmd_run "${@:2}" ;;
  list) printf '%s\n' "${targets[@]}" ;;
  all)
    seconds=${2:-30}
    cmd_build
    cmd_corpus
    for t in "${targets[@]}"; do cmd_regressions "$t"; done
    for t in "${targets[@]}"; do
      log=$build/artifacts/$t.log
      mkdir -p "$build/artifacts"
      if ! cmd_run "$t" "$seconds" >"$log" 2>&1; then
        tail -n 60 "$log" >&2
        echo "fuzz.sh: $t found a crash ($build/artifacts/$t)" >&2
        exit 1
      fi
      grep -E '^== |DONE|stat::number_of_executed_units|stat::peak_rss_mb' "$log" || true
    done
    ;;
  *) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
