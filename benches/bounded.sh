#!/usr/bin/env bash
# Bounded time and memory (issue #42): the commands that ran unbounded, on generated inputs
# far larger than the largest bundled one (10x or more), each beside a baseline measured in the
# same run, so that the ratio holds when the machine's speed drifts:
#   - Megatron-LM and torchtitan logs of LINES iteration lines (default 1,000,000; the largest
#     bundled log, tests/data/measured/logs/torchtitan_pr364_wps.log, has 31 lines), against
#     `grep -c` of the same file (one linear scan);
#   - an Nsight Systems export of KERNELS kernels (default 1,000,000; the largest bundled one
#     has 20 activities), against Python's sqlite3 reading every kernel row;
#   - simulate at predict's action limit (20,000,000 actions; the largest bundled schedule
#     file, schedules/dualpipev-p4-m8.csv, has 96) and schedule-search at its default bound,
#     each against the same command at a tenth of the size (the ratio is the growth);
#   - the inputs the issue reported past 20 s, now refused at once.
# Usage: benches/bounded.sh [LINES] [KERNELS]   (needs python3 and GNU time at /usr/bin/time)
# Writes under $OUT (default target/bounded) and prints a table: command, wall seconds, peak
# resident memory (MiB), its baseline, and the ratios.
set -euo pipefail
cd "$(dirname "$0")/.."
LINES=${1:-1000000}
KERNELS=${2:-1000000}
OUT=${OUT:-target/bounded}
mkdir -p "$OUT"
cargo build --release -q -p pplan
P=target/release/pplan

python3 - "$OUT" "$LINES" "$KERNELS" <<'PY'
import os, re, sqlite3, sys
out, lines, kernels = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
# Megatron-LM: Ling-V2's iteration line (tests/data/measured/logs/megatron_ling_v2.log) with
# its iteration number counted up, and a memory line every 100 iterations.
line = open("tests/data/measured/logs/megatron_ling_v2.log").read().splitlines()[0]
mem = open("tests/data/measured/logs/megatron_ling_v2.log").read().splitlines()[1]
path = f"{out}/megatron-{lines}.log"
if not os.path.exists(path):
    with open(path, "w") as f:
        for i in range(1, lines + 1):
            f.write(re.sub(r"iteration\s+\d+/", f"iteration {i:>8}/", line, count=1) + "\n")
            if i % 100 == 0:
                f.write(mem.replace("after 1 iterations", f"after {i} iterations") + "\n")
# torchtitan: PR #2389's step line, step number counted up.
titan = "[rank0]:[titan] 2025-02-21 07:58:39,939 - root - INFO - step:  5  loss:  7.07623  grad_norm: 46.5000  memory: 66.91GiB(37.51%)  tps: 10,007  tflops: 313.36  mfu: 13.93%"
path = f"{out}/torchtitan-{lines}.log"
if not os.path.exists(path):
    with open(path, "w") as f:
        for i in range(1, lines + 1):
            f.write(titan.replace("step:  5", f"step:  {i}") + "\n")
# Nsight: the synthetic export's schema with KERNELS kernels on 8 GPUs, 8 streams each, in
# steps of 1,000 kernels (NVTX ProfilerStep ranges), names through StringIds.
path = f"{out}/nsys-{kernels}.sqlite"
if not os.path.exists(path):
    c = sqlite3.connect(path)
    c.executescript(open("tests/data/measured/nsys/synthetic_pipeline.sql").read())
    c.execute("DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL")
    c.execute("DELETE FROM NVTX_EVENTS")
    rows, t = [], [0] * 64
    for k in range(kernels):
        dev, stream = k % 8, (k // 8) % 8
        lane = dev * 8 + stream
        start = t[lane] + 100
        t[lane] = start + 1000
        rows.append((start, start + 1000, dev, 1, stream, k, 1677721600 * (dev + 1), 1 + 2 * (k % 5 == 0), 2))
    c.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?,?,?,?,?,?,?,?,?)", rows)
    c.commit()
    c.close()
PY

measure() { # label, command...: "label|wall|MiB"
  local label=$1; shift
  # Into a file, not /dev/null: GNU grep stops at the first match when it writes to /dev/null.
  /usr/bin/time -f "%e %M" -o "$OUT/time.txt" "$@" > "$OUT/stdout.txt" 2>"$OUT/stderr.txt" || true
  read -r wall kb < <(tail -1 "$OUT/time.txt")
  echo "$label|$wall|$((kb / 1024))"
}
row() { # measured line, baseline line
  IFS='|' read -r l w m <<< "$1"
  IFS='|' read -r bl bw bm <<< "$2"
  printf '%-34s %8s %9s  %-30s %8s %9.2f %9.2f\n' "$l" "$w" "$m" "$bl" "$bw" \
    "$(echo "$w / ($bw + 0.005)" | bc -l)" "$(echo "$m / $bm" | bc -l)"
}
printf '%-34s %8s %9s  %-30s %8s %9s %9s\n' command wall_s peak_MiB baseline base_s wall/base mem/base

M="$OUT/megatron-$LINES.log"; T="$OUT/torchtitan-$LINES.log"; N="$OUT/nsys-$KERNELS.sqlite"
row "$(measure "validate megatron $LINES lines" $P validate --measured "$M")" \
    "$(measure "grep -c megatron" grep -c "elapsed time per iteration" "$M")"
row "$(measure "validate torchtitan $LINES lines" $P validate --measured "$T")" \
    "$(measure "grep -c torchtitan" grep -c "tps:" "$T")"
row "$(measure "validate nsys $KERNELS kernels" $P validate --measured "$N")" \
    "$(measure "python sqlite3 rows" python3 -c "import sqlite3,sys; list(sqlite3.connect(sys.argv[1]).execute('SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL'))" "$N")"
S="--forward 1 --backward 2"
row "$(measure "simulate 1f1b 1000x10000 (2e7)" $P simulate --schedule 1f1b --stages 1000 --microbatches 10000 $S)" \
    "$(measure "simulate 1f1b 1000x1000" $P simulate --schedule 1f1b --stages 1000 --microbatches 1000 $S)"
row "$(measure "simulate zb-h2 1000x6666 (2e7)" $P simulate --schedule zb-h2 --stages 1000 --microbatches 6666 $S)" \
    "$(measure "simulate zb-h2 1000x666" $P simulate --schedule zb-h2 --stages 1000 --microbatches 666 $S)"
Z="--forward 1 --backward-input 1 --backward-weight 1"
row "$(measure "schedule-search 64x512 (default)" $P schedule-search --stages 64 --microbatches 512 $Z)" \
    "$(measure "schedule-search 64x51" $P schedule-search --stages 64 --microbatches 51 $Z --iterations 1017)"
row "$(measure "schedule-search 100x666 (largest)" $P schedule-search --stages 100 --microbatches 666 $Z)" \
    "$(measure "schedule-search 100x66" $P schedule-search --stages 100 --microbatches 66 $Z --iterations 500)"
# Refused at once (exit 2): the issue's 65 s / 4.1 GB simulate and 28 s schedule-search.
row "$(measure "refused: simulate 1000x100000" $P simulate --schedule 1f1b --stages 1000 --microbatches 100000 $S)" \
    "$(measure "simulate 1f1b 1000x1000" $P simulate --schedule 1f1b --stages 1000 --microbatches 1000 $S)"
row "$(measure "refused: search 64x512 4000 moves" $P schedule-search --stages 64 --microbatches 512 $Z --iterations 4000)" \
    "$(measure "schedule-search 64x51" $P schedule-search --stages 64 --microbatches 51 $Z --iterations 1017)"
