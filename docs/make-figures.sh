#!/usr/bin/env bash
# Regenerates every Gantt chart in docs/img with pplan itself. Run from anywhere:
#   bash docs/make-figures.sh
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
pplan=target/release/pplan
out=docs/img
mkdir -p "$out"
common=(--forward 1 --backward 2 --p2p 0.05)
$pplan simulate --schedule gpipe --stages 4 --microbatches 8 "${common[@]}" --gantt $out/gpipe-p4-m8.svg >/dev/null
$pplan simulate --schedule 1f1b --stages 4 --microbatches 8 "${common[@]}" --gantt $out/1f1b-p4-m8.svg >/dev/null
$pplan simulate --schedule interleaved-1f1b --stages 4 --microbatches 8 --chunks 2 "${common[@]}" --gantt $out/interleaved-1f1b-p4-m8-v2.svg >/dev/null
$pplan simulate --schedule pipedream --stages 4 --microbatches 8 --steps 2 "${common[@]}" --gantt $out/pipedream-p4-m8-steps2.svg >/dev/null
$pplan simulate --schedule 1f1b --stages 8 --microbatches 32 "${common[@]}" --gantt $out/1f1b-p8-m32.png >/dev/null
$pplan simulate --schedule interleaved-1f1b --stages 8 --microbatches 32 --chunks 4 "${common[@]}" --gantt $out/interleaved-1f1b-p8-m32-v4.png >/dev/null
echo "wrote $(ls $out | wc -l) figures to $out"
