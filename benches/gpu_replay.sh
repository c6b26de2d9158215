#!/usr/bin/env bash
# Replays committed GPU measurements (hardware/measured/h200/pipeline by default, or the
# h100 one) on the CPU: predicts each case with the measured layer and hardware profiles and
# --shared-gpu (the p pipeline devices took turns on one GPU, PPLAN_CUDA_SHARE=serialize), puts
# it beside the measured trace with `pplan validate`, and prints the Markdown table of
# docs/validation.md. A case the executor refused (no trace; its stderr committed) gets a row
# saying why.
# Usage: benches/gpu_replay.sh [PPLAN_BIN] [OUT_DIR] [MEASURED_DIR]
#   (OUT_DIR gets the traces and overlays)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-target/release/pplan}
OUT=${2:-target/gpu-replay}
M=${3:-hardware/measured/h200/pipeline}
mkdir -p "$OUT"
echo "| p | schedule | predicted step (s) | measured step (s) | error | predicted bubble | measured bubble | action error (mean abs) |"
echo "|---|---|---|---|---|---|---|---|"
for P in 2 4; do
  for S in gpipe 1f1b interleaved-1f1b zb-h1; do
    V=1
    [ "$S" = interleaved-1f1b ] && V=2
    if [ ! -f "$M/p$P-$S.measured.json" ]; then
      echo "| $P | $S | not run: $(sed 's/|/\\|/g' "$M/p$P-$S.stderr") | | | | | |"
      continue
    fi
    "$BIN" predict --model examples/models/gpt-0.9b-gpu.json --hardware "$M/hw.json" \
      --profile "$M/layers.json" --gpus "$P" --tp 1 --pp "$P" --dp 1 --global-batch 8 \
      --micro-batch 1 --schedule "$S" --chunks "$V" --recompute none --shared-gpu \
      --trace "$OUT/p$P-$S.predicted.json" --format json > /dev/null
    "$BIN" validate --predicted "$OUT/p$P-$S.predicted.json" --measured "$M/p$P-$S.measured.json" \
      --gantt "$OUT/p$P-$S.overlay.svg" --format json 2> /dev/null > "$OUT/p$P-$S.validate.json"
    python3 - "$OUT/p$P-$S.validate.json" "$P" "$S" <<'PY'
import json, sys
v = json.load(open(sys.argv[1]))
print(f"| {sys.argv[2]} | {sys.argv[3]} | {v['step_time_predicted_s']:.4f} | {v['step_time_measured_s']:.4f} "
      f"| {v['step_time_error']*100:+.2f}% | {v['bubble_predicted']:.3f} | {v['bubble_measured']:.3f} "
      f"| {v['action_error_mean_abs']*100:.2f}% |")
PY
  done
done
