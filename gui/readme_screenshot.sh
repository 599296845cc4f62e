#!/usr/bin/env bash
# Renders the README's screenshot of moetrace-gui headless:
#   gui/readme_screenshot.sh [build-dir] [out.png]
# (a synthetic 4-rank, 4-layer, r = 4 trace; layer 1 outlined, a dispatch
# all-to-all selected).
set -euo pipefail
build=${1:-build/no-cuda}
out=${2:-moetrace-gui.png}
demo=$(mktemp --suffix=.db)
trap 'rm -f "$demo"' EXIT
"$build/bin/moetrace" synth "$demo" --ranks 4 --layers 4 --chunks 4 >/dev/null
"$build/bin/moetrace-gui" "$demo" --screenshot "$out" --layer 1 --find dispatch
echo "wrote $out"
