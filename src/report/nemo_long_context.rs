//! Held-out validation of context parallelism: NeMo's long-sequence table
//! (NVIDIA/NeMo `docs/source/performance/performance_long_sequence.md` at 19fadb67b0,
//! "LLAMA2-7B (FP8) - H100", container NeMo 24.03.01, DGX-H100): Llama 2 7B in FP8 at
//! sequences of 4k to 1,024k tokens, 4k tokens x 1,024 sequences every step, with the TP, PP,
//! DP and CP of each run ("With CP" columns). None of these runs is in the project's shared
//! data. Compiled in; no IO.
//!
//! The table states the layout and the global batch only. Everything else is taken from the
//! NeMo 24.07 harness (`report::nemo`): Llama 2 7B's architecture and its 24.07 training
//! config (no recomputation, sequence parallelism when t > 1, the distributed optimizer,
//! overlapped gradient reduction, no tensor-parallel overlap), FP8 linear layers and flash
//! attention, micro-batch 1. The page's TFLOP/s are NeMo's model FLOPs, which count the
//! attention core whole (checked on the 24.07 table, docs/validation.md), as pplan's
//! `model_tflops_per_gpu` does; the two are compared directly.

use crate::inputs::hardware::Hardware;
use crate::plan::predict::{predict, Prediction};
use crate::report::nemo::{nemo_24_07_stack, nemo_cases, NemoError};
use crate::report::{mean_abs, worst_by};
use std::fmt::Write as _;

/// One run of the table's "With CP" columns.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LongSequenceRow {
    /// Sequence length in tokens (the page's "SeqLen (K)" x 1,024).
    pub seq_len: u64,
    pub gpus: u64,
    /// Global batch in sequences ("Batch Size").
    pub global_batch: u64,
    pub tp: u64,
    pub pp: u64,
    pub dp: u64,
    pub cp: u64,
    /// Model TFLOP/s per GPU as NeMo reports it.
    pub tflops_per_gpu: f64,
}

/// One run of the page: sequence in k tokens, global batch, TP, PP, DP, CP, TFLOP/s per GPU
/// (the page's "# of GPUs" is t x p x d x cp).
const fn run(
    k: u64,
    batch: u64,
    tp: u64,
    pp: u64,
    dp: u64,
    cp: u64,
    tflops: f64,
) -> LongSequenceRow {
    LongSequenceRow {
        seq_len: k * 1024,
        gpus: tp * pp * dp * cp,
        global_batch: batch,
        tp,
        pp,
        dp,
        cp,
        tflops_per_gpu: tflops,
    }
}

/// The table, shortest sequence first.
pub const LONG_SEQUENCE_ROWS: [LongSequenceRow; 9] = [
    run(4, 1024, 1, 1, 4, 1, 768.0),
    run(8, 512, 1, 2, 4, 1, 730.0),
    run(16, 256, 2, 1, 8, 1, 660.0),
    run(32, 128, 2, 1, 8, 2, 610.0),
    run(64, 64, 4, 1, 8, 2, 574.0),
    run(128, 32, 4, 1, 8, 4, 555.0),
    run(256, 16, 4, 1, 8, 8, 549.0),
    run(512, 8, 8, 1, 4, 16, 549.0),
    run(1024, 4, 8, 1, 4, 32, 536.0),
];

/// Every run of the table, shortest sequence first.
pub fn long_sequence_rows() -> Vec<LongSequenceRow> {
    LONG_SEQUENCE_ROWS.to_vec()
}

/// One run predicted.
#[derive(Debug, Clone)]
pub struct LongSequenceComparison {
    pub row: LongSequenceRow,
    pub prediction: Prediction,
    /// predicted / published model TFLOP/s per GPU - 1 (attention core counted whole).
    pub error: f64,
    /// The predicted step's model TFLOP/s per GPU with the attention core counted causally
    /// ([`CostModel::causal_model_flops_fraction`](crate::cost::CostModel::causal_model_flops_fraction)).
    pub causal_tflops_per_gpu: f64,
}

impl LongSequenceComparison {
    /// predicted (causal count) / published - 1.
    pub fn causal_error(&self) -> f64 {
        self.causal_tflops_per_gpu / self.row.tflops_per_gpu - 1.0
    }
}

/// Predict every run on `hw` (the bundled `h100-80gb`) with Llama 2 7B as NeMo 24.07 trains
/// it and the run's layout: the 24.07 row's request (`NemoCase::request`) with the sequence,
/// GPUs, TP, PP, DP, CP and global batch replaced; PP 2 runs 1F1B (no virtual stages stated).
pub fn validate_long_sequence(hw: &Hardware) -> Result<Vec<LongSequenceComparison>, NemoError> {
    let base = nemo_cases()?
        .into_iter()
        .find(|c| c.row.model == "LLAMA2-7B")
        .ok_or_else(|| NemoError::Data("no LLAMA2-7B row in the NeMo 24.07 table".into()))?;
    long_sequence_rows()
        .into_iter()
        .map(|row| {
            let mut case = base.clone();
            case.model =
                case.spec
                    .model(row.seq_len, row.tp)
                    .map_err(|source| NemoError::Model {
                        row: format!("long-sequence {}k", row.seq_len / 1024),
                        source,
                    })?;
            let r = &mut case.row;
            r.id = format!("long-sequence {}k", row.seq_len / 1024);
            (r.seq_len, r.gpus_total, r.global_batch, r.micro_batch) =
                (row.seq_len, row.gpus, row.global_batch, 1);
            (r.t, r.p, r.d, r.cp) = (row.tp, row.pp, row.dp, row.cp);
            r.schedule = if row.pp > 1 { "1F1B" } else { "none" }.into();
            let req = case.request(hw, nemo_24_07_stack())?;
            let prediction = predict(&req).map_err(|source| NemoError::Predict {
                row: case.row.id.clone(),
                source,
            })?;
            let cm = req.cost_model(row.dp);
            Ok(LongSequenceComparison {
                error: prediction.model_tflops_per_gpu / row.tflops_per_gpu - 1.0,
                causal_tflops_per_gpu: prediction.model_tflops_per_gpu
                    * cm.causal_model_flops_fraction(),
                row,
                prediction,
            })
        })
        .collect()
}

/// The table of docs/validation.md: each run's prediction in both attention-FLOP
/// conventions, with the mean absolute and the worst error of each.
pub fn long_sequence_markdown(rows: &[LongSequenceComparison]) -> String {
    let mut s = String::from(
        "| seq | GPUs | batch | t/p/d/cp | published TFLOP/s | predicted TFLOP/s (attention whole) | error | predicted, causal attention FLOPs | error | peak memory (GB) |\n|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for c in rows {
        let r = &c.row;
        let _ = writeln!(
            s,
            "| {}k | {} | {} | {}/{}/{}/{} | {:.0} | {:.1} | {:+.1}% | {:.1} | {:+.1}% | {:.1}{} |",
            r.seq_len / 1024,
            r.gpus,
            r.global_batch,
            r.tp,
            r.pp,
            r.dp,
            r.cp,
            r.tflops_per_gpu,
            c.prediction.model_tflops_per_gpu,
            100.0 * c.error,
            c.causal_tflops_per_gpu,
            100.0 * c.causal_error(),
            c.prediction.peak_memory_bytes as f64 / 1e9,
            if c.prediction.fits {
                ""
            } else {
                " (does not fit)"
            },
        );
    }
    for (name, error) in [
        (
            "attention counted whole",
            (|c: &LongSequenceComparison| c.error) as fn(&LongSequenceComparison) -> f64,
        ),
        ("attention counted causally", |c| c.causal_error()),
    ] {
        let mae = mean_abs(rows.iter().map(error));
        if let Some(w) = worst_by(rows, |c| error(c)) {
            let _ = writeln!(
                s,
                "\n{} runs (held out), {name}: MAE {:.1}%, worst {}k ({:+.1}%).",
                rows.len(),
                100.0 * mae,
                w.row.seq_len / 1024,
                100.0 * error(w)
            );
        }
    }
    s
}
