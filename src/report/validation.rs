//! Validation against published measurements: Narayanan et al. 2021 (Megatron-LM), Table 1.
//!
//! The rows are bundled (`data/megatron-2021-table1.json`, copied from the project's shared
//! data). For each row `pplan` takes the row's model, t, p, d and global batch on the
//! `a100-80gb` profile, searches the micro-batch size and chunk count
//! ([`crate::plan::predict::best_micro_batch_and_chunks`]) and compares the predicted hardware
//! TFLOP/s per GPU with the published one. No IO: the data is compiled in.

use crate::inputs::hardware::Hardware;
use crate::inputs::model::Model;
use crate::plan::predict::{best_micro_batch_and_chunks, PredictRequest, Prediction};
use serde::Deserialize;

pub const MEGATRON_2021_TABLE1: &str = include_str!("../../data/megatron-2021-table1.json");

#[derive(Debug, Clone, Deserialize)]
pub struct Row {
    pub id: String,
    pub params_b: f64,
    pub layers: u32,
    pub hidden: u64,
    pub ffn_hidden: u64,
    pub heads: u64,
    pub seq_len: u64,
    pub vocab: u64,
    pub gpus_total: u64,
    pub t: u64,
    pub p: u64,
    pub d: u64,
    pub global_batch: u64,
    pub tflops_per_gpu: f64,
}

#[derive(Deserialize)]
struct Table {
    rows: Vec<Row>,
}

pub fn megatron_rows() -> Vec<Row> {
    serde_json::from_str::<Table>(MEGATRON_2021_TABLE1)
        .map(|t| t.rows)
        .unwrap_or_default()
}

/// The bundled preset with this row's dimensions.
pub fn row_model(row: &Row) -> Option<Model> {
    crate::inputs::model::PRESETS
        .iter()
        .filter_map(|p| Model::preset(p.0))
        .find(|m| {
            m.name.starts_with("gpt-")
                && m.num_layers == row.layers
                && m.hidden_size == row.hidden
                && m.num_heads == row.heads
                && m.ffn_hidden_size == row.ffn_hidden
                && m.vocab_size == row.vocab
                && m.seq_len == row.seq_len
        })
}

#[derive(Debug, Clone)]
pub struct Comparison {
    pub row: Row,
    pub model: String,
    pub prediction: Prediction,
    /// predicted / published - 1.
    pub error: f64,
}

/// Predict every row with `hw`.
pub fn validate_megatron(hw: &Hardware) -> Result<Vec<Comparison>, String> {
    let mut out = Vec::new();
    for row in megatron_rows() {
        let model = row_model(&row).ok_or_else(|| format!("{}: no preset", row.id))?;
        let mut req = PredictRequest::new(&model, hw);
        req.gpus = row.gpus_total;
        req.tp = row.t;
        req.pp = row.p;
        req.dp = Some(row.d);
        req.global_batch = row.global_batch;
        let best = best_micro_batch_and_chunks(&req, None, None)
            .map_err(|e| format!("{}: {e}", row.id))?
            .ok_or_else(|| format!("{}: no configuration fits", row.id))?;
        out.push(Comparison {
            error: best.tflops_per_gpu / row.tflops_per_gpu - 1.0,
            model: model.name.clone(),
            row,
            prediction: best,
        });
    }
    Ok(out)
}
