#!/usr/bin/env python3
"""Fit the GEMM latency floor (`gpu.gemm_latency_s`, docs/cost-model.md, "Small GEMMs") to the
expert GEMMs measured on one H100 or H200 (benches/gpu_mechanisms.py part grouped_gemm_rows,
hardware/measured/{h100,h200}/torch-mechanisms.json).

Each row times 8 experts' GEMMs of one shape issued one by one on a stream with the host far
ahead; one GEMM's own time is seconds / 8 less the profile's gap between kernels
(gpu.kernel_gap_s, which pplan prices apart). The model of one GEMM:

    t = max(F / (peak x max x f(m) f(n) f(k)),  B / (hbm x eff) + L)

the kernel curve (f(d) = d / (d + d0): the profile's gemm_efficiency_max, gemm_half_dim) against
streaming its B = 2 (m k + k n + m n) bytes through HBM once plus a latency L. L is the least
squares value in log space over the rows with at most 256 rows an expert (where the curve alone
is 30-55 % fast), on a grid of 0.01 us.

    python3 scripts/fit_gemm_latency.py h100|h200    (the profile h100-80gb or h200)
"""
import json
import math
import sys

PROFILES = {"h100": "hardware/h100-80gb.json", "h200": "hardware/h200.json"}


def main():
    name = sys.argv[1] if len(sys.argv) > 1 else ""
    if name not in PROFILES:
        sys.exit(__doc__)
    gpu = json.load(open(PROFILES[name]))["gpu"]
    measured = f"hardware/measured/{name}/torch-mechanisms.json"
    peak, emax, d0 = gpu["peak_flops_per_s"], gpu["gemm_efficiency_max"], gpu["gemm_half_dim"]
    hbm, gap = gpu["hbm_bandwidth_bytes_per_s"] * gpu["hbm_efficiency"], gpu["kernel_gap_s"]
    f = lambda d: d / (d + d0)
    rows = [r for r in json.load(open(measured))["grouped_gemm_rows"] if r["impl"] == "loop"]

    def model(r, lat):
        m, n, k = r["m"], r["n"], r["k"]
        curve = 2 * m * n * k / (peak * emax * f(m) * f(n) * f(k))
        return max(curve, 2 * (m * k + k * n + m * n) / hbm + lat)

    one = lambda r: r["seconds"] / r["experts"] - gap
    small = [r for r in rows if r["rows_per_expert"] <= 256]
    sse = lambda lat: sum(math.log(model(r, lat) / one(r)) ** 2 for r in small)
    lat = min((i * 1e-8 for i in range(0, 1001)), key=sse)
    print(f"{name}: gemm latency {lat * 1e6:.2f} us over {len(small)} GEMM shapes of <= 256 rows")
    for rows_per in sorted({r["rows_per_expert"] for r in rows}):
        pts = [r for r in rows if r["rows_per_expert"] == rows_per]
        e = [model(r, lat) / one(r) - 1 for r in pts]
        c = [model(r, 0.0) / one(r) - 1 for r in pts]
        print(f"  {rows_per:6d} rows: with the floor mean {100 * sum(e) / len(e):+.1f} % "
              f"(|.| {100 * sum(map(abs, e)) / len(e):.1f} %), the curve alone "
              f"{100 * sum(c) / len(c):+.1f} %")


if __name__ == "__main__":
    main()
