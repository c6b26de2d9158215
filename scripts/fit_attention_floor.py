#!/usr/bin/env python3
"""Fit the head-dimension floor of the fused (cuDNN) attention kernel to published timings.

The floor (docs/cost-model.md, "The softmax floor"; `Hardware::attention_head_dim_factor`): a
score costs the kernel's two GEMMs 4 d FLOPs forward (10 d backward) but one exponential and
the softmax's bookkeeping whatever the head dimension d is, so below a head dimension d0 that
fixed work, not the matrix multiplications, sets the time per score and the kernel runs at
min(1, d/d0) of its rate at d0. The profiles' laws are fitted at d = 128, so

    rate(d) / rate(128) = min(1, d/d0) / min(1, 128/d0).

Hopper (`hopper`): cuDNN measured on one H100 and one H200 (benches/gpu_kernels.py part
attention_head_dim, and on the H200 an earlier run of it at head dim 32,
hardware/measured/{h100,h200}/torch-kernels-head-dim*.json; PyTorch 2.11, cuDNN 9.19): causal
BF16 at head dims 32 and 64 against 128 at 2k-8k tokens, each rate divided by the law's fill
term H s/(H s + n0) (H the query heads), so that rate(d)/rate(128) = d/d0 gives d0 = d / ratio;
d0 the geometric mean over each GPU's points, forward and backward (h100-80gb and h800 take
the H100's, h200 the H200's). Beside them, as a check, cuDNN's published H100 speeds at 64 and
128 (FlashAttention-3's figures, hardware/published/flashattention-3/h100_bf16_head_dim.csv),
which gave the profiles' first floors.

Blackwell (`blackwell FILE_D256 FILE_D128`): cuDNN's GB200/GB300 forward speeds at head dim 256
(Qwen3.5's heads) and 128 (Llama 3.1's) at the same sequence lengths
(hardware/published/cudnn-frontend/): with d0 >= 128, rate(256)/rate(128) = d0/128 once each
rate is divided by the law's fill term H s/(H s + n0) (the files differ in batch x heads H), so
d0 = 128 x their geometric mean. No backward is published at head dim 256; the backward floor
is the forward one times Hopper's backward-to-forward ratio (the same softmax work against the
backward's 2.5 x the forward's GEMM FLOPs on both generations: an assumption).

    python3 scripts/fit_attention_floor.py hopper
    python3 scripts/fit_attention_floor.py blackwell hardware/published/cudnn-frontend/qwen35_gb200_20260424_095249.csv hardware/published/cudnn-frontend/llama3.1_gb200_20260424_100750.csv
"""
import csv
import math
import sys

import json

N0 = 22000  # gpu.attention_half_work of the Hopper and Blackwell profiles
FA3 = "hardware/published/flashattention-3/h100_bf16_head_dim.csv"
MEASURED = {"h100": ["hardware/measured/h100/torch-kernels-head-dim.json"],
            "h200": ["hardware/measured/h200/torch-kernels-head-dim.json",
                     "hardware/measured/h200/torch-kernels-head-dim-32.json"]}


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def fill(h, s):
    return h * s / (h * s + N0)


def measured(gpu):
    """d0 (forward, backward) from one GPU's measured rates: each point at head dim 32 or 64
    against head dim 128 with 64 query heads at the same length, fill-corrected."""
    rows = [r for f in MEASURED[gpu] for r in json.load(open(f))["attention_head_dim"]]
    ref = {r["seq"]: r for r in rows if r["head_dim"] == 128 and r["heads"] == 64}
    out = {}
    for p, key in (("fwd", "forward_flops_per_s"), ("bwd", "backward_flops_per_s")):
        d0s = []
        for r in rows:
            if r["head_dim"] >= 128:
                continue
            b = ref[r["seq"]]
            ratio = (r[key] / fill(r["heads"], r["seq"])) / (b[key] / fill(b["heads"], b["seq"]))
            d0s.append(r["head_dim"] / ratio)
            print(f"  {p} d {r['head_dim']:3d} heads {r['heads']:3d} {r['seq']:5d} tokens: "
                  f"rate/rate(128) {ratio:.3f} (fill-corrected) -> d0 {d0s[-1]:.1f}")
        d0 = geomean(d0s)
        worst = max(abs(x / d0 - 1) for x in d0s)
        mean = sum(abs(x / d0 - 1) for x in d0s) / len(d0s)
        out[p] = d0
        print(f"{gpu} measured {p}: d0 {d0:.1f} over {len(d0s)} points; each within "
              f"{100 * mean:.1f} % on average, worst {100 * worst:.1f} %")
    # The fill term itself: 32 heads against 64 at head dim 128.
    for r in rows:
        if r["head_dim"] == 128 and r["heads"] == 32:
            b = ref[r["seq"]]
            law = fill(32, r["seq"]) / fill(64, r["seq"])
            print(f"  fill check, 32 against 64 heads at {r['seq']} tokens: forward "
                  f"{r['forward_flops_per_s'] / b['forward_flops_per_s']:.3f}, backward "
                  f"{r['backward_flops_per_s'] / b['backward_flops_per_s']:.3f}, law {law:.3f}")
    return out


def hopper():
    """The H100's floors (h100-80gb, h800; their backward-to-forward ratio is the one the
    Blackwell backward floor takes) after the H200's (h200) and the published check."""
    measured("h200")
    out = measured("h100")
    print(f"hopper (H100) backward/forward floor ratio {out['bwd'] / out['fwd']:.3f}")
    published()
    return out


def published():
    rows = list(csv.DictReader(open(FA3)))
    out = {}
    for p in ("fwd", "bwd"):
        at = {(int(r["head_dim"]), int(r["seq"])): float(r["cudnn_tflops"]) for r in rows if r["pass"] == p}
        ratios = [at[(64, s)] / at[(128, s)] for (d, s) in sorted(at) if d == 64]
        r = geomean(ratios)
        worst = max(abs(x / r - 1) for x in ratios)
        mean = sum(abs(x / r - 1) for x in ratios) / len(ratios)
        out[p] = 64 / r
        print(f"published H100 (FlashAttention-3) {p}: rate(64)/rate(128) {r:.3f} -> d0 "
              f"{64 / r:.1f}; points within {100 * mean:.1f} % on average, worst "
              f"{100 * worst:.1f} %")
    return out


def forward_points(path):
    """{seq: (TFLOP/s, batch x query heads)} of a cudnn-frontend CSV's causal BF16 cuDNN forward rows."""
    pts = {}
    for r in csv.DictReader(open(path)):
        if (r["backend"] == "cudnn" and r["data_type"] == "bfloat16" and r["attn_mask"] == "top_left"
                and r["profile_pass"] == "fwd" and r["deterministic_bwd"] == "False"):
            pts[int(r["q_seqlen"])] = (float(r["tflops"]), int(r["batch_size"]) * int(r["num_q_heads"]))
    return pts


def blackwell(d256, d128):
    a, b = forward_points(d256), forward_points(d128)
    ratios = []
    for s in sorted(set(a) & set(b)):
        (ta, ha), (tb, hb) = a[s], b[s]
        ratios.append(ta / tb * fill(hb, s) / fill(ha, s))
        print(f"  {s:6d} tokens: rate(256)/rate(128) {ratios[-1]:.3f} (fill-corrected)")
    r = geomean(ratios)
    d0 = 128 * max(r, 1.0)
    back = hopper()
    ratio = back["bwd"] / back["fwd"]
    print(f"blackwell forward d0 {d0:.1f} (geometric mean {r:.3f} over {len(ratios)} lengths); "
          f"backward {d0 * ratio:.1f} (x Hopper's {ratio:.3f})")


if __name__ == "__main__":
    if sys.argv[1:2] == ["hopper"]:
        hopper()
    elif sys.argv[1:2] == ["blackwell"] and len(sys.argv) == 4:
        blackwell(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
