#!/usr/bin/env python3
"""Measurements of the mechanisms pplan still prices from fitted values (issue 43, item 2), on
one CUDA GPU through PyTorch's public API. The timing helpers are benches/gpu_kernels.py's.

- `grouped_gemm_rows`: the routed experts' GEMMs against rows per expert, 4 to 16,384, for four
  expert widths (Qwen3-30B-A3B, Qwen3-235B-A22B, DeepSeek-V3, GPT-OSS-120B), 8 local experts:
  the up projection (SwiGLU, 2 f wide), the down projection and the up weight gradient, as a
  loop of per-expert cuBLAS GEMMs on one stream and as torch._grouped_mm (CUTLASS grouped
  GEMM), timed with the host far ahead (queued behind a spin) so that only the GPU is timed;
  the host time of issuing each is recorded beside it.
- `permutation`: a dropless dispatcher's permutation kernels against bytes: the gather of each
  token's row once per routed expert into expert order (index_select), its backward (index_add_
  into zeros), and the un-permutation (gather back and the probability-weighted sum over the
  top-k), 512 to 16,384 tokens, top-8, hidden 2048/4096/7168, beside a plain copy of the
  same bytes.
- `long_context_attention`: causal and non-causal scaled_dot_product_attention at 32k to 256k
  tokens, head dim 128, flash and cuDNN backends, forward and backward (torchtitan's
  long-context runs and a context-parallel ring's blocks are these kernels).
- `moe_graph`: a MoE layer (router, top-k, permutation, a SwiGLU GEMM pair per local expert,
  un-permutation and weighted sum) forward and backward with fixed per-expert row counts (no
  host synchronisation, as a drop-and-pad or graphed dispatcher runs), eager against captured
  in one CUDA graph and replayed: at toy sizes (hidden 64, 64 tokens: host-bound) the eager
  host time per kernel and the graph's replay cost; at real sizes the eager wall, the replay
  wall and the kernels' GPU time (torch.profiler).
- `fp8_scaling`: FP8 GEMMs of Llama 3 70B's linear layers with per-tensor, row-wise and
  1x128 / 128x128 block-wise scales (torch._scaled_mm), against BF16 at the same shapes; the
  per-tensor and row-wise ones also with fast accumulation (the split accumulator is
  torch._scaled_mm's default).
- `graph_gaps`: the GPU's time between kernels replayed from one CUDA graph against the same
  kernels issued one by one with the host far ahead (the cases of gpu_kernels.py's
  `kernel_gaps`).

Usage: python3 benches/gpu_mechanisms.py OUT.json [PART ...] (all parts without).
"""
import json
import math
import os
import sys
import time
import traceback

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_kernels import (bench, device_fields, gap_cases, profiled_kernels, queued,  # noqa: E402
                         run_parts, sdpa_row)

DEV, BF16 = "cuda", torch.bfloat16


def queued_per_call(fn, target_s=0.02, lo=3, hi=200):
    """GPU seconds per call of `fn` with the host far ahead (`queued`), the number of calls
    chosen from one timed call so that a sample lasts about `target_s`; and the host seconds of
    issuing one call."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    once = max(time.perf_counter() - t0, 1e-6)
    n = max(lo, min(hi, math.ceil(target_s / once)))
    wall, host = queued(fn, n)
    return wall / n, host / n, n


# (model, hidden, expert ffn): Qwen3-30B-A3B, Qwen3-235B-A22B, DeepSeek-V3, GPT-OSS-120B (their
# Hugging Face config.json files).
EXPERT_WIDTHS = [("qwen3-30b-a3b", 2048, 768), ("qwen3-235b-a22b", 4096, 1536),
                 ("deepseek-v3", 7168, 2048), ("gpt-oss-120b", 2880, 2880)]
ROWS = [4, 16, 64, 256, 1024, 4096, 16384]
LOCAL = 8


def grouped_gemm_rows(res):
    for name, h, f in EXPERT_WIDTHS:
        for rows in ROWS:
            # (op, m, n, k) of one expert's GEMM.
            for op, m, n, k in [("up", rows, 2 * f, h), ("down", rows, h, f),
                                ("up_wgrad", 2 * f, h, rows)]:
                row = {"model": name, "hidden": h, "expert_ffn": f, "experts": LOCAL,
                       "rows_per_expert": rows, "op": op, "m": m, "n": n, "k": k}
                flops = 2.0 * m * n * k * LOCAL
                try:
                    # B column-major (n x k stored, used transposed), as a linear layer's
                    # weight and as torch._grouped_mm requires.
                    a = [torch.randn(m, k, device=DEV, dtype=BF16) for _ in range(LOCAL)]
                    bt = [torch.randn(n, k, device=DEV, dtype=BF16) for _ in range(LOCAL)]
                    b = [w.t() for w in bt]
                    c = [torch.empty(m, n, device=DEV, dtype=BF16) for _ in range(LOCAL)]

                    def loop():
                        for e in range(LOCAL):
                            torch.matmul(a[e], b[e], out=c[e])

                    impls = [("loop", loop)]
                    # torch._grouped_mm asserts on the device (which ends the process's
                    # CUDA context) unless each group's dynamic dimension is a multiple of
                    # 16 bytes; 16 rows keep both its M and K cases aligned.
                    if hasattr(torch, "_grouped_mm") and rows % 16 == 0:
                        if op == "up_wgrad":
                            # 2-D x 2-D: offsets split the shared K (the rows), one output per
                            # expert, as a grouped weight gradient runs.
                            ga = torch.cat(a, dim=1)  # m x (k * LOCAL)
                            gb = torch.cat(bt, dim=1).t()  # (k * LOCAL) x n
                        else:
                            ga = torch.cat(a, dim=0)  # (m * LOCAL) x k
                            gb = torch.stack(bt).transpose(-2, -1)  # LOCAL x k x n
                        span = k if op == "up_wgrad" else m
                        offs = (torch.arange(1, LOCAL + 1, device=DEV, dtype=torch.int32)
                                * span)

                        def grouped():
                            return torch._grouped_mm(ga, gb, offs=offs, out_dtype=BF16)
                        try:
                            grouped()
                            impls.append(("grouped_mm", grouped))
                        except Exception as e:  # noqa: BLE001 - recorded, not hidden
                            res["errors"].append(f"_grouped_mm {name} {op} rows={rows}: {e!r}")
                    for impl, fn in impls:
                        sec, host, calls = queued_per_call(fn)
                        res["grouped_gemm_rows"].append(dict(
                            row, impl=impl, seconds=sec, flops_per_s=flops / sec,
                            host_s_per_call=host, calls=calls))
                    del a, b, bt, c
                except Exception:  # noqa: BLE001
                    res["errors"].append(f"grouped rows {name} {op} {rows}: "
                                         f"{traceback.format_exc()}")
        torch.cuda.empty_cache()


PERMUTE_TOKENS = [512, 2048, 8192, 16384]
PERMUTE_HIDDEN = [2048, 4096, 7168]
TOP_K = 8


def permutation(res):
    experts = 128
    for h in PERMUTE_HIDDEN:
        for tokens in PERMUTE_TOKENS:
            row = {"tokens": tokens, "hidden": h, "top_k": TOP_K}
            try:
                x = torch.randn(tokens, h, device=DEV, dtype=BF16)
                top_i = torch.randint(0, experts, (tokens, TOP_K), device=DEV)
                top_p = torch.rand(tokens, TOP_K, device=DEV, dtype=torch.float32)
                order = torch.argsort(top_i.flatten(), stable=True)  # routed row -> slot
                src = order // TOP_K  # the token each slot reads
                inverse = torch.empty_like(order)
                inverse[order] = torch.arange(order.numel(), device=DEV)
                rows = x.index_select(0, src)
                grad_rows = torch.randn_like(rows)
                n_rows = tokens * TOP_K
                elem = 2  # BF16
                cases = [
                    # name, fn, bytes moved at least (each element read or written once)
                    ("permute_gather", lambda: x.index_select(0, src),
                     elem * h * (n_rows + n_rows)),
                    ("permute_backward_index_add",
                     lambda: torch.zeros_like(x).index_add_(0, src, grad_rows),
                     elem * h * (tokens + n_rows + tokens)),
                    ("unpermute_weighted_sum",
                     lambda: (rows.index_select(0, inverse).view(tokens, TOP_K, h)
                              * top_p.unsqueeze(-1).to(BF16)).sum(dim=1),
                     elem * h * (n_rows + tokens)),
                    ("copy_same_rows", lambda: rows.clone(), elem * h * 2 * n_rows),
                ]
                for name, fn, nbytes in cases:
                    sec, host, calls = queued_per_call(fn)
                    kernel_s, kernels = profiled_kernels(fn)
                    res["permutation"].append(dict(
                        row, kernel=name, seconds=sec, bytes=nbytes, bytes_per_s=nbytes / sec,
                        host_s_per_call=host, kernels=kernels, kernel_s=kernel_s))
                del x, top_i, top_p, order, src, inverse, rows, grad_rows
            except Exception:  # noqa: BLE001
                res["errors"].append(f"permutation h={h} tokens={tokens}: "
                                     f"{traceback.format_exc()}")
            torch.cuda.empty_cache()


# (heads, tokens): Llama 3.1 8B's 32 heads at 32k, then fewer heads as the sequence grows so
# that each call stays under a second: the law's dependence on length at fixed work.
LONG = [(32, 32768), (8, 32768), (8, 65536), (4, 131072), (2, 262144)]


def long_context_attention(res):
    from torch.nn.attention import SDPBackend
    hd = 128
    backends = [("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)]
    for heads, seq in LONG:
        for causal in (True, False):
            try:
                q = torch.randn(1, heads, seq, hd, device=DEV, dtype=BF16, requires_grad=True)
                k = torch.randn(1, heads, seq, hd, device=DEV, dtype=BF16, requires_grad=True)
                v = torch.randn(1, heads, seq, hd, device=DEV, dtype=BF16, requires_grad=True)
                g = torch.randn(1, heads, seq, hd, device=DEV, dtype=BF16)
                fwd_flops = 2.0 * 2.0 * heads * seq * seq * hd / (2.0 if causal else 1.0)
                for bname, be in backends:
                    row = {"seq": seq, "heads": heads, "head_dim": hd, "causal": causal,
                           "backend": bname}
                    try:
                        res["long_context_attention"].append(sdpa_row(
                            row, be, q, k, v, g, fwd_flops, is_causal=causal))
                    except Exception as e:  # noqa: BLE001
                        res["errors"].append(f"long context {bname} h={heads} s={seq} "
                                             f"causal={causal}: {e!r}")
                del q, k, v, g
            except Exception:  # noqa: BLE001
                res["errors"].append(f"long context h={heads} s={seq}: "
                                     f"{traceback.format_exc()}")
            torch.cuda.empty_cache()


# (name, hidden, expert ffn, local experts, tokens a rank, experts in the router): Qwen3-30B-A3B
# at EP 8, Qwen3-235B-A22B at t = 2, EP 8, DeepSeek-V3 at EP 64.
GRAPH_LAYERS = [("qwen3-30b-a3b-ep8", 2048, 768, 16, 4096, 128),
                ("qwen3-235b-a22b-t2-ep8", 4096, 1536, 16, 2048, 128),
                ("deepseek-v3-ep64", 7168, 2048, 4, 4096, 256)]


def padded_moe(h, f, local, tokens, experts):
    """A MoE layer whose per-expert row counts are fixed (tokens x top-k / local each: the
    routing forced to balance, as a drop-and-pad dispatcher pads to), so it never reads a count
    on the host and can be captured in a CUDA graph. Returns (step, params): the step and the
    tensors it reads, kept alive with it."""
    w = lambda *s: (0.02 * torch.randn(*s, device=DEV, dtype=BF16)).requires_grad_()
    x = torch.randn(tokens, h, device=DEV, dtype=BF16, requires_grad=True)
    router, w1, w2 = w(experts, h), [w(2 * f, h) for _ in range(local)], \
        [w(h, f) for _ in range(local)]
    cap = tokens * TOP_K // local
    slot = torch.arange(tokens * TOP_K, device=DEV) % local
    order = torch.argsort(slot, stable=True)
    src = order // TOP_K
    inverse = torch.empty_like(order)
    inverse[order] = torch.arange(order.numel(), device=DEV)
    grad = torch.randn(tokens, h, device=DEV, dtype=BF16)
    params = [x, router] + w1 + w2

    def step():
        probs = torch.softmax((x @ router.t()).float(), dim=-1)
        top_p, _ = probs.topk(TOP_K, dim=-1)
        rows = x.index_select(0, src)
        outs = []
        for e in range(local):
            a, b = (rows[e * cap:(e + 1) * cap] @ w1[e].t()).chunk(2, dim=-1)
            outs.append((F.silu(a) * b) @ w2[e].t())
        back = torch.cat(outs).index_select(0, inverse).view(tokens, TOP_K, h)
        y = (back * top_p.unsqueeze(-1).to(BF16)).sum(dim=1)
        torch.autograd.backward(y, grad)
    return step, params


def graph_of(step):
    """`step` captured in one CUDA graph, warmed up on a side stream first as PyTorch's
    whole-network capture does (gradients accumulate into the same buffers at every replay:
    what is captured is the accumulation)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        step()
    torch.cuda.synchronize()
    return g


def wall_per_call(fn, n):
    fn()
    torch.cuda.synchronize()
    walls = []
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
        walls.append((time.perf_counter() - t0) / n)
    walls.sort()
    return walls[1]


def moe_graph(res):
    for name, h, f, local, tokens, experts in GRAPH_LAYERS:
        for size, (hh, ff, tt) in [("toy", (64, 64, 64)), ("real", (h, f, tokens))]:
            row = {"model": name, "size": size, "hidden": hh, "expert_ffn": ff,
                   "local_experts": local, "tokens": tt, "top_k": TOP_K, "experts": experts}
            try:
                step, params = padded_moe(hh, ff, local, tt, experts)
                n = 50 if size == "toy" else 10
                eager = wall_per_call(step, n)
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for _ in range(n):
                    step()
                eager_host = (time.perf_counter() - t0) / n
                torch.cuda.synchronize()
                kernel_s, kernels = profiled_kernels(step)
                row.update(eager_wall_s=eager, eager_host_s=eager_host, kernel_s=kernel_s,
                           kernels=kernels, eager_host_s_per_kernel=eager_host / max(kernels, 1))
                try:
                    g = graph_of(step)
                    replay = wall_per_call(g.replay, n)
                    torch.cuda.synchronize()
                    t0 = time.perf_counter()
                    for _ in range(n):
                        g.replay()
                    replay_host = (time.perf_counter() - t0) / n
                    torch.cuda.synchronize()
                    row.update(graph_wall_s=replay, graph_host_s=replay_host)
                    del g
                except Exception:  # noqa: BLE001
                    res["errors"].append(f"moe graph capture {name} {size}: "
                                         f"{traceback.format_exc()}")
                res["moe_graph"].append(row)
                del step, params
            except Exception:  # noqa: BLE001
                res["errors"].append(f"moe graph {name} {size}: {traceback.format_exc()}")
            torch.cuda.empty_cache()


# Llama 3 70B's four linear layers at t = 1, 2, 4, 8, 4,096 tokens (one micro-batch).
FP8_SHAPES = [(t, op, k, n) for t in (1, 2, 4, 8)
              for op, k, n in [("qkv", 8192, (8192 + 2 * 1024) // t), ("proj", 8192 // t, 8192),
                               ("fc1", 8192, 2 * 28672 // t), ("fc2", 28672 // t, 8192)]]


def fp8_scaling(res):
    m = 4096
    for t, op, k, n in FP8_SHAPES:
        row = {"model": "llama3-70b", "tp": t, "op": op, "m": m, "n": n, "k": k}
        flops = 2.0 * m * n * k
        x = torch.randn(m, k, device=DEV, dtype=BF16)
        w = torch.randn(n, k, device=DEV, dtype=BF16)
        x8 = x.to(torch.float8_e4m3fn)
        w8 = w.to(torch.float8_e4m3fn)
        one = torch.ones((), device=DEV, dtype=torch.float32)
        variants = [
            ("bf16", lambda: torch.matmul(x, w.t())),
            ("fp8_tensorwise", lambda: torch._scaled_mm(
                x8, w8.t(), scale_a=one, scale_b=one, out_dtype=BF16)),
        ]
        sa_row = torch.ones(m, 1, device=DEV, dtype=torch.float32)
        sb_row = torch.ones(1, n, device=DEV, dtype=torch.float32)
        variants.append(("fp8_rowwise", lambda: torch._scaled_mm(
            x8, w8.t(), scale_a=sa_row, scale_b=sb_row, out_dtype=BF16)))
        if k % 128 == 0 and n % 128 == 0:
            # DeepSeek-V3's recipe: 1 x 128 tiles of the activations, 128 x 128 blocks of the
            # weights; scales outer-dimension-major as cuBLASLt and CUTLASS take them.
            sa_blk = torch.ones(k // 128, m, device=DEV, dtype=torch.float32).t()
            sb_blk = torch.ones(n // 128, k // 128, device=DEV, dtype=torch.float32).t()
            variants.append(("fp8_blockwise_1x128_128x128", lambda: torch._scaled_mm(
                x8, w8.t(), scale_a=sa_blk, scale_b=sb_blk, out_dtype=BF16)))
        # The same per-tensor and row-wise GEMMs with fast accumulation (cuBLASLt
        # CUBLASLT_MATMUL_DESC_FAST_ACCUM = 1: partial sums stay in the tensor cores' own
        # accumulator), which Transformer Engine's forward GEMMs use; torch._scaled_mm's
        # default (use_fast_accum=False) is the split accumulator of its gradient GEMMs.
        variants.append(("fp8_tensorwise_fast_accum", lambda: torch._scaled_mm(
            x8, w8.t(), scale_a=one, scale_b=one, out_dtype=BF16, use_fast_accum=True)))
        variants.append(("fp8_rowwise_fast_accum", lambda: torch._scaled_mm(
            x8, w8.t(), scale_a=sa_row, scale_b=sb_row, out_dtype=BF16,
            use_fast_accum=True)))
        for impl, fn in variants:
            try:
                sec = bench(fn)
                res["fp8_scaling"].append(dict(row, impl=impl, seconds=sec,
                                               flops_per_s=flops / sec))
            except Exception as e:  # noqa: BLE001 - recorded, not hidden
                res["errors"].append(f"fp8 {impl} t={t} {op}: {e!r}")
        del x, w, x8, w8
    torch.cuda.empty_cache()


def graph_gaps(res):
    """The GPU's time between back-to-back kernels replayed from one CUDA graph, against the
    same kernels issued one by one with the host far ahead (`queued`): n calls captured in a
    graph, the graph replayed behind a spin kernel; (wall - the kernels' own time) / kernels,
    the kernels' time from torch.profiler over the eager calls (the spin left out). The
    cases of benches/gpu_kernels.py part `kernel_gaps`."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile
    for name, fn, n in gap_cases(static_output=True):
        try:
            def many():
                for _ in range(n):
                    fn()
            eager_wall, _ = queued(many, 1)
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                many()
                torch.cuda.synchronize()
            ev = [x for x in prof.key_averages() if x.device_type == DeviceType.CUDA]
            busy = sum(x.self_device_time_total for x in ev) * 1e-6
            count = sum(x.count for x in ev)
            g = graph_of(many)
            graph_wall, _ = queued(g.replay, 1)
            res["graph_gaps"].append({
                "case": name, "calls": n, "kernels": count, "kernel_s": busy,
                "eager_wall_s": eager_wall, "graph_wall_s": graph_wall,
                "eager_gap_s_per_kernel": (eager_wall - busy) / max(count, 1),
                "graph_gap_s_per_kernel": (graph_wall - busy) / max(count, 1)})
            del g
        except Exception:  # noqa: BLE001
            res["errors"].append(f"graph gaps {name}: {traceback.format_exc()}")


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "gpu-mechanisms.json"
    parts = (grouped_gemm_rows, permutation, long_context_attention, moe_graph, fp8_scaling,
             graph_gaps)
    res = dict(device_fields("benches/gpu_mechanisms.py"),
               cuda_device_max_connections=os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS",
                                                          "default"))
    run_parts(res, parts, sys.argv[2:], out)

if __name__ == "__main__":
    main()
