#!/usr/bin/env bash
# Everything the GPU issue needs from one GPU, in one go (each step bounded by `timeout`):
#   1. versions (driver, CUDA, GPU);  2. the executor's GPU tests;
#   3. the layer profile of the validation model and its pipeline runs (p = 2 and 4 pipeline
#      devices sharing the GPU in serialised mode; GPipe, 1F1B, interleaved 1F1B v=2, ZB-H1);
#   4. `pplan-exec sweep` over GPT-3 175B and Llama 3 70B layer shapes;
#   5. benches/gpu_kernels.py (PyTorch: BF16-output and FP8 GEMMs, flash attention, norms).
# Usage: [PARTS="1 2 3 4 5"] benches/gpu_first_light.sh BIN_DIR PLAN_DIR OUT_DIR
#   BIN_DIR holds pplan-exec and the executor's unit-test binary `pplan_exec_tests`
#   (cargo test --release -p pplan-exec --lib --no-run prints its path); PLAN_DIR the plans
#   p<P>-<schedule>.plan.json written by benches/gpu_plans.sh. Results land in OUT_DIR/w and
#   are packed into OUT_DIR/first-light.tar.gz after every step.
set -uo pipefail
PARTS=${PARTS:-1 2 3 4 5}
part() { [[ " $PARTS " == *" $1 "* ]]; }
BIN=$(cd "$1" && pwd) PLANS=$(cd "$2" && pwd) OUT=$3
W=$OUT/w
mkdir -p "$W"
HERE=$(cd "$(dirname "$0")/.." && pwd)
exec > >(tee "$W/log.txt") 2>&1
pack() { tar czf "$OUT/first-light.tar.gz" -C "$OUT" w; }

# cudarc opens libcuda.so, libcublas.so, libnvrtc.so and libnccl.so by these names (or a few
# versioned ones); the image has them in the CUDA toolkit or in the Python wheels.
ORIG_LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}
LIBS=/tmp/pplan-cuda-libs
mkdir -p "$LIBS"
DIRS=""
for lib in cublas cublasLt nvrtc nccl; do
  f=$( (ls /usr/local/cuda/lib64/lib$lib.so* 2>/dev/null; \
        find / -xdev -name "lib$lib.so*" -not -path '/proc/*' 2>/dev/null) | head -1)
  if [ -n "$f" ]; then
    ln -sf "$f" "$LIBS/lib$lib.so"
    DIRS="$DIRS:$(dirname "$f")"
    echo "lib$lib: $f"
  else
    echo "lib$lib: not found"
  fi
done
export LD_LIBRARY_PATH="$LIBS$DIRS:/usr/local/cuda/lib64:/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}"

echo "== 1. versions"
nvidia-smi | tee "$W/nvidia-smi.txt"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem,power.limit \
  --format=csv | tee -a "$W/nvidia-smi.txt"
(nvcc --version || true) | tee "$W/nvcc.txt"
uname -a | tee -a "$W/nvcc.txt"
nvidia-smi -q -d CLOCK,POWER,PERFORMANCE > "$W/nvidia-smi-q.txt" 2>&1
pack

if part 2; then
echo "== 2. executor tests (ignored GPU tests included)"
(cd "$HERE/executor" && timeout 90 "$BIN/pplan_exec_tests" --include-ignored --test-threads=1 2>&1) \
  | tee "$W/tests.txt" | grep -E "^test |test result|panicked|FAILED" | tail -60
pack

fi
if part 3; then
echo "== 3. layer profile and pipeline runs"
export PPLAN_CUDA_SHARE=serialize
MODEL=$HERE/examples/models/gpt-0.9b-gpu.json
timeout 60 "$BIN/pplan-exec" profile --model "$MODEL" --micro-batch 1 --backend cuda --dtype bf16 \
  --out-profile "$W/layers.json" --out-hardware "$W/hw.json" --repeats 10 --devices 4 \
  | tee "$W/profile.txt"
pack
for P in 2 4; do
  for S in gpipe 1f1b interleaved-1f1b zb-h1; do
    timeout 45 "$BIN/pplan-exec" run --plan "$PLANS/p$P-$S.plan.json" --backend cuda --steps 6 \
      --dtype bf16 --timeout-s 40 --trace "$W/p$P-$S.measured.json" --format json \
      > "$W/p$P-$S.summary.json" 2> "$W/p$P-$S.stderr"
    rc=$?
    echo "p=$P $S rc=$rc $(tr -d '\n ' < "$W/p$P-$S.summary.json" | cut -c1-300)"
    [ $rc -ne 0 ] && head -c 600 "$W/p$P-$S.stderr"
    pack
  done
done

fi
if part 4; then
echo "== 4. executor kernel sweep"
unset PPLAN_CUDA_SHARE
timeout 90 "$BIN/pplan-exec" sweep --model gpt3-175b --seq-len 2048 --out "$W/sweep-gpt3-175b.json"
pack
timeout 90 "$BIN/pplan-exec" sweep --model llama3-70b --seq-len 4096 --out "$W/sweep-llama3-70b.json"
pack

fi
if part 5; then
echo "== 5. PyTorch kernels"
(while sleep 15; do pack; done) &
PACKER=$!
# PyTorch brings its own cuDNN: the library path above would load an older one.
LD_LIBRARY_PATH=$ORIG_LD_LIBRARY_PATH PYTHONUNBUFFERED=1 timeout 200 python3 "$HERE/benches/gpu_kernels.py" "$W/torch-kernels.json"
kill $PACKER 2>/dev/null

fi
echo "== done"
pack
