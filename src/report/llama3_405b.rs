//! Meta's Llama 3 405B pre-training runs on H100 in BF16 (Llama 3 paper, arXiv 2407.21783,
//! Table 4): a held-out check of the H100 calibration, which is fitted to NeMo's FP8 rows
//! (docs/cost-model.md, "What was fitted"). None of these figures is in `shared/`.
//!
//! Each row is predicted with the row's layout and a Megatron-Core-like stack (BF16, flash
//! attention, sequence parallelism with tensor-parallel overlap, the distributed optimizer with
//! overlapped gradient reduction and parameter gather). What the paper does not state is an
//! assumption, named in [`LLAMA3_405B_ASSUMPTIONS`].

use crate::cost::{CpComm, Recompute, Stack, Zero};
use crate::inputs::hardware::Hardware;
use crate::inputs::model::Model;
use crate::plan::predict::{
    predict, PipelineSplit, PredictError, PredictRequest, Prediction, Split,
};
use crate::schedule::generators::ScheduleName;

/// One row of Table 4.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Llama3Row {
    pub gpus: u64,
    pub tp: u64,
    pub cp: u64,
    pub pp: u64,
    pub dp: u64,
    pub seq_len: u64,
    /// Sequences per data-parallel rank per step.
    pub batch_per_dp: u64,
    /// Published BF16 TFLOP/s per GPU.
    pub tflops_per_gpu: f64,
}

/// Table 4 of the Llama 3 paper: 16M tokens a step in each row.
pub const LLAMA3_405B_ROWS: [Llama3Row; 3] = [
    Llama3Row {
        gpus: 8192,
        tp: 8,
        cp: 1,
        pp: 16,
        dp: 64,
        seq_len: 8192,
        batch_per_dp: 32,
        tflops_per_gpu: 430.0,
    },
    Llama3Row {
        gpus: 16384,
        tp: 8,
        cp: 1,
        pp: 16,
        dp: 128,
        seq_len: 8192,
        batch_per_dp: 16,
        tflops_per_gpu: 400.0,
    },
    Llama3Row {
        gpus: 16384,
        tp: 8,
        cp: 16,
        pp: 16,
        dp: 8,
        seq_len: 131072,
        batch_per_dp: 16,
        tflops_per_gpu: 380.0,
    },
];

/// What the paper does not state and pplan assumes.
pub const LLAMA3_405B_ASSUMPTIONS: &str = "micro-batch 1; interleaved 1F1B (the paper's \
schedule is its own interleaved variant) with v = 8 chunks of one layer, the first chunk of the \
first stage only the embedding and the last chunk of the last stage only the output layer and \
loss (the paper, Sec. 3.3.2: one transformer layer fewer on the first and last stages, whose \
end chunks then hold only those: 126 + 2 = 16 x 8); no recomputation; context parallelism by \
all-gather of K and V (the paper, Sec. 3.3.2)";

/// The stack of the prediction (module docs).
pub fn llama3_stack(cp: u64) -> Stack {
    Stack {
        zero: Zero::Optimizer,
        cp_comm: if cp > 1 {
            CpComm::AllGather
        } else {
            CpComm::P2p
        },
        ..Stack::megatron_core()
    }
}

/// A row predicted.
#[derive(Debug, Clone)]
pub struct Llama3Comparison {
    pub row: Llama3Row,
    pub prediction: Prediction,
    /// Predicted / published TFLOP/s per GPU - 1.
    pub error: f64,
    /// The predicted step's model FLOP/s per GPU with the attention core's FLOPs counted
    /// causally (half the `4 b s^2 a d_h` of [`CostModel::attention_core_flops`](crate::cost::CostModel::attention_core_flops): only the
    /// blocks on and below the diagonal), in TFLOP/s: pplan's `model_tflops_per_gpu` counts
    /// them whole, as Megatron-LM and NeMo do. The paper does not say which it counts; at
    /// 131,072 tokens the two differ by 1.4x.
    pub causal_tflops_per_gpu: f64,
}

/// Predict every row on `hw`.
pub fn validate_llama3_405b(hw: &Hardware) -> Result<Vec<Llama3Comparison>, PredictError> {
    let base = Model::preset("llama3-405b").expect("bundled llama3-405b");
    LLAMA3_405B_ROWS
        .iter()
        .map(|row| {
            let model = Model {
                seq_len: row.seq_len,
                ..base.clone()
            };
            let mut req = PredictRequest::new(&model, hw);
            req.gpus = row.gpus;
            req.tp = row.tp;
            req.pp = row.pp;
            req.cp = row.cp;
            req.dp = Some(row.dp);
            req.micro_batch = 1;
            req.global_batch = row.batch_per_dp * row.dp;
            req.schedule = Some(ScheduleName::Interleaved1F1B);
            // The first and last stages one layer short, their end chunks only the embedding
            // and the loss: Megatron-Core's rule that counts both as layers.
            req.chunks = 8;
            req.partition = Split::Megatron(PipelineSplit::EMBEDDING_AND_LOSS);
            req.recompute = Recompute::None;
            req.sequence_parallel = true;
            req.stack = llama3_stack(row.cp);
            let prediction = predict(&req)?;
            let cm = req.cost_model(row.dp);
            Ok(Llama3Comparison {
                error: prediction.model_tflops_per_gpu / row.tflops_per_gpu - 1.0,
                causal_tflops_per_gpu: prediction.model_tflops_per_gpu
                    * cm.causal_model_flops_fraction(),
                row: *row,
                prediction,
            })
        })
        .collect()
}

/// The Markdown table of docs/validation.md.
pub fn llama3_405b_markdown(rows: &[Llama3Comparison]) -> String {
    let mut s = String::from(
        "| GPUs | t/cp/p/d | seq | published TFLOP/s | predicted TFLOP/s | error | predicted, causal attention FLOPs | error | bubble | peak memory (GB) |\n|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for c in rows {
        let r = &c.row;
        let gb = c.prediction.peak_memory_bytes as f64 / 1e9;
        s += &format!(
            "| {} | {}/{}/{}/{} | {} | {:.0} | {:.1} | {:+.1}% | {:.1} | {:+.1}% | {:.3} | {:.1}{} |\n",
            r.gpus,
            r.tp,
            r.cp,
            r.pp,
            r.dp,
            r.seq_len,
            r.tflops_per_gpu,
            c.prediction.model_tflops_per_gpu,
            100.0 * c.error,
            c.causal_tflops_per_gpu,
            100.0 * (c.causal_tflops_per_gpu / r.tflops_per_gpu - 1.0),
            c.prediction.bubble_fraction,
            gb,
            if c.prediction.fits {
                ""
            } else {
                " (does not fit)"
            }
        );
    }
    s
}
