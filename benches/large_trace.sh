#!/usr/bin/env bash
# Reading a large PyTorch profiler trace: wall time and peak memory of `pplan validate
# --measured` on a generated Kineto trace of about SIZE_MB megabytes (default 500), against a
# baseline measured in the same run: Python's json.load of the same file (what a DOM-based
# analysis does), plus, for scale, `cat` of the file to /dev/null.
# Usage: benches/large_trace.sh [SIZE_MB]     (needs python3 and GNU time at /usr/bin/time)
# Writes under $OUT (default target/large-trace) and prints one line per command:
#   command, wall seconds, peak resident memory (MiB), and the ratio to the baseline.
set -euo pipefail
cd "$(dirname "$0")/.."
SIZE_MB=${1:-500}
OUT=${OUT:-target/large-trace}
mkdir -p "$OUT"
cargo build --release -q -p pplan
TRACE="$OUT/rank-0.json"
if [ ! -s "$TRACE" ] || [ "$(($(stat -c %s "$TRACE") / 1000000))" -lt "$((SIZE_MB * 95 / 100))" ]; then
  python3 - "$TRACE" "$SIZE_MB" <<'PY'
import json, sys
# A transformer training step as the profiler records it: per micro-batch action a
# record_function range, CPU ops with shapes, runtime launches with correlation ids, and GPU
# kernels (GEMMs, flash attention, elementwise, NCCL), one ProfilerStep per step.
path, size_mb = sys.argv[1], int(sys.argv[2])
target = size_mb * 1_000_000
kernels = [
    ("nvjet_hsh_256x128_64x4_2x1_v_bz_coopA_NNT", 180.0),
    ("void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t>>(Flash_fwd_params)", 120.0),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, at::detail::Array<char*, 3>)", 12.0),
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 60.0),
]
with open(path, "w") as f:
    f.write('{"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 8}, "traceEvents": [\n')
    t, corr, step, first, written = 1_700_000_000_000.0, 0, 0, True, 0
    def emit(e):
        global first, written
        s = ("" if first else ",\n") + json.dumps(e)
        first = False
        written += len(s)
        f.write(s)
    while written < target:
        step_start = t
        emit({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": 1, "tid": 1, "ts": t, "dur": 0, "args": {}})
        step_index = step
        for mb in range(8):
            emit({"ph": "X", "cat": "user_annotation", "name": f"PP:0F{mb}", "pid": 1, "tid": 1, "ts": t, "dur": 4000.0})
            for layer in range(8):
                for name, dur in kernels:
                    corr += 1
                    emit({"ph": "X", "cat": "cpu_op", "name": "aten::linear", "pid": 1, "tid": 1, "ts": t, "dur": 8.0,
                          "args": {"External id": corr, "Input Dims": [[8, 4096, 4096], [4096, 4096]], "Input type": ["c10::BFloat16", "c10::BFloat16"]}})
                    emit({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": t + 1, "dur": 4.0,
                          "args": {"External id": corr, "correlation": corr, "cbid": 211}})
                    emit({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": t + 20, "dur": dur,
                          "args": {"External id": corr, "queued": 0, "device": 0, "context": 1, "stream": 7, "correlation": corr,
                                   "registers per thread": 168, "shared memory": 232448, "blocks per SM": 1.0, "grid": [132, 1, 1], "block": [384, 1, 1]}})
                    emit({"ph": "f", "cat": "ac2g", "name": "ac2g", "id": corr, "pid": 0, "tid": 7, "ts": t + 20, "bp": "e"})
                    t += dur + 2
        step += 1
    f.write("\n]}\n")
PY
fi
BYTES=$(stat -c %s "$TRACE")
echo "trace: $TRACE, $((BYTES / 1000000)) MB"
measure() { # label, command...
  local label=$1; shift
  /usr/bin/time -f "%e %M" -o "$OUT/time.txt" "$@" > /dev/null
  read -r wall kb < "$OUT/time.txt"
  echo "$label $wall $((kb / 1024))"
}
P=$(measure pplan target/release/pplan validate --measured "$TRACE" --format json)
B=$(measure python-json-load python3 -c "import json,sys; json.load(open(sys.argv[1]))" "$TRACE")
C=$(measure cat cat "$TRACE")
read -r _ pw pm <<< "$P"
read -r _ bw bm <<< "$B"
printf '%-18s %10s %12s %14s %14s\n' command wall_s peak_MiB wall/baseline mem/baseline
for line in "$P" "$B" "$C"; do
  read -r l w m <<< "$line"
  printf '%-18s %10s %12s %14.3f %14.3f\n' "$l" "$w" "$m" "$(echo "$w / $bw" | bc -l)" "$(echo "$m / $bm" | bc -l)"
done
