#!/usr/bin/env python3
"""Kernel measurements on one CUDA GPU with PyTorch: what pplan-exec's own kernels cannot show.

pplan-exec's layers run cuBLAS GEMMs with f32 output and unfused attention, in BF16 or F32
only. Megatron-Core runs BF16-output GEMMs, FP8 GEMMs (Transformer Engine), fused flash
attention (cuDNN or FlashAttention) and fused norms. This script times those kernels through
PyTorch's public API so that the cost model's H100/H200 curves can be set beside them:

- GEMMs, forward pass of the four linear layers of a transformer layer (QKV, attention output,
  MLP up, MLP down) at tensor-parallel sizes 1, 2, 4, 8 and micro-batches 1, 2, 4: BF16
  (torch.matmul, BF16 output) and FP8 E4M3 with per-tensor scales (torch._scaled_mm, BF16
  output, the GEMM Transformer Engine's per-tensor recipe calls);
- causal attention, forward and forward+backward, BF16, head dim 128, through
  scaled_dot_product_attention with the FlashAttention and the cuDNN backends;
- memory-bound kernels: RMSNorm and LayerNorm forward and backward, SiLU-gate (unfused),
  the FP8 cast with its amax, and device-to-device copies;
- per-op host overhead of a tiny PyTorch op;
- grouped expert GEMMs (mixture of experts): the up (gated) and down projections of E local
  experts with 256-4,096 routed rows each, forward, input- and weight-gradient shapes, run as
  a loop of per-expert GEMMs on one stream, the same loop over 4 streams (Transformer
  Engine's multi-stream grouped linear layer), and torch._grouped_mm where PyTorch has it;
  each with the host time of issuing the calls;
- causal attention at 16k-32k tokens with 4-16 heads (Llama 2 7B at t = 2-8) and the
  non-causal half-chunk blocks of a context-parallel ring step;
- an eager MoE block's forward and backward (Qwen3 and DeepSeek-V3 shapes, 4-16 local
  experts, 1k-4k tokens) with the dispatcher's host synchronisation: wall time against the
  kernels' GPU time;
- stacks of attention + MoE layers, forward and backward apart: wall time against the host
  time and the GPU time of the same steps (the form of pplan's MoE host time);
- the same layers in a pipeline's steady-state order (forward of one micro-batch, backward
  of the previous, back to back) against forward and backward apart;
- the GPU's gap between back-to-back kernels queued far ahead of it;
- Transformer Engine's grouped linear layer (expert GEMMs over four streams) against one
  stream, with the host far ahead;
- the causal and non-causal attention blocks of a context-parallel ring's steps;
- the last stage's output layer and Megatron-Core's unfused vocabulary-parallel cross-entropy;
- the first stage's dense word-embedding gradient and its accumulation into the fp32 main
  gradient.

Every figure: CUDA events around back-to-back calls (at least 10 ms a sample), one untimed call
first, median of 3 samples. Usage: python3 benches/gpu_kernels.py OUT.json [PART ...], where a
PART (gemms, attention, memory_bound, host_overhead, grouped_gemms, long_attention,
moe_layer_host, moe_layer_sync, moe_layer_1f1b, kernel_gaps, grouped_streams, cp_attention,
output_layer, embedding_grad, sustained) picks the parts to run; all of them without.
"""
import json
import math
import sys
import time
import traceback

import torch
import torch.nn.functional as F

REPEATS = 3
TARGET_S = 0.01

# (name, hidden, heads, kv_heads, ffn, gated, seq): GPT-3 175B (Brown et al. 2020, Table 2.1)
# and Llama 3 70B (meta-llama/Meta-Llama-3-70B config.json).
MODELS = [
    ("gpt3-175b", 12288, 96, 96, 49152, False, 2048),
    ("llama3-70b", 8192, 64, 8, 28672, True, 4096),
]
TPS = [1, 2, 4, 8]
MBS = [1, 2, 4]


def bench(fn):
    fn()
    torch.cuda.synchronize()
    s = torch.cuda.Event(enable_timing=True)
    e = torch.cuda.Event(enable_timing=True)
    s.record()
    fn()
    e.record()
    e.synchronize()
    once = max(s.elapsed_time(e) * 1e-3, 1e-7)
    calls = max(1, min(1000, math.ceil(TARGET_S / once)))
    out = []
    for _ in range(REPEATS):
        s.record()
        for _ in range(calls):
            fn()
        e.record()
        e.synchronize()
        out.append(s.elapsed_time(e) * 1e-3 / calls)
    out.sort()
    return out[len(out) // 2]


def queued(fn, calls):
    """`calls` back-to-back calls of `fn` queued behind a spin kernel, so that the host is far
    ahead of the GPU: the median over REPEATS of their GPU wall (CUDA events from the spin's end)
    and of the host time of issuing them; one untimed call first."""
    fn()
    torch.cuda.synchronize()
    s = torch.cuda.Event(enable_timing=True)
    e = torch.cuda.Event(enable_timing=True)
    walls, hosts = [], []
    for _ in range(REPEATS):
        torch.cuda._sleep(100_000_000)
        s.record()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        hosts.append(time.perf_counter() - t0)
        e.record()
        e.synchronize()
        walls.append(s.elapsed_time(e) * 1e-3)
    walls.sort()
    hosts.sort()
    return walls[len(walls) // 2], hosts[len(hosts) // 2]


def linears(h, heads, kv, ffn, gated, t):
    hd = h // heads
    kv_out = 2 * hd * max(kv // t, 1)
    up = ffn * (2 if gated else 1) // t
    return [("qkv", h, heads * hd // t + kv_out), ("proj", heads * hd // t, h),
            ("fc1", h, up), ("fc2", ffn // t, h)]


def gemms(res):
    dev = "cuda"
    one = torch.ones((), device=dev, dtype=torch.float32)
    for name, h, heads, kv, ffn, gated, seq in MODELS:
        for t in TPS:
            for mb in MBS:
                tokens = mb * seq
                for op, fan_in, fan_out in linears(h, heads, kv, ffn, gated, t):
                    x = torch.randn(tokens, fan_in, device=dev, dtype=torch.bfloat16)
                    w = torch.randn(fan_out, fan_in, device=dev, dtype=torch.bfloat16)
                    flops = 2.0 * tokens * fan_in * fan_out
                    row = {"model": name, "op": op, "tp": t, "micro_batch": mb, "m": tokens,
                           "n": fan_out, "k": fan_in}
                    sec = bench(lambda: torch.matmul(x, w.t()))
                    res["gemm_bf16"].append(dict(row, seconds=sec, flops_per_s=flops / sec))
                    try:
                        x8 = x.to(torch.float8_e4m3fn)
                        w8 = w.to(torch.float8_e4m3fn)
                        f8 = lambda: torch._scaled_mm(x8, w8.t(), scale_a=one, scale_b=one,
                                                      out_dtype=torch.bfloat16)
                        sec = bench(f8)
                        res["gemm_fp8"].append(dict(row, seconds=sec, flops_per_s=flops / sec))
                        del x8, w8
                    except Exception as e:  # noqa: BLE001 - recorded, not hidden
                        res["errors"].append(f"fp8 {name} {op} t={t} mb={mb}: {e!r}")
                    del x, w
        torch.cuda.empty_cache()


def sdpa_row(row, backend, q, k, v, g, fwd_flops, **kw):
    """`row` with the forward and backward times and rates of scaled_dot_product_attention on
    `backend` (backward = forward+backward - forward, 2.5 x the forward FLOPs)."""
    from torch.nn.attention import sdpa_kernel
    with sdpa_kernel([backend]):
        sf = bench(lambda: F.scaled_dot_product_attention(q, k, v, **kw))

        def fb():
            o = F.scaled_dot_product_attention(q, k, v, **kw)
            torch.autograd.grad(o, (q, k, v), g)
        sfb = bench(fb)
    sb = max(sfb - sf, 1e-9)
    return dict(row, forward_s=sf, backward_s=sb, forward_flops_per_s=fwd_flops / sf,
                backward_flops_per_s=2.5 * fwd_flops / sb)


def attention(res):
    from torch.nn.attention import SDPBackend
    dev = "cuda"
    backends = [("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)]
    for name, h, heads, kv, ffn, gated, _ in MODELS:
        hd = h // heads
        for t in TPS:
            for seq in [2048, 4096, 8192]:
                hq, hk = heads // t, max(kv // t, 1)
                q = torch.randn(1, hq, seq, hd, device=dev, dtype=torch.bfloat16, requires_grad=True)
                k = torch.randn(1, hk, seq, hd, device=dev, dtype=torch.bfloat16, requires_grad=True)
                v = torch.randn(1, hk, seq, hd, device=dev, dtype=torch.bfloat16, requires_grad=True)
                g = torch.randn(1, hq, seq, hd, device=dev, dtype=torch.bfloat16)
                # Causal: half of the s^2 score matrix; 2 GEMMs forward (QK^T, PV), 5 backward.
                fwd_flops = 2.0 * 2.0 * hq * seq * seq * hd / 2.0
                for bname, be in backends:
                    row = {"model": name, "tp": t, "seq": seq, "heads": hq, "kv_heads": hk,
                           "head_dim": hd, "backend": bname}
                    try:
                        res["attention"].append(sdpa_row(
                            row, be, q, k, v, g, fwd_flops, is_causal=True,
                            enable_gqa=hk != hq))
                    except Exception as e:  # noqa: BLE001
                        res["errors"].append(f"attention {bname} {name} t={t} s={seq}: {e!r}")
                del q, k, v, g
        torch.cuda.empty_cache()


# Llama 2 7B (meta-llama/Llama-2-7b-hf config.json: 32 heads of 128, no grouped-query
# attention) at t = 2, 4, 8, at the per-rank lengths of NeMo's long-sequence runs
# (docs/validation.md, "Held out: NeMo's long-sequence runs"): the attention law was fitted at
# 2k-8k tokens and 8-96 heads a rank; these settle what it gives beyond.
LONG_ATTENTION = [(16, 16384), (8, 16384), (8, 32768), (4, 32768)]


def long_attention(res):
    """Causal attention at 16k-32k tokens with 4-16 heads, and the non-causal half-chunk
    blocks of a load-balanced context-parallel ring step (s/2 queries against s keys)."""
    from torch.nn.attention import SDPBackend
    dev, hd = "cuda", 128
    backends = [("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)]
    for heads, seq in LONG_ATTENTION:
        for causal, sq in [(True, seq), (False, seq // 2)]:
            q = torch.randn(1, heads, sq, hd, device=dev, dtype=torch.bfloat16, requires_grad=True)
            k = torch.randn(1, heads, seq, hd, device=dev, dtype=torch.bfloat16, requires_grad=True)
            v = torch.randn(1, heads, seq, hd, device=dev, dtype=torch.bfloat16, requires_grad=True)
            g = torch.randn(1, heads, sq, hd, device=dev, dtype=torch.bfloat16)
            fwd_flops = 2.0 * 2.0 * heads * sq * seq * hd / (2.0 if causal else 1.0)
            for bname, be in backends:
                row = {"model": "llama2-7b", "seq": seq, "query_tokens": sq, "heads": heads,
                       "kv_heads": heads, "head_dim": hd, "causal": causal, "backend": bname}
                try:
                    res["long_attention"].append(sdpa_row(
                        row, be, q, k, v, g, fwd_flops, is_causal=causal))
                except Exception as e:  # noqa: BLE001
                    res["errors"].append(f"long attention {bname} h={heads} s={seq}: {e!r}")
            del q, k, v, g
        torch.cuda.empty_cache()


# The softmax floor (docs/cost-model.md, "The softmax floor"): cuDNN's causal rate at head
# dimension 64 (GPT-OSS's heads: 64 query, 8 key/value heads) against 128 at the same FLOPs per
# call (twice the heads at 64), 2k-8k tokens, which the Hopper profiles take from
# FlashAttention-3's figures and the Blackwell ones from 256-over-128 points only.
# (head dim, heads, KV heads). The first H200 run (2026-11-28) had (32, 128, 4) for the second
# entry, head dimension 32, by a slip for (128, 32, 4); its file keeps those rows as what they
# are (head_dim 32). (128, 64, 8) is GPT-OSS's head counts at 128.
HEAD_DIM_ATTENTION = [(64, 64, 8), (128, 32, 4), (128, 64, 8)]


def attention_head_dim(res):
    from torch.nn.attention import SDPBackend
    dev = "cuda"
    for hd, heads, kv in HEAD_DIM_ATTENTION:
        for seq in [2048, 4096, 8192]:
            q = torch.randn(1, heads, seq, hd, device=dev, dtype=torch.bfloat16, requires_grad=True)
            k = torch.randn(1, kv, seq, hd, device=dev, dtype=torch.bfloat16, requires_grad=True)
            v = torch.randn(1, kv, seq, hd, device=dev, dtype=torch.bfloat16, requires_grad=True)
            g = torch.randn(1, heads, seq, hd, device=dev, dtype=torch.bfloat16)
            fwd_flops = 2.0 * 2.0 * heads * seq * seq * hd / 2.0
            row = {"seq": seq, "heads": heads, "kv_heads": kv, "head_dim": hd, "backend": "cudnn"}
            try:
                res["attention_head_dim"].append(sdpa_row(
                    row, SDPBackend.CUDNN_ATTENTION, q, k, v, g, fwd_flops, is_causal=True,
                    enable_gqa=True))
            except Exception as e:  # noqa: BLE001
                res["errors"].append(f"attention head dim {hd} s={seq}: {e!r}")
            del q, k, v, g
    torch.cuda.empty_cache()


def memory_bound(res):
    dev = "cuda"
    for tokens, h in [(8192, 8192), (16384, 12288)]:
        x = torch.randn(tokens, h, device=dev, dtype=torch.bfloat16, requires_grad=True)
        wgt = torch.ones(h, device=dev, dtype=torch.bfloat16, requires_grad=True)
        b = torch.zeros(h, device=dev, dtype=torch.bfloat16, requires_grad=True)
        gy = torch.randn(tokens, h, device=dev, dtype=torch.bfloat16)
        n = tokens * h
        cases = [
            # (name, fn, bytes: each bf16 tensor of n elements read or written counts 2n)
            ("rmsnorm_forward", lambda: F.rms_norm(x, (h,), wgt), 2 * 2 * n),
            ("layernorm_forward", lambda: F.layer_norm(x, (h,), wgt, b), 2 * 2 * n),
            ("rmsnorm_forward_backward",
             lambda: torch.autograd.grad(F.rms_norm(x, (h,), wgt), (x, wgt), gy),
             2 * 2 * n + 3 * 2 * n),
            ("silu_gate_unfused", lambda: F.silu(x) * x, 2 * 2 * n),
            ("fp8_cast_with_amax",
             lambda: (x.detach() * (448.0 / x.detach().abs().amax())).to(torch.float8_e4m3fn),
             2 * n + n),
            ("copy_d2d", lambda: gy.clone(), 2 * 2 * n),
        ]
        for name, fn, nbytes in cases:
            try:
                sec = bench(fn)
                res["memory_bound"].append({"kernel": name, "tokens": tokens, "hidden": h,
                                            "seconds": sec, "bytes": nbytes,
                                            "bytes_per_s": nbytes / sec})
            except Exception as e:  # noqa: BLE001
                res["errors"].append(f"{name} {tokens}x{h}: {e!r}")
        del x, wgt, b, gy
        torch.cuda.empty_cache()


def sustained(res):
    """An 8192^3 BF16 GEMM back to back for 15 s: the rate per ~70 ms window, with the SM clock,
    power and temperature nvidia-smi reads every 500 ms (does the rate hold at the power limit?)."""
    import subprocess
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    torch.matmul(a, b)
    torch.cuda.synchronize()
    mon = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw,"
                            "temperature.gpu,clocks_throttle_reasons.active",
                            "--format=csv,noheader,nounits", "-lms", "500"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    s = torch.cuda.Event(enable_timing=True)
    e = torch.cuda.Event(enable_timing=True)
    t0 = time.time()
    windows = []
    while time.time() - t0 < 15.0:
        s.record()
        for _ in range(50):
            torch.matmul(a, b)
        e.record()
        e.synchronize()
        windows.append({"t_s": round(time.time() - t0, 3),
                        "flops_per_s": 50 * 2.0 * n ** 3 / (s.elapsed_time(e) * 1e-3)})
    mon.terminate()
    smi = mon.communicate()[0].splitlines()
    res["sustained_gemm"] = {"m": n, "n": n, "k": n, "calls_per_window": 50,
                             "windows": windows, "nvidia_smi": smi}


# (name, hidden, expert ffn, local experts): Qwen3-235B-A22B at EP 8 (128 experts of 1536,
# Qwen/Qwen3-235B-A22B config.json) and DeepSeek-V3 at EP 64 (256 of 2048 over 64 ranks,
# deepseek-ai/DeepSeek-V3 config.json).
EXPERTS = [("qwen3-235b-a22b", 4096, 1536, 16), ("deepseek-v3", 7168, 2048, 4)]
EXPERT_ROWS = [256, 512, 1024, 2048, 4096]


def grouped_gemms(res):
    dev = "cuda"
    streams = [torch.cuda.Stream() for _ in range(4)]
    have_grouped = hasattr(torch, "_grouped_mm")
    for name, h, f, experts in EXPERTS:
        for rows in EXPERT_ROWS:
            # (op, m, n, k) of one expert's GEMMs: up (gated: 2f wide) and down, each forward,
            # input gradient and weight gradient.
            shapes = [("up", rows, 2 * f, h), ("down", rows, h, f),
                      ("up_dgrad", rows, h, 2 * f), ("down_dgrad", rows, f, h),
                      ("up_wgrad", 2 * f, h, rows), ("down_wgrad", h, f, rows)]
            for op, m, n, k in shapes:
                a = [torch.randn(m, k, device=dev, dtype=torch.bfloat16) for _ in range(experts)]
                b = [torch.randn(n, k, device=dev, dtype=torch.bfloat16) for _ in range(experts)]
                flops = 2.0 * m * n * k * experts
                row = {"model": name, "op": op, "experts": experts, "rows_per_expert": rows,
                       "m": m, "n": n, "k": k}

                def loop():
                    for x, w in zip(a, b):
                        torch.matmul(x, w.t())

                def multi():
                    cur = torch.cuda.current_stream()
                    for s in streams:
                        s.wait_stream(cur)
                    for i, (x, w) in enumerate(zip(a, b)):
                        with torch.cuda.stream(streams[i % len(streams)]):
                            torch.matmul(x, w.t())
                    for s in streams:
                        cur.wait_stream(s)

                impls = [("loop", loop), ("streams4", multi)]
                if have_grouped and op in ("up", "down", "up_dgrad", "down_dgrad"):
                    try:
                        ga = torch.cat(a)
                        gb = torch.stack(b).transpose(-2, -1)
                        offs = torch.arange(1, experts + 1, device=dev, dtype=torch.int32) * m
                        torch._grouped_mm(ga, gb, offs=offs, out_dtype=torch.bfloat16)
                        impls.append(("grouped_mm", lambda: torch._grouped_mm(
                            ga, gb, offs=offs, out_dtype=torch.bfloat16)))
                    except Exception as e:  # noqa: BLE001 - recorded, not hidden
                        res["errors"].append(f"_grouped_mm {name} {op} rows={rows}: {e!r}")
                for impl, fn in impls:
                    sec = bench(fn)
                    torch.cuda.synchronize()
                    t0 = time.perf_counter()
                    for _ in range(20):
                        fn()
                    host = (time.perf_counter() - t0) / 20
                    torch.cuda.synchronize()
                    res["grouped_gemm"].append(dict(row, impl=impl, seconds=sec,
                                                    flops_per_s=flops / sec,
                                                    host_s_per_call=host))
                del a, b
        torch.cuda.empty_cache()


def host_overhead(res):
    x = torch.zeros(1, device="cuda")
    for _ in range(100):
        x.add_(1.0)
    torch.cuda.synchronize()
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        for _ in range(10000):
            x.add_(1.0)
        host = (time.perf_counter() - t0) / 10000
        torch.cuda.synchronize()
        res["host_overhead"].append({"op": "tensor.add_ on one element", "calls": 10000,
                                     "host_s_per_op": host})


# (name, hidden, expert width, experts, top-k, local experts): Qwen3-30B-A3B at EP 8 and EP 16,
# Qwen3-235B-A22B at EP 8 and DeepSeek-V3 at EP 64 (their Hugging Face config.json files).
MOE_LAYERS = [("qwen3-30b-a3b", 2048, 768, 128, 8, 16), ("qwen3-30b-a3b", 2048, 768, 128, 8, 8),
              ("qwen3-235b-a22b", 4096, 1536, 128, 8, 16), ("deepseek-v3", 7168, 2048, 256, 8, 4)]


def moe_route(x, router, k, local):
    """An eager dropless router over a rank's `local` experts: scores, top-k, and the rows
    sorted by expert, balanced over the rank's experts as a forced-balance run routes them.
    Returns the top-k probabilities, each routed row's expert and the sorting order."""
    probs = torch.softmax((x @ router.t()).float(), dim=-1)
    top_p, top_i = probs.topk(k, dim=-1)
    slot = top_i.flatten() % local
    return top_p, slot, torch.argsort(slot, stable=True)


def moe_experts(x, top_p, order, counts, w1, w2, k):
    """The rest of the eager MoE block once the per-expert row counts are on the host: the
    permutation, one SwiGLU GEMM pair per local expert, the un-permutation and the weighted
    sum over each token's k experts."""
    tokens, h = x.shape
    rows = x.repeat_interleave(k, dim=0)[order]
    outs, start = [], 0
    for e, c in enumerate(counts):
        a, b = (rows[start:start + c] @ w1[e].t()).chunk(2, dim=-1)
        outs.append((F.silu(a) * b) @ w2[e].t())
        start += c
    back = torch.empty_like(rows).index_copy(0, order, torch.cat(outs))
    return (back.view(tokens, k, h) * top_p.unsqueeze(-1).to(x.dtype)).sum(dim=1)


def moe_counts(slot, local):
    """The per-expert row counts, read on the host: the synchronisation a dropless
    dispatcher makes once a layer."""
    return torch.bincount(slot, minlength=local).tolist()


def moe_layer_host(res):
    """An eager MoE block (router, top-k, permutation, one GEMM pair per local expert, SwiGLU,
    un-permutation and the weighted sum), forward and backward, with the host synchronisation
    a dropless dispatcher makes (the per-expert row counts read on the host): its wall time per
    call against the sum of its kernels' GPU times (torch.profiler). Their difference is what
    the GPU waits for the host, the quantity pplan's MoE host floor stands for (Megatron-Core
    adds its own Python, Transformer Engine's setup and the all-to-all on top of this)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile
    dev, dt = "cuda", torch.bfloat16
    for name, h, f, experts, k, local in MOE_LAYERS:
        # 2,048 is a rank's routed tokens over 8 in the ModelZoo's Qwen3-235B run at t = 2
        # (m289: 4,096-token sequences split by sequence parallelism, top-8 over EP 8).
        for tokens in (1024, 2048, 4096):
            x = torch.randn(tokens, h, device=dev, dtype=dt, requires_grad=True)
            router = (0.02 * torch.randn(experts, h, device=dev, dtype=dt)).requires_grad_()
            w1 = [(0.02 * torch.randn(2 * f, h, device=dev, dtype=dt)).requires_grad_()
                  for _ in range(local)]
            w2 = [(0.02 * torch.randn(h, f, device=dev, dtype=dt)).requires_grad_()
                  for _ in range(local)]

            def block():
                top_p, slot, order = moe_route(x, router, k, local)
                counts = moe_counts(slot, local)
                moe_experts(x, top_p, order, counts, w1, w2, k).sum().backward()

            row = {"model": name, "tokens": tokens, "local_experts": local, "top_k": k}
            try:
                for _ in range(3):
                    block()
                torch.cuda.synchronize()
                n = 20
                t0 = time.perf_counter()
                for _ in range(n):
                    block()
                torch.cuda.synchronize()
                wall = (time.perf_counter() - t0) / n
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    block()
                    torch.cuda.synchronize()
                # Kernel events only: a CPU op's entry repeats its kernels' device time.
                gpu = sum(e.self_device_time_total for e in prof.key_averages()
                          if e.device_type == DeviceType.CUDA) * 1e-6
                res["moe_layer_host"].append(dict(row, wall_s=wall, kernel_s=gpu,
                                                  host_wait_s=max(wall - gpu, 0.0)))
            except Exception as e:  # noqa: BLE001
                res["errors"].append(f"moe layer {name} tokens={tokens} local={local}: {e!r}")
            del x, router, w1, w2
            torch.cuda.empty_cache()


# (name, hidden, heads, kv heads, dense tokens, MoE tokens, local experts, expert width) of a
# rank's layer: Qwen3-235B-A22B (64 heads, 4 KV groups) at t = 2 with EP 8 (the ModelZoo's
# m289: 4,096-token sequences, sequence parallelism hands the MoE 2,048) and EP 32 (m286/m287:
# 4 local experts), at t = 4 with EP 8 (m290), and Qwen3-30B-A3B (32 heads, 4 groups) at t = 1
# with EP 8 (Megatron-Bridge's H100 and B200 runs).
SYNC_LAYERS = [("qwen3-235b-t2-ep8", 4096, 32, 2, 4096, 2048, 16, 1536),
               ("qwen3-235b-t2-ep32", 4096, 32, 2, 4096, 2048, 4, 1536),
               ("qwen3-235b-t4-ep8", 4096, 16, 1, 4096, 1024, 16, 1536),
               ("qwen3-30b-t1-ep8", 2048, 32, 4, 4096, 4096, 16, 768),
               # The same layers at half and twice the tokens, to move GPU time against host.
               ("qwen3-235b-t2-ep8-s2k", 4096, 32, 2, 2048, 1024, 16, 1536),
               ("qwen3-235b-t2-ep8-s8k", 4096, 32, 2, 8192, 4096, 16, 1536),
               ("qwen3-30b-t1-ep8-s2k", 2048, 32, 4, 2048, 2048, 16, 768),
               ("qwen3-30b-t1-ep16-s8k", 2048, 32, 4, 8192, 8192, 8, 768)]
SYNC_STACK = 4
SYNC_TOP_K = 8


def sync_row(name, h, heads, kv, td, tm, local, f, **extra):
    """The layout fields of a row of the parts that time `sync_layer`, and `extra`."""
    return dict({"model": name, "hidden": h, "heads": heads, "kv_heads": kv,
                 "dense_tokens": td, "moe_tokens": tm, "local_experts": local,
                 "expert_ffn": f, "top_k": SYNC_TOP_K}, **extra)


def sync_layer(h, heads, kv, td, tm, local, f):
    """One rank's transformer layer: an attention block (norm, QKV, causal flash attention,
    output projection; the tensor-parallel all-gather and reduce-scatter stood in for by a
    copy) and an eager MoE block whose dispatcher reads the per-expert row counts on the host.
    Returns the layer and the host time of its parts, summed over calls (`dense`, `moe_pre`
    up to the synchronisation, `moe_post` after it)."""
    dev, dt, k = "cuda", torch.bfloat16, SYNC_TOP_K
    hd = 128 if h >= 1024 else 32
    w = lambda *shape: (0.02 * torch.randn(*shape, device=dev, dtype=dt)).requires_grad_()
    p = {"norm": w(h), "qkv": w((heads + 2 * kv) * hd, h), "proj": w(h, heads * hd),
         "norm2": w(h), "router": w(128, h),
         "w1": [w(2 * f, h) for _ in range(local)], "w2": [w(h, f) for _ in range(local)]}
    host = {"dense": 0.0, "moe_pre": 0.0, "moe_post": 0.0}

    def norm(x, g):
        return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(dt) * g

    def layer(x):
        t0 = time.perf_counter()
        n = norm(x, p["norm"]).repeat(td // tm, 1)  # sequence-parallel all-gather
        q, kk, v = (n @ p["qkv"].t()).split([heads * hd, kv * hd, kv * hd], dim=-1)
        q = q.view(1, td, heads, hd).transpose(1, 2)
        # Each KV group repeated over its heads (a copy), so that the flash backend runs.
        kk = kk.view(1, td, kv, hd).transpose(1, 2).repeat_interleave(heads // kv, dim=1)
        v = v.view(1, td, kv, hd).transpose(1, 2).repeat_interleave(heads // kv, dim=1)
        o = F.scaled_dot_product_attention(q, kk, v, is_causal=True)
        o = o.transpose(1, 2).reshape(td, heads * hd) @ p["proj"].t()
        x = x + o[:tm]  # reduce-scatter
        t1 = time.perf_counter()
        n2 = norm(x, p["norm2"])
        top_p, slot, order = moe_route(n2, p["router"], k, local)
        t2 = time.perf_counter()
        counts = moe_counts(slot, local)
        t3 = time.perf_counter()
        x = x + moe_experts(n2, top_p, order, counts, p["w1"], p["w2"], k)
        t4 = time.perf_counter()
        host["dense"] += t1 - t0
        host["moe_pre"] += t2 - t1
        host["moe_post"] += t4 - t3
        return x
    return layer, host


def sync_step(layer, x0, n, depth=SYNC_STACK):
    """Per layer, mean of n steps after 2 untimed, each `depth` layers forward then backward:
    forward wall, backward wall, and the host time of the backward (until backward()
    returns: it launches and never waits)."""
    fw = bw = bh = 0.0
    for i in range(n + 2):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        x = x0
        for _ in range(depth):
            x = layer(x)
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        x.float().sum().backward()
        t2 = time.perf_counter()
        torch.cuda.synchronize()
        t3 = time.perf_counter()
        if i >= 2:
            fw += (t1 - t0) / n / depth
            bh += (t2 - t1) / n / depth
            bw += (t3 - t1) / n / depth
    return fw, bw, bh


def profiled_kernels(fn):
    """The GPU time and the count of the kernels `fn` runs (torch.profiler)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    ev = [e for e in prof.key_averages() if e.device_type == DeviceType.CUDA]
    return sum(e.self_device_time_total for e in ev) * 1e-6, sum(e.count for e in ev)


def moe_layer_sync(res):
    """A stack of transformer layers on one rank (`sync_layer`: attention and an eager MoE
    block that synchronises once a layer). Forward and backward timed apart (wall per layer),
    beside (1) the GPU time of each part's kernels (torch.profiler) and (2) the host time of
    issuing each part, read off the same code at toy sizes (hidden 64, 64 tokens), where the
    GPU work is negligible. The host may run ahead of the GPU in the backward but not past a
    forward's synchronisation, so these say which combination of host and GPU time a MoE
    layer takes."""
    dev, dt = "cuda", torch.bfloat16
    for name, h, heads, kv, td, tm, local, f in SYNC_LAYERS:
        row = sync_row(name, h, heads, kv, td, tm, local, f, stack=SYNC_STACK)
        try:
            # Host time: the same code at toy sizes, forward parts and backward.
            toy, host = sync_layer(64, 2, 1, 64 * td // tm, 64, local, 64)
            x0 = torch.randn(64, 64, device=dev, dtype=dt, requires_grad=True)
            sync_step(toy, x0, 3)
            for key in host:
                host[key] = 0.0
            n = 10
            _, _, toy_bh = sync_step(toy, x0, n)
            for key in host:
                row[f"toy_host_{key}_s"] = host[key] / ((n + 2) * SYNC_STACK)
            row["toy_host_backward_s"] = toy_bh
            # The real sizes: wall per layer, the host time of each part in the same steps
            # (the forward's parts leave out the wait at the synchronisation; the backward
            # never waits), and the GPU time of the kernels of each part.
            layer, host = sync_layer(h, heads, kv, td, tm, local, f)
            x0 = torch.randn(tm, h, device=dev, dtype=dt, requires_grad=True)
            sync_step(layer, x0, 1)
            for key in host:
                host[key] = 0.0
            n = 5
            row["forward_wall_s"], row["backward_wall_s"], row["host_backward_s"] = \
                sync_step(layer, x0, n)
            for key in host:
                row[f"host_{key}_s"] = host[key] / ((n + 2) * SYNC_STACK)
            g_f, n_f = profiled_kernels(lambda: layer(x0))
            y = layer(x0)
            g_b, n_b = profiled_kernels(lambda: y.float().sum().backward())
            row.update(gpu_forward_s=g_f, kernels_forward=n_f, gpu_backward_s=g_b,
                       kernels_backward=n_b)
            res["moe_layer_sync"].append(row)
            del layer, x0, y
        except Exception:  # noqa: BLE001
            res["errors"].append(f"moe layer sync {name}: {traceback.format_exc()}")
        torch.cuda.empty_cache()


# Layers per pipeline chunk of the 1F1B part: 1 (the ModelZoo's m289: 96 virtual stages of
# 94 layers, the embedding and the loss) and 3 (m286, m287, m290: 32 virtual stages).
ONE_F_ONE_B_DEPTHS = [1, 3]
ONE_F_ONE_B_PAIRS = 8


def moe_layer_1f1b(res):
    """The same layers (`sync_layer`) in the order a pipeline's steady state runs them: a
    chunk of `depth` layers, the forward of micro-batch i + 1 then the backward of
    micro-batch i, back to back with no synchronisation between them (each forward still
    synchronises once a layer at its dispatcher), against the same chunk's forward and
    backward timed apart (`sync_step`, depth layers). pplan prices each chunk pass on its
    own and the simulator adds them, which holds if the interleaved order costs no more per
    layer than the separated one: `ratio` = 1F1B wall per layer / (forward + backward wall
    per layer, separated)."""
    dev, dt = "cuda", torch.bfloat16
    for name, h, heads, kv, td, tm, local, f in SYNC_LAYERS:
        layer, _ = sync_layer(h, heads, kv, td, tm, local, f)
        for depth in ONE_F_ONE_B_DEPTHS:
            row = sync_row(name, h, heads, kv, td, tm, local, f, depth=depth,
                           pairs=ONE_F_ONE_B_PAIRS)
            try:
                x0 = torch.randn(tm, h, device=dev, dtype=dt, requires_grad=True)
                grad = torch.randn(tm, h, device=dev, dtype=dt)
                sync_step(layer, x0, 1, depth)
                fw, bw, _ = sync_step(layer, x0, 5, depth)

                def chunk():
                    x = x0
                    for _ in range(depth):
                        x = layer(x)
                    return x

                walls, hosts = [], []
                for _ in range(REPEATS):
                    prev = chunk()
                    prev.backward(grad)
                    prev = chunk()
                    torch.cuda.synchronize()
                    t0 = time.perf_counter()
                    for _ in range(ONE_F_ONE_B_PAIRS):
                        nxt = chunk()
                        prev.backward(grad)
                        prev = nxt
                    t1 = time.perf_counter()
                    torch.cuda.synchronize()
                    t2 = time.perf_counter()
                    prev.backward(grad)
                    torch.cuda.synchronize()
                    walls.append((t2 - t0) / (ONE_F_ONE_B_PAIRS * depth))
                    hosts.append((t1 - t0) / (ONE_F_ONE_B_PAIRS * depth))
                walls.sort()
                hosts.sort()
                wall = walls[len(walls) // 2]
                row.update(forward_wall_s=fw, backward_wall_s=bw, one_f_one_b_wall_s=wall,
                           one_f_one_b_host_s=hosts[len(hosts) // 2],
                           ratio=wall / (fw + bw))
                res["moe_layer_1f1b"].append(row)
                del x0, grad
            except Exception:  # noqa: BLE001
                res["errors"].append(f"moe layer 1f1b {name} depth {depth}: "
                                     f"{traceback.format_exc()}")
        del layer
        torch.cuda.empty_cache()


def gap_cases(static_output=False):
    """The cases of `kernel_gaps` (name, one call, calls): a small and a large elementwise add,
    an expert-sized GEMM (into one output buffer with `static_output`, as a captured graph
    replays it), and a Qwen3-235B-A22B expert's forward (up GEMM, SwiGLU, down GEMM) over 16
    local experts."""
    dev, dt = "cuda", torch.bfloat16
    small = torch.randn(1 << 20, device=dev, dtype=dt)
    large = torch.randn(1 << 26, device=dev, dtype=dt)
    a = torch.randn(1024, 4096, device=dev, dtype=dt)
    w = torch.randn(3072, 4096, device=dev, dtype=dt)
    w1 = [torch.randn(3072, 4096, device=dev, dtype=dt) for _ in range(16)]
    w2 = [torch.randn(4096, 1536, device=dev, dtype=dt) for _ in range(16)]
    out = torch.empty(1024, 3072, device=dev, dtype=dt)

    def experts():
        for e in range(16):
            u, g = (a @ w1[e].t()).chunk(2, dim=-1)
            (F.silu(u) * g) @ w2[e].t()

    gemm = (lambda: torch.matmul(a, w.t(), out=out)) if static_output else (lambda: a @ w.t())
    return [("add 1M bf16", lambda: small.add_(1.0), 500),
            ("add 64M bf16", lambda: large.add_(1.0), 100),
            ("gemm 1024x3072x4096 bf16", gemm, 300),
            ("16 experts 1024 rows (up, silu*mul, down)", experts, 10)]


def kernel_gaps(res):
    """The GPU's time between back-to-back kernels of one stream when the host is far ahead:
    a few hundred calls queued behind a 50 ms spin kernel (torch.cuda._sleep), CUDA events
    around them, against the sum of their kernels' durations (torch.profiler, the spin left
    out); the difference over the kernel count is the gap per kernel that no host time
    explains. Kernels: a small and a large elementwise add, an expert-sized GEMM, and a
    Qwen3-235B expert's forward (up GEMM, SwiGLU, down GEMM) over 16 local experts."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile
    for name, fn, n in gap_cases():
        try:
            wall, host = queued(fn, n)
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                torch.cuda._sleep(100_000_000)
                for _ in range(n):
                    fn()
                torch.cuda.synchronize()
            ev = [x for x in prof.key_averages() if x.device_type == DeviceType.CUDA
                  and "spin" not in x.key and "sleep" not in x.key]
            busy = sum(x.self_device_time_total for x in ev) * 1e-6
            count = sum(x.count for x in ev)
            res["kernel_gaps"].append({"case": name, "calls": n, "kernels": count,
                                       "wall_s": wall, "kernel_s": busy, "host_s": host,
                                       "gap_s_per_kernel": (wall - busy) / max(count, 1)})
        except Exception:  # noqa: BLE001
            res["errors"].append(f"kernel gaps {name}: {traceback.format_exc()}")


# Rows an expert of the multi-stream part: m289's 1,024 (2,048 tokens a rank, top-8, EP 8, 16
# local experts) and the neighbouring powers of two.
STREAM_ROWS = [512, 1024, 2048, 4096]


def grouped_streams(res):
    """Transformer Engine's grouped linear layer as its C++ runs it
    (`multi_stream_cublas_gemm`: expert i's cuBLAS GEMM on compute stream i % 4, forked from
    and joined back to the current stream by events) against the same GEMMs on one stream,
    for 16 Qwen3-235B-A22B experts (h 4096, f_e 1536) at 512-4,096 rows an expert, the six
    GEMM shapes of a layer's forward and backward. Timed with the host far ahead (every call
    queued behind a spin, as in `kernel_gaps`), so that the Python loop's host time, which
    Transformer Engine's C++ loop does not have, is not what is measured. The environment's
    CUDA_DEVICE_MAX_CONNECTIONS (Megatron-Core sets 1) is recorded in each row."""
    import os
    dev, dt, experts, h, f, n_calls = "cuda", torch.bfloat16, 16, 4096, 1536, 40
    connections = os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS", "default")
    side = [torch.cuda.Stream() for _ in range(4)]
    for rows in STREAM_ROWS:
        # (m, k, n) of each expert's GEMM: the SwiGLU up and the down projection, their
        # input gradients and their weight gradients.
        shapes = {"up": (rows, h, 2 * f), "down": (rows, f, h),
                  "up_dgrad": (rows, 2 * f, h), "down_dgrad": (rows, h, f),
                  "up_wgrad": (2 * f, rows, h), "down_wgrad": (h, rows, f)}
        for op, (m, k, n) in shapes.items():
            try:
                a = [torch.randn(m, k, device=dev, dtype=dt) for _ in range(experts)]
                b = [torch.randn(k, n, device=dev, dtype=dt) for _ in range(experts)]
                c = [torch.empty(m, n, device=dev, dtype=dt) for _ in range(experts)]

                def one_stream():
                    for e in range(experts):
                        torch.matmul(a[e], b[e], out=c[e])

                def four_streams():
                    main = torch.cuda.current_stream()
                    for st in side:
                        st.wait_stream(main)
                    for e in range(experts):
                        with torch.cuda.stream(side[e % 4]):
                            torch.matmul(a[e], b[e], out=c[e])
                    for st in side:
                        main.wait_stream(st)

                for impl, fn in (("one_stream", one_stream), ("four_streams", four_streams)):
                    wall, host = queued(fn, n_calls)
                    wall, host = wall / n_calls, host / n_calls
                    res["grouped_streams"].append({
                        "experts": experts, "rows_per_expert": rows, "op": op, "m": m, "n": n,
                        "k": k, "impl": impl, "connections": connections, "seconds": wall,
                        "flops_per_s": 2.0 * m * n * k * experts / wall,
                        "host_s_per_call": host})
                del a, b, c
            except Exception:  # noqa: BLE001
                res["errors"].append(f"grouped streams rows={rows} {op}: "
                                     f"{traceback.format_exc()}")
        torch.cuda.empty_cache()


# Chunk lengths and heads a rank of a load-balanced context-parallel ring holds.
CP_CHUNKS = [1024, 2048, 4096, 8192, 16384]
CP_HEADS = [4, 8, 16, 32, 64]


def cp_attention(res):
    """The attention blocks of one step of a load-balanced context-parallel ring (Transformer
    Engine's p2p context parallelism, as Megatron-Core and NeMo run it): a rank holds two
    chunks of c tokens; its first step is causal over its own 2c tokens, each later step
    non-causal, 2c queries against the c keys of a remote rank's first chunk or the c queries
    of its second chunk against 2c remote keys. cuDNN, BF16, head dim 128, batch 1, forward
    and backward (FLOPs: causal blocks counted at half, as the other attention parts)."""
    from torch.nn.attention import SDPBackend
    dev, hd = "cuda", 128
    for c in CP_CHUNKS:
        for heads in CP_HEADS:
            for kind, sq, sk, causal in [("diagonal", 2 * c, 2 * c, True),
                                         ("first-half keys", 2 * c, c, False),
                                         ("second-half queries", c, 2 * c, False)]:
                row = {"chunk": c, "heads": heads, "block": kind, "query_tokens": sq,
                       "key_tokens": sk, "causal": causal, "head_dim": hd,
                       "backend": "cudnn"}
                try:
                    q = torch.randn(1, heads, sq, hd, device=dev, dtype=torch.bfloat16,
                                    requires_grad=True)
                    k = torch.randn(1, heads, sk, hd, device=dev, dtype=torch.bfloat16,
                                    requires_grad=True)
                    v = torch.randn(1, heads, sk, hd, device=dev, dtype=torch.bfloat16,
                                    requires_grad=True)
                    g = torch.randn(1, heads, sq, hd, device=dev, dtype=torch.bfloat16)
                    fwd_flops = 2.0 * 2.0 * heads * sq * sk * hd / (2.0 if causal else 1.0)
                    res["cp_attention"].append(sdpa_row(
                        row, SDPBackend.CUDNN_ATTENTION, q, k, v, g, fwd_flops,
                        is_causal=causal))
                    del q, k, v, g
                except Exception as e:  # noqa: BLE001
                    res["errors"].append(f"cp attention c={c} h={heads} {kind}: {e!r}")
        torch.cuda.empty_cache()


# (name, tokens a micro-batch on the last stage, hidden, vocabulary shard V/t): Qwen3-235B-A22B
# (151,936 words) at t = 2 and t = 4 with 4,096-token sequences (the ModelZoo's m289 and
# m290), Llama 3 8B (128,256 words) at t = 1.
OUTPUT_LAYERS = [("qwen3-235b-t2", 4096, 4096, 75968), ("qwen3-235b-t4", 4096, 4096, 37984),
                 ("llama3-8b-t1", 4096, 4096, 128256)]


def output_layer(res):
    """The last stage's output layer and loss as Megatron-Core runs them without loss fusion:
    the vocabulary-parallel logit GEMM (tokens x h by h x V/t, BF16) forward, input and weight
    gradient, and `_VocabParallelCrossEntropy`'s steps (Megatron-LM
    `megatron/core/tensor_parallel/cross_entropy.py` at 1e057005: the cast to fp32, max,
    in-place subtraction, target gather, in-place exp, sum, log, in-place division; backward
    the one-hot update and the in-place scaling, then the cast's backward to BF16) on one
    rank's shard, its tensor-parallel all-reduces left out; each part timed alone. pplan
    prices the loss at 38 and 14 bytes of HBM traffic a logit."""
    dev, dt = "cuda", torch.bfloat16
    for name, tokens, h, v in OUTPUT_LAYERS:
        row = {"model": name, "tokens": tokens, "hidden": h, "vocab_shard": v}
        try:
            x = torch.randn(tokens, h, device=dev, dtype=dt)
            w = torch.randn(v, h, device=dev, dtype=dt) * 0.02
            target = torch.randint(0, v, (tokens,), device=dev)
            row["gemm_forward_s"] = bench(lambda: x @ w.t())
            logits = x @ w.t()
            state = {}

            def ce_forward():
                lg = logits.float()
                logits_max = torch.max(lg, dim=-1)[0]
                lg -= logits_max.unsqueeze(dim=-1)
                target_mask = (target < 0) | (target >= v)
                masked = target.clone()
                masked[target_mask] = 0
                arange_1d = torch.arange(0, tokens, device=dev)
                predicted = lg[arange_1d, masked].clone().contiguous()
                predicted[target_mask] = 0.0
                torch.exp(lg, out=lg)
                sum_exp = lg.sum(dim=-1)
                loss = torch.log(sum_exp) - predicted
                lg.div_(sum_exp.unsqueeze(dim=-1))
                state.update(softmax=lg, mask=target_mask, masked=masked, loss=loss)

            row["ce_forward_s"] = bench(ce_forward)
            grad_output = torch.ones(tokens, device=dev)

            def ce_backward():
                grad = state["softmax"]
                arange_1d = torch.arange(0, tokens, device=dev)
                update = 1.0 - state["mask"].view(-1).float()
                grad[arange_1d, state["masked"]] -= update
                grad.mul_(grad_output.unsqueeze(dim=-1))
                return grad.to(dt)  # the backward of the cast to fp32

            row["ce_backward_s"] = bench(ce_backward)
            g16 = ce_backward()
            row["gemm_input_grad_s"] = bench(lambda: g16 @ w)
            row["gemm_weight_grad_s"] = bench(lambda: g16.t() @ x)
            row["gemm_flops"] = 2.0 * tokens * h * v
            row["logits"] = tokens * v
            res["output_layer"].append(row)
            del x, w, logits, state, g16
        except Exception:  # noqa: BLE001
            res["errors"].append(f"output layer {name}: {traceback.format_exc()}")
        torch.cuda.empty_cache()


def embedding_grad(res):
    """The first stage's word-embedding weight gradient as Megatron-Core makes it each
    micro-batch: the lookup's backward (PyTorch `embedding_dense_backward`: a zero-filled dense
    gradient of the whole vocabulary shard, V/t x h in BF16, then the tokens' rows summed into
    it) and the data-parallel wrapper's accumulation into the fp32 main gradient
    (`param.main_grad.add_(param.grad.data)`, Megatron-LM
    `megatron/core/distributed/distributed_data_parallel.py` at 1e057005), each timed alone
    on the shapes of `output_layer`. pplan prices them at 2 + 10 bytes an element."""
    dev, dt = "cuda", torch.bfloat16
    for name, tokens, h, v in OUTPUT_LAYERS:
        row = {"model": name, "tokens": tokens, "hidden": h, "vocab_shard": v}
        try:
            idx = torch.randint(0, v, (tokens,), device=dev)
            w = (0.02 * torch.randn(v, h, device=dev, dtype=dt)).requires_grad_()
            g = torch.randn(tokens, h, device=dev, dtype=dt)
            out = F.embedding(idx, w)
            row["lookup_backward_s"] = bench(
                lambda: torch.autograd.grad(out, w, g, retain_graph=True))
            dense = torch.autograd.grad(out, w, g, retain_graph=True)[0]
            main = torch.zeros(v, h, device=dev, dtype=torch.float32)
            row["main_grad_add_s"] = bench(lambda: main.add_(dense))
            row["elements"] = v * h
            res["embedding_grad"].append(row)
            del w, g, out, dense, main
        except Exception:  # noqa: BLE001
            res["errors"].append(f"embedding grad {name}: {traceback.format_exc()}")
        torch.cuda.empty_cache()


def device_fields(tool):
    """What a results file records of the script and the GPU it ran on."""
    p = torch.cuda.get_device_properties(0)
    return {
        "tool": tool,
        "gpu": torch.cuda.get_device_name(0),
        "compute_capability": f"{p.major}.{p.minor}",
        "multiprocessors": p.multi_processor_count,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
    }


def run_parts(res, parts, chosen, out):
    """Runs the `chosen` parts (all without) into `res`, one list per part, each error recorded
    and the file rewritten after every part; an unknown part name exits with the valid ones."""
    names = [q.__name__ for q in parts]
    unknown = [c for c in chosen if c not in names]
    if unknown:
        sys.exit(f"{res['tool']}: unknown part(s) {unknown}; valid: " + ", ".join(names))
    res["parts"] = chosen or names
    res.setdefault("errors", [])
    by_name = {q.__name__: q for q in parts}
    for name in res["parts"]:
        res.setdefault(name, [])
        t0 = time.time()
        try:
            by_name[name](res)
        except Exception:  # noqa: BLE001
            res["errors"].append(f"{name}: {traceback.format_exc()}")
        print(f"{name}: {time.time() - t0:.1f} s", flush=True)
        with open(out, "w") as f:
            json.dump(res, f, indent=1)
    print(f"wrote {out}; errors: {len(res['errors'])}")


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "gpu-kernels.json"
    res = dict(device_fields("benches/gpu_kernels.py"), **{
        "method": "CUDA events around back-to-back calls (at least 10 ms a sample), one untimed "
                  "call first, median of 3; random normal inputs",
        "gemm_bf16": [], "gemm_fp8": [], "attention": [], "memory_bound": [],
        "host_overhead": [], "grouped_gemm": [], "long_attention": [], "moe_layer_host": [],
        "moe_layer_sync": [], "moe_layer_1f1b": [], "kernel_gaps": [], "grouped_streams": [],
        "cp_attention": [], "output_layer": [], "embedding_grad": [], "attention_head_dim": [],
        "errors": [],
    })
    parts = (gemms, attention, memory_bound, host_overhead, grouped_gemms, long_attention,
             moe_layer_host, moe_layer_sync, moe_layer_1f1b, kernel_gaps, grouped_streams,
             cp_attention, output_layer, embedding_grad, attention_head_dim, sustained)
    run_parts(res, parts, sys.argv[2:], out)

if __name__ == "__main__":
    main()
