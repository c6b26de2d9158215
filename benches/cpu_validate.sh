#!/usr/bin/env bash
# Calibration loop on the CPU backend, end to end, with 2 pipeline devices (one thread each):
#   measure this machine -> predict each schedule with the measured profiles -> run it -> compare.
# Usage: benches/cpu_validate.sh [MODEL] [MICROBATCHES] [STEPS] [SCHEDULES...]
#   defaults: examples/models/tiny-gpt-cpu.json 8 8 gpipe 1f1b interleaved-1f1b zb-h1
# Writes everything under $OUT (default target/cpu-validate) and prints one line per schedule:
#   schedule, predicted step, measured step (median after 1 warm-up step), error, bubbles.
# Needs 2 idle cores: another busy process on the machine shows up as prediction error.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-examples/models/tiny-gpt-cpu.json}
M=${2:-8}
STEPS=${3:-8}
shift $(( $# < 3 ? $# : 3 ))
SCHEDULES=("$@")
[ ${#SCHEDULES[@]} -eq 0 ] && SCHEDULES=(gpipe 1f1b interleaved-1f1b zb-h1)
OUT=${OUT:-target/cpu-validate}
mkdir -p "$OUT"
cargo build --release -q -p pplan -p pplan-exec
BIN=target/release

echo "== profile: $MODEL, micro-batch 1, one thread per device"
"$BIN/pplan-exec" profile --model "$MODEL" --micro-batch 1 --backend cpu \
  --out-profile "$OUT/layers.json" --out-hardware "$OUT/hw.json" --repeats 25 --devices 2

printf '%-18s %12s %12s %9s %9s %9s\n' schedule predicted_s measured_s error bub_pred bub_meas
for S in "${SCHEDULES[@]}"; do
  V=1
  [ "$S" = interleaved-1f1b ] && V=2
  "$BIN/pplan" predict --model "$MODEL" --hardware "$OUT/hw.json" --profile "$OUT/layers.json" \
    --gpus 2 --tp 1 --pp 2 --dp 1 --global-batch "$M" --micro-batch 1 --schedule "$S" --chunks "$V" \
    --recompute none --output "$OUT/$S.plan.json" --trace "$OUT/$S.predicted.json" --format json \
    > "$OUT/$S.predicted-summary.json"
  "$BIN/pplan-exec" run --plan "$OUT/$S.plan.json" --backend cpu --steps "$STEPS" \
    --trace "$OUT/$S.measured.json" --format json > "$OUT/$S.measured-summary.json"
  "$BIN/pplan" validate --predicted "$OUT/$S.predicted.json" --measured "$OUT/$S.measured.json" \
    --gantt "$OUT/$S.overlay.svg" --format json > "$OUT/$S.validate.json" 2> "$OUT/$S.validate.stderr"
  python3 - "$OUT/$S.validate.json" "$S" <<'EOF'
import json, sys
v = json.load(open(sys.argv[1]))
print(f"{sys.argv[2]:<18} {v['step_time_predicted_s']:12.4f} {v['step_time_measured_s']:12.4f} "
      f"{v['step_time_error']*100:+8.2f}% {v['bubble_predicted']:9.4f} {v['bubble_measured']:9.4f}")
EOF
done
