#!/usr/bin/env bash
# Calibration loop on the CPU backend, end to end, with 2 pipeline devices:
#   measure this machine -> predict with the measured profiles -> run the plan -> compare.
# Needs `pplan predict --profile/--output/--trace` and `pplan validate` (issue #5 contract in
# DESIGN.md); on a branch without them the script stops at that step with pplan's message.
# Usage: benches/cpu_validate.sh [MODEL] [MICROBATCHES] [STEPS]
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-examples/models/tiny-gpt-cpu.json}
M=${2:-8}
STEPS=${3:-5}
OUT=${OUT:-target/cpu-validate}
mkdir -p "$OUT"
cargo build --release -p pplan -p pplan-exec
BIN=target/release

echo "== 1. profile (one thread per device)"
"$BIN/pplan-exec" profile --model "$MODEL" --micro-batch 1 --backend cpu \
  --out-profile "$OUT/layers.json" --out-hardware "$OUT/hw.json" --repeats 5 --devices 2

echo "== 2. predict a 1F1B plan on 2 pipeline devices from the measured profiles"
"$BIN/pplan" predict --model "$MODEL" --hardware "$OUT/hw.json" --profile "$OUT/layers.json" \
  --gpus 2 --tp 1 --pp 2 --dp 1 --global-batch "$M" --micro-batch 1 --schedule 1f1b \
  --output "$OUT/plan.json" --trace "$OUT/predicted.json" --format json | tee "$OUT/predicted-summary.json"

echo "== 3. run the plan"
"$BIN/pplan-exec" run --plan "$OUT/plan.json" --backend cpu --steps "$STEPS" \
  --trace "$OUT/measured.json" --format json | tee "$OUT/measured-summary.json"

echo "== 4. compare predicted and measured timelines"
"$BIN/pplan" validate --predicted "$OUT/predicted.json" --measured "$OUT/measured.json"
