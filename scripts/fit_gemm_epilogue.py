#!/usr/bin/env python3
"""How much a GEMM's output costs beside its main loop, from the committed GEMM sweeps.

pplan's GEMM law (docs/cost-model.md, "GEMM efficiency") is symmetric in m, n and k, so it
gives a weight-gradient GEMM (m x n the weight, k the tokens) the time of the forward GEMM
with the same FLOPs. The sweeps (`pplan-exec sweep`: cuBLAS, BF16 inputs, fp32 output, the
GEMMs of GPT-3 175B and Llama 3 70B layers on one H100 and one H200,
hardware/measured/{h100,h200}/sweep-*.json) time both. This script fits, by log least
squares over all of them,

    t = 2 m n k / (peak * A * f(m) f(n) f(k)) + alpha * 4 m n / BW,   f(d) = d / (d + 128)

with BW each GPU's HBM peak: alpha is the share of the fp32 output's write time that adds
to the main loop (0: hidden under it, the roofline). It prints the fit with alpha held at 0
(the law pplan uses, `gpu.gemm_efficiency_max`) and with alpha free, and the mean |error| of
each, per GPU and over both. Pure Python: a grid over alpha in steps of 0.001, and for each
alpha the best A by golden-section search.

    python3 scripts/fit_gemm_epilogue.py
"""
import json
import math

PEAK = 989.4e12
GPUS = {"h100": 3.35e12, "h200": 4.8e12}
MODELS = ["gpt3-175b", "llama3-70b"]


def rows(gpus):
    out = []
    for gpu in gpus:
        for model in MODELS:
            with open(f"hardware/measured/{gpu}/sweep-{model}.json") as f:
                for g in json.load(f)["gemm"]:
                    out.append((g["m"], g["n"], g["k"], g["seconds"], GPUS[gpu]))
    return out


def model(r, a, alpha):
    m, n, k, _, bw = r
    f = lambda d: d / (d + 128.0)
    return 2.0 * m * n * k / (PEAK * a * f(m) * f(n) * f(k)) + alpha * 4.0 * m * n / bw


def loss(data, a, alpha):
    return sum(math.log(model(r, a, alpha) / r[3]) ** 2 for r in data)


def best_a(data, alpha):
    lo, hi = 0.5, 1.0
    g = (math.sqrt(5.0) - 1.0) / 2.0
    for _ in range(60):
        x1, x2 = hi - g * (hi - lo), lo + g * (hi - lo)
        if loss(data, x1, alpha) < loss(data, x2, alpha):
            hi = x2
        else:
            lo = x1
    return (lo + hi) / 2.0


def mean_error(data, a, alpha):
    return sum(abs(model(r, a, alpha) / r[3] - 1.0) for r in data) / len(data)


def fit(data):
    best = None
    for i in range(0, 1501, 10):
        alpha = i / 1000.0
        a = best_a(data, alpha)
        cand = (loss(data, a, alpha), a, alpha)
        best = min(best, cand) if best else cand
    # Refine around the coarse minimum.
    _, _, coarse = best
    for i in range(max(0, int(coarse * 1000) - 10), int(coarse * 1000) + 11):
        alpha = i / 1000.0
        a = best_a(data, alpha)
        best = min(best, (loss(data, a, alpha), a, alpha))
    return best[1], best[2]


def main():
    for name, gpus in [("h100", ["h100"]), ("h200", ["h200"]), ("both", list(GPUS))]:
        data = rows(gpus)
        a0 = best_a(data, 0.0)
        a, alpha = fit(data)
        print(
            f"{name}: {len(data)} GEMMs; alpha 0: A {a0:.4f}, mean |error| "
            f"{100 * mean_error(data, a0, 0.0):.2f} %; alpha free: A {a:.4f}, alpha {alpha:.3f}, "
            f"mean |error| {100 * mean_error(data, a, alpha):.2f} %"
        )


if __name__ == "__main__":
    main()
