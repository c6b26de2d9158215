#!/usr/bin/env bash
# The calibration loop of benches/cpu_validate.sh for what the CPU backend runs beside a plain
# pipeline (issue 43): mixture-of-experts layers, FP8 GEMMs (emulated), expert, context and
# data parallelism. For each layout: measure this machine with `pplan-exec profile` at the
# layout (the layers timed on their replicas, with the all-to-all and the attention ring) ->
# `pplan predict --profile` -> `pplan-exec run` -> `pplan validate`.
# Usage: benches/cpu_validate_parallel.sh [MODEL] [STEPS] [REPEATS]
#   defaults: examples/models/tiny-moe-cpu.json 8 25
# Layouts (every one uses 2 threads, so 2 idle cores run it without time-slicing):
#   fp8-tensorwise  p=2, FP8 with per-tensor scales          fp8-blockwise  the same, 1x128/128x128 blocks
#   ep              p=1, dp=2, ep=2 (2 experts a rank)      cp             p=1, cp=2 (attention ring)
#   ep-over-cp      p=1, cp=2, ep=2 (the experts split over the context-parallel ranks)
# Writes everything under $OUT (default target/cpu-validate-parallel) and prints one line per
# layout: predicted and measured step (median after 1 warm-up step), step error, the mean
# absolute error of the matched actions, and the compute actions' (F, B) errors.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-examples/models/tiny-moe-cpu.json}
STEPS=${2:-8}
REPEATS=${3:-25}
OUT=${OUT:-target/cpu-validate-parallel}
mkdir -p "$OUT"
cargo build --release -q -p pplan -p pplan-exec
BIN=target/release

# The executor sums a replica's f32 gradients after its last backward (no overlap, no sharded
# optimizer state): --overlap-grad-reduce off --zero 0 --grad-reduce-dtype fp32 say so.
DP="--overlap-grad-reduce off --zero 0 --grad-reduce-dtype fp32"
# name | profile flags | predict flags (besides model, hardware, profile, schedule)
LAYOUTS=(
  "fp8-tensorwise|--devices 2 --precision fp8 --fp8-recipe tensorwise|--gpus 2 --pp 2 --global-batch 8 --precision fp8 --fp8-recipe tensorwise"
  "fp8-blockwise|--devices 2 --precision fp8 --fp8-recipe blockwise|--gpus 2 --pp 2 --global-batch 8 --precision fp8 --fp8-recipe blockwise"
  "ep|--devices 1 --dp 2 --ep 2|--gpus 2 --pp 1 --ep 2 --global-batch 8 $DP"
  "cp|--devices 1 --cp 2|--gpus 2 --pp 1 --cp 2 --attention flash --global-batch 4 $DP"
  "ep-over-cp|--devices 1 --cp 2 --ep 2|--gpus 2 --pp 1 --cp 2 --ep 2 --attention flash --global-batch 4 $DP"
)

printf '%-15s %11s %11s %9s %9s %9s %9s\n' layout predicted_s measured_s step_err act_mae F_err B_err
for L in "${LAYOUTS[@]}"; do
  IFS='|' read -r NAME PROF PRED <<< "$L"
  # shellcheck disable=SC2086
  "$BIN/pplan-exec" profile --model "$MODEL" --micro-batch 1 --backend cpu --repeats "$REPEATS" \
    $PROF --out-profile "$OUT/$NAME.layers.json" --out-hardware "$OUT/$NAME.hw.json" --format json \
    > "$OUT/$NAME.profile-summary.json"
  # shellcheck disable=SC2086
  "$BIN/pplan" predict --model "$MODEL" --hardware "$OUT/$NAME.hw.json" \
    --profile "$OUT/$NAME.layers.json" --micro-batch 1 --schedule 1f1b $PRED \
    --output "$OUT/$NAME.plan.json" --trace "$OUT/$NAME.predicted.json" --format json \
    > "$OUT/$NAME.predicted-summary.json"
  "$BIN/pplan-exec" run --plan "$OUT/$NAME.plan.json" --backend cpu --steps "$STEPS" \
    --trace "$OUT/$NAME.measured.json" --format json > "$OUT/$NAME.measured-summary.json"
  "$BIN/pplan" validate --predicted "$OUT/$NAME.predicted.json" \
    --measured "$OUT/$NAME.measured.json" --gantt "$OUT/$NAME.overlay.svg" --format json \
    > "$OUT/$NAME.validate.json" 2> "$OUT/$NAME.validate.stderr"
  python3 - "$OUT/$NAME.validate.json" "$NAME" <<'EOF'
import json, sys
v = json.load(open(sys.argv[1]))
kind = {k: e["error"] for k, e in v["by_kind"].items()}
print(f"{sys.argv[2]:<15} {v['step_time_predicted_s']:11.4f} {v['step_time_measured_s']:11.4f} "
      f"{v['step_time_error']*100:+8.2f}% {v['action_error_mean_abs']*100:8.2f}% "
      f"{kind.get('F', float('nan'))*100:+8.2f}% {kind.get('B', float('nan'))*100:+8.2f}%")
EOF
done
