#!/usr/bin/env bash
# usage: scripts/golden-outputs.sh BIN OUTDIR -- runs a fixed set of pplan commands with binary BIN and
# writes each output (timings and OUTDIR stripped) to OUTDIR. Run it with the binaries before and
# after a refactor and `diff -r` the two folders: a behaviour-preserving change leaves none.
B=$(realpath "$1"); O=$(realpath -m "$2"); rm -rf "$O"; mkdir -p "$O"; cd "$(dirname "$0")/.."
strip() { sed -E "s#$O#OUT#g" | sed -E 's/searched in [0-9.]+ s/searched in X s/; s/"elapsed_s":[0-9.eE+-]+/"elapsed_s":X/g'; }
i=0
run() { i=$((i+1)); { "$B" "$@" 2>&1; echo "rc=$?"; } | strip > $O/$(printf %03d $i).txt; echo "$*" | strip >> "$O/cmds.txt"; }
run search --gpus 3072
run search --gpus 3072 --format json
run search --gpus 512 --model gpt3-175b --top 20
run search --gpus 64 --model llama3-70b --hardware h100-80gb --global-batch 512 --format json
run search --gpus 1024 --model gpt-529.6b --partition both
for s in gpipe 1f1b interleaved-1f1b pipedream pipedream-2bw zb-h1 zb-h2 zbv dualpipev looped-bfs; do
  v=1; [ $s = interleaved-1f1b -o $s = looped-bfs ] && v=2; [ $s = zbv -o $s = dualpipev ] && v=2
  run simulate --schedule $s --stages 4 --microbatches 8 --chunks $v --forward 1 --backward 2 --format json
  run simulate --schedule $s --stages 4 --microbatches 8 --chunks $v --forward 1 --backward 2 --backward-input 1 --backward-weight 1 --p2p 0.1
  run simulate --schedule $s --stages 4 --microbatches 8 --chunks $v --forward 1 --backward 2 --gantt $O/g-$s.svg --trace $O/t-$s.json
  run simulate --schedule $s --stages 8 --microbatches 16 --chunks $v --forward 3 --backward 5 --backward-input 2 --backward-weight 3 --p2p 1 --format json
done
for f in schedules/*.csv; do a=""; mm=8; case $f in *zbv*|*dualpipev*) a="--placement v";; esac; case $f in *steps2*) mm=16;; esac
  run simulate --schedule $f --stages 4 --microbatches $mm $a --forward 1 --backward 2 --format json; done
run simulate --schedule schedules/zbv-p4-m8.csv --stages 4 --microbatches 8 --placement v --forward 1 --backward-input 1 --backward-weight 1 --format json
run simulate --schedule 1f1b --stages 4 --microbatches 8 --forward 1 --backward 2 --gantt $O/g.png
for m in gpt-1.7b gpt-18.4b gpt3-175b gpt-1t; do
  run predict --model $m --hardware a100-80gb --gpus 3072 --tp 8 --pp 64 --global-batch 3072 --micro-batch 1 --format json
done
run predict --model gpt-1t --hardware a100-80gb --gpus 3072 --tp 8 --pp 64 --global-batch 3072 --micro-batch 1
run predict --model gpt3-175b --hardware a100-80gb --gpus 1024 --tp 8 --pp 16 --global-batch 1536 --micro-batch 1 --schedule interleaved-1f1b --chunks 3 --recompute full --trace $O/pt.json --gantt $O/pg.svg
run predict --model llama3-70b --hardware h100-80gb --gpus 512 --tp 8 --pp 8 --global-batch 512 --micro-batch 1 --schedule zb-h1 --format json --output $O/plan.json
run predict --model examples/models/llama3-8b-config.json --hardware h200 --gpus 64 --tp 2 --pp 4 --global-batch 256 --micro-batch 2 --seq-len 4096 --format json
run predict --model gpt-1t --hardware a100-80gb --gpus 3072 --tp 8 --pp 64 --global-batch 3072 --micro-batch 1 --profile examples/profiles/gpt-1t-a100-t8.json --format json
run predict --model gpt-1t --hardware a100-80gb --gpus 3072 --tp 8 --pp 64 --global-batch 3072 --micro-batch 1 --partition balanced --format json
run emit --plan $O/plan.json --target megatron
run emit --plan $O/plan.json --target torchtitan
run emit --plan $O/plan.json --target csv
run emit --plan $O/plan.json --target executor
run generate --schedule zbv --stages 4 --microbatches 8 --output $O/gen.csv
run schedule-search --stages 4 --microbatches 8 --forward 1 --backward-input 1 --backward-weight 1 --output $O/ss.csv
run partition --profile examples/profiles/uneven-12.json --stages 4 --format json
run partition --profile examples/profiles/uneven-12.json --stages 3 --method ilp --format json
run validate --predicted $O/pt.json --measured $O/pt.json
run validate --predicted $O/pt.json --measured $O/pt.json --format json
run predict --model nope --gpus 8 --tp 1 --pp 1 --global-batch 8 --micro-batch 1
run simulate --schedule 1f1b --stages 0 --microbatches 8 --forward 1 --backward 2
