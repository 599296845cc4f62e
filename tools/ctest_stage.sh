#!/usr/bin/env bash
# `ctest ARGS...` for one CI stage, then what it ran: the count of tests, of
# those run and of those skipped, with the skipped tests named (a skip is
# not a pass: RELIABILITY.md records these counts per stage). Exits with
# ctest's status.
#   tools/ctest_stage.sh STAGE ARGS...
set -uo pipefail
stage=$1
shift
log=$(mktemp)
trap 'rm -f "$log"' EXIT
ctest "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
total=$(sed -n 's/.* tests failed out of \([0-9][0-9]*\).*/\1/p' "$log" | tail -n 1)
skipped=$(grep -c '(Skipped)$' "$log")
echo "stage $stage: ${total:-0} tests, $(( ${total:-0} - skipped )) run, $skipped skipped"
grep '(Skipped)$' "$log" | sed 's/^[[:space:]]*[0-9]* - /  skipped: /; s/ (Skipped)$//'
exit "$rc"
