//! Held-out validation: Megatron-Bridge's DGX-H100 pre-training rows (NVIDIA-NeMo/Megatron-Bridge
//! `docs/performance-summary-archive.md` at 067f987d, the 26.04.01 and 26.06 NeMo containers)
//! for the four models pplan bundles: Llama 3 70B and Llama 3.1 405B (dense, FP8) and
//! Qwen3-30B-A3B and Qwen3-235B-A22B (MoE, FP8). None of these runs is in the project's shared
//! data and nothing was fitted to them. Compiled in; no IO.
//!
//! Each row runs with the layout the table states and the switches of its performance recipe
//! (`src/megatron/bridge/perf_recipes/{llama,qwen}/h100/*.py` at 381d0b82, the 26.06.01 tree,
//! whose H100 recipes are the ones the rows name): FP8 current scaling, no recomputation, the
//! distributed optimizer with overlapped reduction (16-bit: `_benchmark_common` sets
//! `grad_reduce_in_fp32 = False`) and parameter gather, Transformer Engine's fused attention;
//! the Llama rows with sequence parallelism and the userbuffers tensor-parallel overlap; the MoE
//! rows with forced balanced routing (`moe_router_force_load_balancing = True`, and the page:
//! "we force-balance the token distribution among experts"). Layers are split as Megatron-Core
//! must split them when they do not divide the p x v stages: the embedding and the loss
//! counted as layers (405B: 126 + 2 = 64 x 2; 235B: 94 + 2 = 32 x 3).
//!
//! The comparison is in tokens per second per GPU: the page's TFLOP/s are Megatron-Bridge's own
//! FLOP count (the attention core counted causally, as its FLOPs-per-token implies), not
//! pplan's.

use crate::cost::{CrossEntropyFusion, Recompute, Stack};
use crate::inputs::hardware::{Hardware, Precision};
use crate::inputs::model::Model;
use crate::plan::predict::{
    predict, PipelineSplit, PredictError, PredictRequest, Prediction, Split,
};
use crate::report::moe_modelzoo::benchmarking_stack;
use crate::report::{error_list, memory_cell};
use crate::schedule::generators::ScheduleName;
use std::fmt::Write as _;

/// How a row's tokens are routed to experts across nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dispatcher {
    /// A dense model.
    None,
    /// HybridEP / DeepEP: a token crosses to another node once (`--moe-dispatcher deepep`).
    PerNode,
    /// The all-to-all dispatcher, with the expert all-to-all overlapped with the other
    /// micro-batch's compute (`moe_a2a_overlap`, `overlap_moe_expert_parallel_comm`).
    AllToAllOverlapped,
}

/// One published run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BridgeRow {
    /// The bundled model (`Model::preset`).
    pub model: &'static str,
    /// The NeMo container the table names.
    pub container: &'static str,
    pub gpus: u64,
    pub global_batch: u64,
    pub seq_len: u64,
    pub tp: u64,
    pub pp: u64,
    pub cp: u64,
    /// Virtual pipeline stages (1: none).
    pub vp: u64,
    pub ep: u64,
    pub dispatcher: Dispatcher,
    pub tokens_per_s_per_gpu: f64,
    /// Megatron-Bridge's model TFLOP/s per GPU (its FLOP count; shown, not compared).
    pub tflops_per_gpu: f64,
}

/// The rows: each model's latest H100 row in the archive.
pub const BRIDGE_H100_ROWS: [BridgeRow; 4] = [
    BridgeRow {
        model: "llama3-70b",
        container: "26.04.01",
        gpus: 64,
        global_batch: 256,
        seq_len: 8192,
        tp: 4,
        pp: 8,
        cp: 1,
        vp: 5,
        ep: 1,
        dispatcher: Dispatcher::None,
        tokens_per_s_per_gpu: 1664.0,
        tflops_per_gpu: 731.0,
    },
    BridgeRow {
        model: "llama3-405b",
        container: "26.06",
        gpus: 1024,
        global_batch: 1536,
        seq_len: 8192,
        tp: 8,
        pp: 8,
        cp: 2,
        vp: 8,
        ep: 1,
        dispatcher: Dispatcher::None,
        tokens_per_s_per_gpu: 326.0,
        tflops_per_gpu: 822.0,
    },
    BridgeRow {
        model: "qwen3-30b-a3b",
        container: "26.06",
        gpus: 16,
        global_batch: 1024,
        seq_len: 4096,
        tp: 1,
        pp: 1,
        cp: 1,
        vp: 1,
        ep: 16,
        dispatcher: Dispatcher::PerNode,
        tokens_per_s_per_gpu: 8826.0,
        tflops_per_gpu: 203.0,
    },
    BridgeRow {
        model: "qwen3-235b-a22b",
        container: "26.04.01",
        gpus: 256,
        global_batch: 8192,
        seq_len: 4096,
        tp: 2,
        pp: 8,
        cp: 1,
        vp: 4,
        ep: 32,
        dispatcher: Dispatcher::AllToAllOverlapped,
        tokens_per_s_per_gpu: 1712.0,
        tflops_per_gpu: 253.0,
    },
];

/// The stack a row's recipe sets (module docs).
pub fn bridge_stack(row: &BridgeRow) -> Stack {
    Stack {
        precision: Precision::Fp8,
        tp_comm_overlap: row.dispatcher == Dispatcher::None,
        moe_node_dedup: row.dispatcher == Dispatcher::PerNode,
        moe_comm_overlap: row.dispatcher == Dispatcher::AllToAllOverlapped,
        // `GPTProvider.cross_entropy_loss_fusion = True` (the provider's default) and
        // `perf_recipes/_common.py` `_benchmark_common(cross_entropy_impl="te")`.
        cross_entropy_fusion: CrossEntropyFusion::Te,
        ..benchmarking_stack()
    }
}

/// The request of one row for `model` (the preset at the row's sequence).
pub fn bridge_request<'a>(
    row: &BridgeRow,
    model: &'a Model,
    hw: &'a Hardware,
) -> PredictRequest<'a> {
    let mut req = PredictRequest::new(model, hw);
    req.gpus = row.gpus;
    req.tp = row.tp;
    req.pp = row.pp;
    req.cp = row.cp;
    req.ep = row.ep;
    req.global_batch = row.global_batch;
    req.micro_batch = 1;
    req.recompute = Recompute::None;
    // Sequence parallelism wherever t > 1 (the Llama and 235B recipes set it; the 30B row has
    // t = 1).
    req.sequence_parallel = row.tp > 1;
    if row.pp > 1 {
        req.schedule = Some(ScheduleName::Interleaved1F1B);
        req.chunks = row.vp;
        if model.num_layers as u64 % (row.pp * row.vp) != 0 {
            req.partition = Split::Megatron(PipelineSplit::EMBEDDING_AND_LOSS);
        }
    } else {
        req.schedule = Some(ScheduleName::OneFOneB);
        req.chunks = 1;
    }
    req.stack = bridge_stack(row);
    req
}

/// One row predicted.
#[derive(Debug, Clone)]
pub struct BridgeComparison {
    pub row: BridgeRow,
    pub prediction: Prediction,
    /// Predicted / published tokens per second per GPU - 1.
    pub error: f64,
}

/// Predict every row on `hw` (the bundled `h100-80gb`).
pub fn validate_bridge_h100(hw: &Hardware) -> Result<Vec<BridgeComparison>, PredictError> {
    BRIDGE_H100_ROWS
        .iter()
        .map(|row| {
            let base = Model::preset(row.model).expect("bundled preset");
            let model = Model {
                seq_len: row.seq_len,
                ..base
            };
            let prediction = predict(&bridge_request(row, &model, hw))?;
            let tokens = prediction.tokens_per_s_per_gpu;
            Ok(BridgeComparison {
                row: *row,
                error: tokens / row.tokens_per_s_per_gpu - 1.0,
                prediction,
            })
        })
        .collect()
}

/// The table of docs/validation.md, with the error of the dense and the MoE rows.
pub fn bridge_markdown(rows: &[BridgeComparison]) -> String {
    let mut s = String::from(
        "| model | container | GPUs | t/p/cp/v/ep | published tokens/s/GPU | predicted | error | published TFLOP/s (Bridge's count) | peak memory (GB) |\n|---|---|---|---|---|---|---|---|---|\n",
    );
    for c in rows {
        let r = &c.row;
        let _ = writeln!(
            s,
            "| {} | {} | {} | {}/{}/{}/{}/{} | {:.0} | {:.0} | {:+.1}% | {:.0} | {} |",
            r.model,
            r.container,
            r.gpus,
            r.tp,
            r.pp,
            r.cp,
            r.vp,
            r.ep,
            r.tokens_per_s_per_gpu,
            c.prediction.tokens_per_s_per_gpu,
            100.0 * c.error,
            r.tflops_per_gpu,
            memory_cell(&c.prediction),
        );
    }
    for (name, moe) in [("dense", false), ("MoE", true)] {
        let e: Vec<f64> = rows
            .iter()
            .filter(|c| (c.row.ep > 1) == moe)
            .map(|c| c.error)
            .collect();
        let _ = writeln!(s, "\n{name} rows (held out): {}.", error_list(&e));
    }
    s
}
