#!/usr/bin/env bash
# The plans of the GPU validation (benches/gpu_first_light.sh): the GPT-like model
# examples/models/gpt-0.9b-gpu.json (16 layers, hidden 2048) on p = 2 and 4 pipeline devices,
# 8 micro-batches of 1 sequence, GPipe, 1F1B, interleaved 1F1B (v = 2) and ZB-H1.
# The plan holds the schedule, model and layout; the run does not read its predicted times.
# Usage: benches/gpu_plans.sh PPLAN_BIN OUT_DIR
set -euo pipefail
BIN=$1 OUT=$2
mkdir -p "$OUT"
HERE=$(cd "$(dirname "$0")/.." && pwd)
for P in 2 4; do
  for S in gpipe 1f1b interleaved-1f1b zb-h1; do
    V=1
    [ "$S" = interleaved-1f1b ] && V=2
    "$BIN" predict --model "$HERE/examples/models/gpt-0.9b-gpu.json" --hardware h200 \
      --gpus "$P" --tp 1 --pp "$P" --dp 1 --global-batch 8 --micro-batch 1 --schedule "$S" \
      --chunks "$V" --recompute none --output "$OUT/p$P-$S.plan.json" > /dev/null
  done
done
