#!/usr/bin/env python3
"""Blackwell's GEMM half dimension from XLA's measured GEMM table (docs/cost-model.md,
"Hardware"): fit max * prod d/(d + d0) over m' = b m, n, k to the BF16 entries whose every
dimension is at least 2048, for H100 (sm_90) and B200 (sm_100), by least squares on the log
of the efficiency with d0 on an 8-element grid, and scale the measured H100 half dimension
(128, hardware/h100-80gb.json) by the ratio: Blackwell's larger tiles need larger GEMMs.

usage: python3 scripts/fit_gemm_half_dim.py [hardware/published/xla/default_matmul_perf_table.csv]
"""
import csv, math, sys

PEAK_BF16 = {"sm_90": 989.4e12, "sm_100_B200": 2250e12}
H100_HALF_DIM = 128.0

def points(rows, gpu):
    out = []
    for r in rows:
        if r["gpu"] != gpu or r["dtype"] != "bf16xbf16->bf16":
            continue
        b, m, n, k = (int(r[x]) for x in "bmnk")
        if min(m, n, k) < 2048:
            continue
        out.append((b * m, n, k, float(r["flops_per_s"]) / PEAK_BF16[gpu]))
    return out

def fit(pts):
    best = None
    for d0 in range(8, 2049, 8):
        logs = [math.log(e) - sum(math.log(x / (x + d0)) for x in (m, n, k)) for m, n, k, e in pts]
        mean = sum(logs) / len(logs)
        sse = sum((x - mean) ** 2 for x in logs)
        if best is None or sse < best[0]:
            best = (sse, d0, math.exp(mean))
    _, d0, mx = best
    err = [abs(mx * math.prod(x / (x + d0) for x in (m, n, k)) / e - 1) for m, n, k, e in pts]
    return d0, mx, sum(err) / len(err), max(err)

def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "hardware/published/xla/default_matmul_perf_table.csv"
    rows = list(csv.DictReader(line for line in open(path) if not line.startswith("#")))
    d0s = {}
    for gpu in ("sm_90", "sm_100_B200"):
        pts = points(rows, gpu)
        d0, mx, mean, worst = fit(pts)
        d0s[gpu] = d0
        print(f"{gpu}: {len(pts)} BF16 GEMMs, d0 {d0}, max {mx:.3f}, mean |error| {100*mean:.1f} %, worst {100*worst:.1f} %")
    ratio = d0s["sm_100_B200"] / d0s["sm_90"]
    print(f"Blackwell gpu.gemm_half_dim = {H100_HALF_DIM:.0f} x {d0s['sm_100_B200']}/{d0s['sm_90']} = {H100_HALF_DIM * ratio:.0f}")

if __name__ == "__main__":
    main()
