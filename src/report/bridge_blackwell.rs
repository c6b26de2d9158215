//! Held-out validation on Blackwell: Megatron-Bridge's Llama 3.1 405B pre-training rows on
//! DGX-GB200 and DGX-GB300 (NVIDIA-NeMo/Megatron-Bridge `docs/performance-summary-archive.md`
//! at 067f987d, the 26.06 NeMo container: 256 GPUs, 8,192 tokens, global batch 1,536, one
//! sequence a micro-batch) in the three low-precision recipes the page lists: FP8 current
//! scaling, MXFP8 and NVFP4. Nothing is fitted to them and none is in the project's shared
//! data. Compiled in; no IO.
//!
//! Each row runs with the table's layout and the switches of its performance recipe
//! (`src/megatron/bridge/perf_recipes/llama/{gb200,gb300}/llama31.py`,
//! `llama31_405b_pretrain_256gpu_{gb200,gb300}_{fp8cs,fp8mx,nvfp4}_config`, at 381d0b82):
//! the H100 recipe's base (no recomputation, no offloading, no CUDA graphs, the embedding and
//! the loss counted in the pipeline split, `account_for_*_in_pipeline_split`), sequence
//! parallelism, the distributed optimizer with overlapped 16-bit reduction and parameter
//! gather, fused attention and Transformer Engine's fused cross-entropy, and the userbuffers
//! tensor-parallel overlap except in the NVFP4 recipes (`tp_comm_overlap = False`): the
//! stack of `report::bridge_h100` with the row's precision and hardware. The comparison is in
//! tokens per second per GPU, as there.

use crate::inputs::hardware::{Hardware, HardwareError, Precision};
use crate::inputs::model::Model;
use crate::plan::predict::{predict, PredictError, PredictRequest, Prediction};
use crate::report::bridge_h100::{bridge_request, BridgeRow, Dispatcher};
use crate::report::{error_list, memory_cell};
use std::fmt::Write as _;

/// One published Blackwell run of Llama 3.1 405B.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BlackwellRow {
    /// The bundled hardware profile.
    pub hardware: &'static str,
    pub precision: Precision,
    pub tp: u64,
    pub pp: u64,
    pub cp: u64,
    pub vp: u64,
    /// Whether the recipe overlaps the tensor-parallel collectives (userbuffers).
    pub tp_comm_overlap: bool,
    pub tokens_per_s_per_gpu: f64,
    /// Megatron-Bridge's model TFLOP/s per GPU (its FLOP count; shown, not compared).
    pub tflops_per_gpu: f64,
}

/// The six 26.06 rows (256 GPUs, global batch 1,536, 8,192 tokens).
pub const BLACKWELL_ROWS: [BlackwellRow; 6] = [
    BlackwellRow {
        hardware: "gb200-nvl72",
        precision: Precision::Fp8,
        tp: 4,
        pp: 16,
        cp: 1,
        vp: 4,
        tp_comm_overlap: true,
        tokens_per_s_per_gpu: 843.0,
        tflops_per_gpu: 2129.0,
    },
    BlackwellRow {
        hardware: "gb200-nvl72",
        precision: Precision::Mxfp8,
        tp: 4,
        pp: 16,
        cp: 1,
        vp: 8,
        tp_comm_overlap: true,
        tokens_per_s_per_gpu: 783.0,
        tflops_per_gpu: 1976.0,
    },
    BlackwellRow {
        hardware: "gb200-nvl72",
        precision: Precision::Nvfp4,
        tp: 4,
        pp: 16,
        cp: 1,
        vp: 8,
        tp_comm_overlap: false,
        tokens_per_s_per_gpu: 1166.0,
        tflops_per_gpu: 2944.0,
    },
    BlackwellRow {
        hardware: "gb300-nvl72",
        precision: Precision::Fp8,
        tp: 4,
        pp: 8,
        cp: 1,
        vp: 4,
        tp_comm_overlap: true,
        tokens_per_s_per_gpu: 1048.0,
        tflops_per_gpu: 2646.0,
    },
    BlackwellRow {
        hardware: "gb300-nvl72",
        precision: Precision::Mxfp8,
        tp: 2,
        pp: 8,
        cp: 2,
        vp: 4,
        tp_comm_overlap: true,
        tokens_per_s_per_gpu: 952.0,
        tflops_per_gpu: 2403.0,
    },
    BlackwellRow {
        hardware: "gb300-nvl72",
        precision: Precision::Nvfp4,
        tp: 4,
        pp: 8,
        cp: 1,
        vp: 4,
        tp_comm_overlap: false,
        tokens_per_s_per_gpu: 1413.0,
        tflops_per_gpu: 3575.0,
    },
];

impl BlackwellRow {
    /// The row in `report::bridge_h100`'s form (its request builder sets the layout, the
    /// split and the recipe's common switches).
    pub fn bridge_row(&self) -> BridgeRow {
        BridgeRow {
            model: "llama3-405b",
            container: "26.06",
            gpus: 256,
            global_batch: 1536,
            seq_len: 8192,
            tp: self.tp,
            pp: self.pp,
            cp: self.cp,
            vp: self.vp,
            ep: 1,
            dispatcher: Dispatcher::None,
            tokens_per_s_per_gpu: self.tokens_per_s_per_gpu,
            tflops_per_gpu: self.tflops_per_gpu,
        }
    }

    /// The row's request for `model` on `hw`: `report::bridge_h100`'s with the row's precision
    /// and tensor-parallel overlap.
    pub fn request<'a>(&self, model: &'a Model, hw: &'a Hardware) -> PredictRequest<'a> {
        let mut req = bridge_request(&self.bridge_row(), model, hw);
        req.stack.precision = self.precision;
        req.stack.tp_comm_overlap = self.tp_comm_overlap;
        req
    }
}

/// One row predicted.
#[derive(Debug, Clone)]
pub struct BlackwellComparison {
    pub row: BlackwellRow,
    pub prediction: Prediction,
    /// Predicted / published tokens per second per GPU - 1.
    pub error: f64,
}

/// Why the rows could not be predicted.
#[derive(Debug, thiserror::Error)]
pub enum BlackwellError {
    #[error(transparent)]
    Hardware(#[from] HardwareError),
    #[error(transparent)]
    Predict(#[from] PredictError),
}

/// Predict every row on its bundled profile.
pub fn validate_bridge_blackwell() -> Result<Vec<BlackwellComparison>, BlackwellError> {
    let base = Model::preset("llama3-405b").expect("bundled preset");
    let model = Model {
        seq_len: 8192,
        ..base
    };
    BLACKWELL_ROWS
        .iter()
        .map(|row| {
            let hw = Hardware::bundled(row.hardware)?;
            let prediction = predict(&row.request(&model, &hw))?;
            Ok(BlackwellComparison {
                row: *row,
                error: prediction.tokens_per_s_per_gpu / row.tokens_per_s_per_gpu - 1.0,
                prediction,
            })
        })
        .collect()
}

/// The table of docs/validation.md, with the error per system.
pub fn blackwell_markdown(rows: &[BlackwellComparison]) -> String {
    let mut s = String::from(
        "| system | precision | t/p/cp/v | published tokens/s/GPU | predicted | error | published TFLOP/s (Bridge's count) | peak memory (GB) |\n|---|---|---|---|---|---|---|---|\n",
    );
    for c in rows {
        let r = &c.row;
        let _ = writeln!(
            s,
            "| {} | {} | {}/{}/{}/{} | {:.0} | {:.0} | {:+.1}% | {:.0} | {} |",
            r.hardware,
            r.precision.as_str(),
            r.tp,
            r.pp,
            r.cp,
            r.vp,
            r.tokens_per_s_per_gpu,
            c.prediction.tokens_per_s_per_gpu,
            100.0 * c.error,
            r.tflops_per_gpu,
            memory_cell(&c.prediction),
        );
    }
    for system in ["gb200-nvl72", "gb300-nvl72"] {
        let e: Vec<f64> = rows
            .iter()
            .filter(|c| c.row.hardware == system)
            .map(|c| c.error)
            .collect();
        let _ = writeln!(s, "\n{system} (held out): {}.", error_list(&e));
    }
    s
}
