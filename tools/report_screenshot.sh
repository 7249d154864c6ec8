#!/usr/bin/env bash
# Regenerate docs/images/cert-cpu-full.png: the CPU plugin's certification
# at full level, drawn by `keel conform --html`, checked and photographed
# in headless Chromium (tools/check_report.py). Run from the source tree
# after `bash tools/main.sh` (or any build in build/):
#     bash tools/report_screenshot.sh [BUILD_DIR]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
KEEL_PLUGIN_PATH="$build/plugins/cpu" KEEL_PLUGIN_DEFAULT_PATHS=0 \
  "$build/core/cli/keel" conform --plugin cpu --level full \
  --report "$out/cert.json" --html "$out/cert.html" > "$out/conform.log" || {
    tail -20 "$out/conform.log"
    exit 1
  }
"$root/.venv/bin/python" "$root/tools/check_report.py" "$out/cert.html" \
  --cert "$out/cert.json" --width 1280 --max-height 2200 \
  --screenshot "$root/docs/images/cert-cpu-full.png"
echo "wrote docs/images/cert-cpu-full.png"
