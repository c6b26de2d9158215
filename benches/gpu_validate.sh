#!/usr/bin/env bash
# Calibration loop on the CUDA backend, end to end, with 2 pipeline devices:
#   measure this GPU -> predict each schedule with the measured profiles -> run it -> compare.
# Usage: benches/gpu_validate.sh [MODEL] [MICROBATCHES] [STEPS] [SCHEDULES...]
#   defaults: examples/models/gpt-0.8b-gpu.json 8 6 gpipe 1f1b interleaved-1f1b zb-h1
# Writes everything under $OUT (default target/gpu-validate) and prints one line per schedule:
#   schedule, predicted step, measured step, step error, per-action (compute) error, bubbles.
#
# With >= 2 visible GPUs the 2 pipeline devices run on GPU 0 and GPU 1 (peer copies).
# With 1 GPU both pipeline devices share it; this script then sets PPLAN_CUDA_SHARE=serialize
# (override by exporting PPLAN_CUDA_SHARE): one device's action at a time, so every measured
# action costs what it costs on an unshared GPU, and predicts with --shared-gpu, the simulator
# mode in which the devices take the one GPU in turn, so the step times compare too.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-examples/models/gpt-0.8b-gpu.json}
M=${2:-8}
STEPS=${3:-6}
shift $(( $# < 3 ? $# : 3 ))
SCHEDULES=("$@")
[ ${#SCHEDULES[@]} -eq 0 ] && SCHEDULES=(gpipe 1f1b interleaved-1f1b zb-h1)
OUT=${OUT:-target/gpu-validate}
DTYPE=${DTYPE:-bf16}
mkdir -p "$OUT"
cargo build --release -q -p pplan -p pplan-exec
BIN=target/release

GPUS=$( (nvidia-smi -L 2>/dev/null || true) | grep -c '^GPU' || true)
SHARED=()
if [ "${GPUS:-0}" -lt 2 ]; then
  export PPLAN_CUDA_SHARE=${PPLAN_CUDA_SHARE:-serialize}
  SHARED=(--shared-gpu)
  echo "== one GPU: both pipeline devices share it (PPLAN_CUDA_SHARE=$PPLAN_CUDA_SHARE)"
else
  echo "== $GPUS GPUs: pipeline devices 0 and 1 on GPUs 0 and 1"
fi

echo "== profile: $MODEL, micro-batch 1, dtype $DTYPE"
"$BIN/pplan-exec" profile --model "$MODEL" --micro-batch 1 --backend cuda --dtype "$DTYPE" \
  --out-profile "$OUT/layers.json" --out-hardware "$OUT/hw.json" --repeats 10 --devices 2 \
  | tee "$OUT/profile.txt"

printf '%-18s %12s %12s %9s %10s %9s %9s\n' schedule predicted_s measured_s step_err action_err bub_pred bub_meas
for S in "${SCHEDULES[@]}"; do
  V=1
  [ "$S" = interleaved-1f1b ] && V=2
  "$BIN/pplan" predict --model "$MODEL" --hardware "$OUT/hw.json" --profile "$OUT/layers.json" \
    --gpus 2 --tp 1 --pp 2 --dp 1 --global-batch "$M" --micro-batch 1 --schedule "$S" --chunks "$V" \
    --recompute none "${SHARED[@]}" --output "$OUT/$S.plan.json" --trace "$OUT/$S.predicted.json" --format json \
    > "$OUT/$S.predicted-summary.json"
  "$BIN/pplan-exec" run --plan "$OUT/$S.plan.json" --backend cuda --steps "$STEPS" \
    --dtype "$DTYPE" --trace "$OUT/$S.measured.json" --format json > "$OUT/$S.measured-summary.json"
  "$BIN/pplan" validate --predicted "$OUT/$S.predicted.json" --measured "$OUT/$S.measured.json" \
    --gantt "$OUT/$S.overlay.svg" --format json > "$OUT/$S.validate.json" 2> "$OUT/$S.validate.stderr"
  python3 - "$OUT/$S.validate.json" "$S" <<'PY'
import json, sys
v = json.load(open(sys.argv[1]))
act = v["action_error_mean_abs"]
print(f"{sys.argv[2]:<18} {v['step_time_predicted_s']:12.4f} {v['step_time_measured_s']:12.4f} "
      f"{v['step_time_error']*100:+8.2f}% {act*100:+9.2f}% {v['bubble_predicted']:9.4f} {v['bubble_measured']:9.4f}")
PY
done
