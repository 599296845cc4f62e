#!/usr/bin/env bash
# Whether two builds of moetrace give the same reports: `report` (text and
# JSON) and `replay --format json` of every real trace we have
# (../shared/data, tests/data/gpu) with each binary, compared byte for byte.
# For changes meant to change no behaviour (moves, splits, one home for a
# concept written twice): build the commit before and after, then
#   bash bench/same_reports.sh OLD/bin/moetrace NEW/bin/moetrace
# Exit status 1 where any output differs (the differing traces are listed,
# with the first lines of the difference).
set -euo pipefail
cd "$(dirname "$0")/.."
old=${1:?old moetrace binary}
new=${2:?new moetrace binary}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source bench/real_traces.sh
real_traces "$work"
runs=("report" "report --format json" "replay --format json")
same=0
differ=0
for f in "${traces[@]}"; do
  for cmd in "${runs[@]}"; do
    # shellcheck disable=SC2086  # cmd holds a command and its flags
    "$old" $cmd "$f" > "$work/old.out" 2>&1 || true
    # shellcheck disable=SC2086
    "$new" $cmd "$f" > "$work/new.out" 2>&1 || true
    if cmp -s "$work/old.out" "$work/new.out"; then
      same=$((same + 1))
    else
      differ=$((differ + 1))
      echo "differs: moetrace $cmd $(basename "$f")"
      diff "$work/old.out" "$work/new.out" | head -6 | sed 's/^/    /' || true
    fi
  done
done
echo "same_reports: $same identical, $differ different (${#traces[@]} traces x ${#runs[@]} commands)"
[ "$differ" -eq 0 ]
