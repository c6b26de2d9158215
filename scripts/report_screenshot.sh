#!/usr/bin/env bash
# The screenshot of `pplan report` in docs/report.md, taken from the real page: builds pplan,
# searches the default question (1T GPT on 3072 A100s), writes the plan, its search results and
# the report, and opens the page in headless Chromium (offline: no network is used or needed).
#
#   scripts/report_screenshot.sh [OUT.png]    (default docs/img/report.png)
#
# Needs Chromium (Debian: apt-get install -y chromium, /usr/bin/chromium). Run from anywhere.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$root/docs/img/report.png}"
chromium="${CHROMIUM:-$(command -v chromium || command -v chromium-browser || true)}"
if [ -z "$chromium" ]; then
  echo "report_screenshot.sh: no chromium found (apt-get install -y chromium, or set CHROMIUM)" >&2
  exit 2
fi
cd "$root"
cargo build --release --quiet
pplan="$root/target/release/pplan"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# In the work folder, so that the page names the files as a user would have typed them.
(
  cd "$work"
  "$pplan" search --gpus 3072 --output best.json --format json > search.json
  "$pplan" report --plan best.json --search search.json --tokens 450B --gpu-hour-price 2 \
    --output report.html
)
profile="$(mktemp -d)"
sandbox=()
if [ "$(id -u)" = 0 ]; then sandbox=(--no-sandbox); fi
"$chromium" --headless "${sandbox[@]}" --disable-gpu --disable-quic --no-first-run \
  --disable-background-networking --disable-component-update --disable-sync \
  --hide-scrollbars --user-data-dir="$profile" --window-size=1400,2000 \
  --screenshot="$out" "file://$work/report.html" 2> "$work/chromium.log" || {
  cat "$work/chromium.log" >&2
  exit 1
}
rm -rf "$profile"
echo "wrote $out"
