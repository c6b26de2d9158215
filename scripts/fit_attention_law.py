#!/usr/bin/env python3
"""Fit pplan's fused-attention law to published cuDNN SDPA timings.

The law (docs/cost-model.md, "Attention"; `Hardware::attention_efficiency_at`):

    efficiency = A * s / (s + s0) * H s / (H s + n0)

with s the query tokens per sequence, H = batch x query heads, n0 = gpu.attention_half_work.
For each pass (forward, backward) and each CSV this script fits A and s0 by log least squares
(a grid over s0 in steps of 10 tokens; for each s0 the best log A is the mean residual) with n0
held at the value given: the published points have one head count each, so s0 and n0 cannot be
told apart from them. It reads the causal (`is_causal` True / `attn_mask` top_left), BF16,
non-deterministic cuDNN rows of the cudnn-frontend benchmark CSVs in
hardware/published/cudnn-frontend/ (both of their column layouts) and prints the fit, its mean
and worst |error|, and each point.

    python3 scripts/fit_attention_law.py PEAK_FLOPS N0 FILE.csv [FILE.csv ...]
    python3 scripts/fit_attention_law.py 2.5e15 22000 hardware/published/cudnn-frontend/sdpa_bf16_benchmark_results_NVIDIA_GB200.csv

With --check A_F S0_F A_B S0_B it prints the errors of that law instead of fitting (held-out
points).

A file ending in .json is one of pplan's own kernel measurements (benches/gpu_kernels.py,
hardware/measured/): its causal `attention` and `long_attention` rows of the SDPA backend given
with --backend (default flash, PyTorch's FlashAttention-2 kernels), batch 1, `heads` per rank:

    python3 scripts/fit_attention_law.py --backend flash 989.4e12 22000 hardware/measured/h100/torch-kernels.json
"""
import csv
import math
import sys


def measured_points(path, backend):
    """(s, H, forward TFLOP/s, backward TFLOP/s) of a measured JSON's causal rows of `backend`."""
    import json
    d = json.load(open(path))
    return [(r["seq"], r["heads"], r["forward_flops_per_s"] / 1e12, r["backward_flops_per_s"] / 1e12)
            for part in ("attention", "long_attention") for r in d.get(part, [])
            if r["backend"] == backend and r.get("causal", True) and r["seq"] == r.get("query_tokens", r["seq"])]


def points(path, backend=None):
    """(s, H, forward TFLOP/s, backward TFLOP/s) of the causal BF16 cuDNN rows."""
    if path.endswith(".json"):
        return measured_points(path, backend or "flash")
    out = []
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if rows and "is_causal" in rows[0]:
        for r in rows:
            if r["is_causal"] != "True" or "cudnn" not in r["backend"] or "fp8" in r["backend"]:
                continue
            h = int(r["batch_size"]) * int(r["num_q_heads"])
            out.append((int(r["q_seqlen"]), h, float(r["fwd_tflops_per_sec"]),
                        float(r["bwd_tflops_per_sec"])))
        return out
    fwd, bwd = {}, {}
    for r in rows:
        if (r["backend"] != "cudnn" or r["data_type"] != "bfloat16"
                or r["attn_mask"] != "top_left" or r["deterministic_bwd"] == "True"):
            continue
        key = (int(r["q_seqlen"]), int(r["batch_size"]) * int(r["num_q_heads"]))
        p = r["profile_pass"]
        if p == "both":
            fwd[key], bwd[key] = float(r["fwd_tflops"]), float(r["bwd_tflops"])
        elif p == "fwd":
            fwd[key] = float(r["tflops"])
        elif p == "bwd":
            bwd[key] = float(r["tflops"])
    for key in sorted(fwd):
        if key in bwd:
            out.append((key[0], key[1], fwd[key], bwd[key]))
    return out


def law(a, s0, n0, s, h):
    return a * s / (s + s0) * (h * s) / (h * s + n0)


def fit(pts, n0):
    best = None
    for s0 in range(0, 10001, 10):
        logs = [math.log(e) - math.log(law(1.0, s0, n0, s, h)) for s, h, e in pts]
        log_a = sum(logs) / len(logs)
        sse = sum((x - log_a) ** 2 for x in logs)
        if best is None or sse < best[0]:
            best = (sse, math.exp(log_a), s0)
    return best[1], best[2]


def errors(pts, a, s0, n0):
    errs = [law(a, s0, n0, s, h) / e - 1.0 for s, h, e in pts]
    return errs, sum(abs(x) for x in errs) / len(errs), max(abs(x) for x in errs)


def main(argv):
    check, backend = None, None
    if "--backend" in argv:
        i = argv.index("--backend")
        backend = argv[i + 1]
        argv = argv[:i] + argv[i + 2:]
    if "--check" in argv:
        i = argv.index("--check")
        check = [float(x) for x in argv[i + 1:i + 5]]
        argv = argv[:i] + argv[i + 5:]
    peak, n0, files = float(argv[0]), float(argv[1]), argv[2:]
    pts = [p for f in files for p in points(f, backend)]
    if not pts:
        sys.exit("no causal BF16 points in " + ", ".join(files))
    for name, col, laws in (("forward", 2, check[0:2] if check else None),
                            ("backward", 3, check[2:4] if check else None)):
        eff = [(t[0], t[1], t[col] * 1e12 / peak) for t in pts]
        a, s0 = laws if laws else fit(eff, n0)
        errs, mean, worst = errors(eff, a, s0, n0)
        print(f"{name}: A {a:.3f} s0 {s0:.0f} (n0 {n0:.0f}) over {len(eff)} points: "
              f"mean |error| {mean * 100:.1f} %, worst {worst * 100:.1f} %")
        for (s, h, e), x in zip(eff, errs):
            print(f"  s {s:>6} H {h:>4}: published {e:.3f} of peak, law {e * (1 + x):.3f} "
                  f"({x * 100:+.1f} %)")


if __name__ == "__main__":
    main(sys.argv[1:])
