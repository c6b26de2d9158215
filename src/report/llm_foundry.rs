//! Held out: MosaicML llm-foundry's published MPT throughput with PyTorch FSDP
//! (mosaicml/llm-foundry `scripts/train/benchmarking/README.md` at 5e85bd62d, 2024-01-06):
//! its "H100 80GB BF16 (Large Scale, >= 128 GPUs)" table (128-512 H100, sequence 2048) and
//! its "A100 80GB" table (mostly one node of 8 A100, sequence 512-65,536, with gradient
//! accumulation) ([`FoundryTable`]). Nothing in pplan was fitted to these runs. Compiled in;
//! no IO.
//!
//! Every run is data parallelism only over all its GPUs (no tensor or pipeline parallelism),
//! BF16, with the sharding the row states ([`FsdpSharding`]): `FULL_SHARD` (parameters
//! all-gathered layer by layer in the forward and again in the backward, gradients
//! reduce-scattered) or `SHARD_GRAD_OP` (parameters gathered layer by layer in the forward and
//! kept through the backward, gradients reduce-scattered): both are pplan's ZeRO-3, with and
//! without resharding after the forward. The
//! stack is the benchmark's ([`foundry_stack`]): PyTorch's FSDP (FSDP1; the H100 sweep's image
//! is `mosaicml/pytorch:2.1.0_cu121-python3.10-ubuntu20.04`), whose flat parameters are views
//! (no FSDP2 copies), with Composer's `mixed_precision: DEFAULT` (parameters gathered in BF16,
//! gradients reduced in FP32: composer 0.17.2+, which the commit pins, `get_mixed_precision`
//! after d745fcb1b) or, where the row says so, `PURE` (reduced in BF16), eager PyTorch for the
//! norms, GeLU and residuals, a fused (flash) attention kernel (`attn_impl: triton`) and full
//! activation checkpointing where the row says `True`. The MPT architectures are the commit's
//! `scripts/train/yamls/pretrain/mpt-*.yaml` ([`mpt_model`]). Compared in tokens/s per GPU.

use super::{mean_abs, worst_by};
use crate::cost::{Recompute, Stack, Zero};

/// PyTorch FSDP's sharding strategies the tables use. Both shard parameters, gradients and
/// optimizer state between steps (pplan's ZeRO-3, `Zero::Full`); they differ in when the
/// gathered parameters are freed (PyTorch's `ShardingStrategy` docs: `SHARD_GRAD_OP` "does
/// not reshard them after the forward, and only reshards them after the backward").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsdpSharding {
    /// `FULL_SHARD`: resharded after each layer's forward, gathered again for its backward.
    FullShard,
    /// `SHARD_GRAD_OP`: kept from the forward through the backward.
    ShardGradOp,
}
use crate::inputs::hardware::Hardware;
use crate::inputs::model::Model;
use crate::plan::predict::{predict, PredictError, PredictRequest, Prediction};
use std::fmt::Write as _;

/// One published run of the table.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FoundryRow {
    /// `mpt-1b` ... `mpt-70b` ([`mpt_model`]).
    pub model: &'static str,
    pub seq_len: u64,
    pub gpus: u64,
    pub micro_batch: u64,
    pub global_batch: u64,
    pub sharding: FsdpSharding,
    /// Activation checkpointing of every block (full recomputation).
    pub checkpointing: bool,
    /// Gradients reduced in FP32 (`mixed_precision: DEFAULT`), else in BF16 (`PURE`).
    pub fp32_reduce: bool,
    /// The table's "Throughput (T/s/GPU)".
    pub tokens_per_s_per_gpu: f64,
    /// The table's MFU (%), the attention counted whole.
    pub mfu_percent: f64,
    /// The table's "NumParams" (with the learned position embedding, sequence x d_model).
    pub num_params: u64,
}

/// (model, sequence, GPUs, micro-batch, global batch, sharding, checkpointing, gradients
/// reduced in FP32 (Composer's `mixed_precision: DEFAULT`; `PURE` reduces in BF16), tokens/s
/// per GPU, MFU %, parameters): one row of a table as printed.
type Printed = (
    &'static str,
    u64,
    u64,
    u64,
    u64,
    FsdpSharding,
    bool,
    bool,
    f64,
    f64,
    u64,
);

const FULL: FsdpSharding = FsdpSharding::FullShard;
const GRAD: FsdpSharding = FsdpSharding::ShardGradOp;

/// "H100 80GB BF16 (Large Scale, >= 128 GPUs)", lines 72-93: 18 runs, gradient accumulation
/// 1 (the global batch is micro-batch x GPUs).
#[rustfmt::skip]
const H100_LARGE_SCALE: [Printed; 18] = [
    ("mpt-70b", 2048, 512, 8, 4096, FULL, true, true, 1007.0, 41.25, 64862437376),
    ("mpt-70b", 2048, 256, 8, 2048, FULL, true, true, 1035.0, 42.42, 64862437376),
    ("mpt-70b", 2048, 128, 8, 1024, FULL, true, true, 1058.0, 43.36, 64862437376),
    ("mpt-30b", 2048, 512, 8, 4096, FULL, true, true, 2115.0, 40.27, 29975214080),
    ("mpt-30b", 2048, 256, 8, 2048, FULL, true, true, 2148.0, 40.89, 29975214080),
    ("mpt-30b", 2048, 128, 8, 1024, FULL, true, true, 2199.0, 41.85, 29975214080),
    ("mpt-13b", 2048, 512, 16, 8192, FULL, true, true, 4952.0, 41.12, 12853954560),
    ("mpt-13b", 2048, 256, 16, 4096, FULL, true, true, 4989.0, 41.42, 12853954560),
    ("mpt-13b", 2048, 128, 16, 2048, FULL, true, true, 5080.0, 42.18, 12853954560),
    ("mpt-7b", 2048, 512, 6, 3072, FULL, false, true, 9670.0, 42.2, 6658859008),
    ("mpt-7b", 2048, 256, 6, 1536, FULL, false, true, 10119.0, 44.15, 6658859008),
    ("mpt-7b", 2048, 128, 6, 768, FULL, false, true, 10475.0, 45.71, 6658859008),
    ("mpt-3b", 2048, 512, 8, 4096, GRAD, false, true, 21664.0, 39.24, 2651837440),
    ("mpt-3b", 2048, 256, 8, 2048, GRAD, false, true, 22772.0, 41.25, 2651837440),
    ("mpt-3b", 2048, 128, 8, 1024, GRAD, false, true, 23422.0, 42.43, 2651837440),
    ("mpt-1b", 2048, 512, 12, 6144, GRAD, false, true, 39837.0, 36.65, 1315950592),
    ("mpt-1b", 2048, 256, 12, 3072, GRAD, false, true, 42555.0, 39.15, 1315950592),
    ("mpt-1b", 2048, 128, 12, 1536, GRAD, false, true, 44123.0, 40.6, 1315950592),
];

/// "A100 80GB with 1600 Gbps node-node interconnect (RoCE)", lines 162-226: 61 runs, 59 of
/// them on one node of 8 GPUs at sequence 512-65,536, with gradient accumulation.
#[rustfmt::skip]
const A100_80GB: [Printed; 61] = [
    ("mpt-70b", 2048, 64, 8, 2048, FULL, true, false, 410.0, 53.33, 64862437376),
    ("mpt-70b", 2048, 32, 2, 1024, FULL, true, false, 373.0, 48.56, 64862437376),
    ("mpt-30b", 8192, 8, 1, 168, FULL, true, true, 574.0, 39.38, 30019254272),
    ("mpt-30b", 4096, 8, 1, 168, FULL, true, true, 814.0, 51.37, 29989894144),
    ("mpt-30b", 2048, 8, 3, 504, FULL, true, true, 916.0, 55.3, 29975214080),
    ("mpt-30b", 1024, 8, 6, 1008, FULL, true, true, 946.0, 55.82, 29967874048),
    ("mpt-30b", 512, 8, 12, 2016, FULL, true, true, 967.0, 56.4, 29964204032),
    ("mpt-13b", 32768, 8, 1, 24, FULL, true, true, 1016.0, 51.69, 13011240960),
    ("mpt-13b", 16384, 8, 3, 72, FULL, true, true, 1431.0, 54.07, 12927354880),
    ("mpt-13b", 8192, 8, 5, 120, FULL, true, true, 1795.0, 56.07, 12885411840),
    ("mpt-13b", 4096, 8, 10, 240, FULL, true, true, 2060.0, 57.62, 12864440320),
    ("mpt-13b", 2048, 8, 2, 48, FULL, false, true, 2262.0, 59.57, 12853954560),
    ("mpt-13b", 1024, 8, 40, 960, FULL, true, true, 2330.0, 59.48, 12848711680),
    ("mpt-7b", 65536, 8, 1, 16, FULL, true, true, 1013.0, 46.97, 6918905856),
    ("mpt-7b", 32768, 8, 2, 32, FULL, true, true, 1672.0, 49.46, 6784688128),
    ("mpt-7b", 16384, 8, 4, 64, FULL, true, true, 2453.0, 51.96, 6717579264),
    ("mpt-7b", 8192, 8, 8, 128, FULL, true, true, 3206.0, 54.47, 6684024832),
    ("mpt-7b", 4096, 8, 16, 256, FULL, true, true, 3684.0, 54.84, 6667247616),
    ("mpt-7b", 2048, 8, 6, 96, FULL, false, true, 4641.0, 64.23, 6658859008),
    ("mpt-7b", 1024, 8, 64, 1024, FULL, true, true, 4357.0, 58.01, 6654664704),
    ("mpt-3b", 65536, 8, 1, 16, FULL, true, true, 1767.0, 46.05, 2814366720),
    ("mpt-3b", 32768, 8, 3, 144, FULL, true, true, 3029.0, 47.18, 2730480640),
    ("mpt-3b", 16384, 8, 1, 48, FULL, false, true, 5529.0, 57.13, 2688537600),
    ("mpt-3b", 8192, 8, 3, 144, FULL, false, true, 7695.0, 59.34, 2667566080),
    ("mpt-3b", 4096, 8, 5, 240, FULL, false, true, 9457.0, 60.53, 2657080320),
    ("mpt-3b", 2048, 8, 10, 160, FULL, false, true, 10811.0, 62.11, 2651837440),
    ("mpt-3b", 1024, 8, 20, 960, FULL, false, true, 11580.0, 62.73, 2649216000),
    ("mpt-3b", 512, 8, 40, 1920, FULL, false, true, 12127.0, 63.71, 2647905280),
    ("mpt-1b", 65536, 8, 1, 16, FULL, true, true, 3044.0, 46.18, 1445974016),
    ("mpt-1b", 32768, 8, 1, 32, FULL, false, true, 6275.0, 55.52, 1378865152),
    ("mpt-1b", 16384, 8, 2, 64, FULL, false, true, 9956.0, 56.6, 1345310720),
    ("mpt-1b", 8192, 8, 3, 96, FULL, false, true, 13814.0, 56.69, 1328533504),
    ("mpt-1b", 4096, 8, 7, 224, FULL, false, true, 17807.0, 59.0, 1320144896),
    ("mpt-1b", 2048, 8, 14, 448, FULL, false, true, 20513.0, 59.86, 1315950592),
    ("mpt-1b", 1024, 8, 18, 576, FULL, false, true, 22112.0, 60.15, 1313853440),
    ("mpt-1b", 512, 8, 56, 1792, FULL, false, true, 23148.0, 60.68, 1312804864),
    ("mpt-760m", 65536, 8, 1, 16, FULL, true, true, 4143.0, 45.34, 857988096),
    ("mpt-760m", 32768, 8, 1, 16, FULL, false, true, 8802.0, 54.57, 807656448),
    ("mpt-760m", 16384, 8, 3, 48, FULL, false, true, 14274.0, 54.64, 782490624),
    ("mpt-760m", 8192, 8, 6, 96, FULL, false, true, 20933.0, 55.31, 769907712),
    ("mpt-760m", 4096, 8, 12, 192, FULL, false, true, 27351.0, 56.05, 763616256),
    ("mpt-760m", 2048, 8, 24, 384, FULL, false, true, 32434.0, 56.85, 760470528),
    ("mpt-760m", 1024, 8, 48, 768, FULL, false, true, 29765.0, 47.76, 758897664),
    ("mpt-760m", 512, 8, 96, 1536, FULL, false, true, 29446.0, 45.07, 758111232),
    ("mpt-350m", 65536, 8, 1, 16, FULL, false, true, 7524.0, 52.7, 420997120),
    ("mpt-350m", 32768, 8, 2, 32, FULL, false, true, 13652.0, 52.46, 387442688),
    ("mpt-350m", 16384, 8, 4, 64, FULL, false, true, 23559.0, 53.28, 370665472),
    ("mpt-350m", 8192, 8, 8, 128, FULL, false, true, 36569.0, 53.8, 362276864),
    ("mpt-350m", 4096, 8, 16, 256, FULL, false, true, 49555.0, 53.31, 358082560),
    ("mpt-350m", 2048, 8, 32, 512, FULL, false, true, 58782.0, 51.62, 355985408),
    ("mpt-350m", 1024, 8, 64, 1024, FULL, false, true, 64813.0, 50.51, 354936832),
    ("mpt-350m", 512, 8, 128, 2048, FULL, false, true, 69330.0, 50.61, 354412544),
    ("mpt-125m", 65536, 8, 1, 16, FULL, false, true, 20368.0, 54.13, 174070272),
    ("mpt-125m", 32768, 8, 2, 32, FULL, false, true, 36407.0, 52.71, 148904448),
    ("mpt-125m", 16384, 8, 4, 64, FULL, false, true, 60040.0, 50.61, 136321536),
    ("mpt-125m", 8192, 8, 8, 128, FULL, false, true, 90392.0, 48.85, 130030080),
    ("mpt-125m", 4096, 8, 16, 256, FULL, false, true, 118396.0, 46.08, 126884352),
    ("mpt-125m", 2048, 8, 40, 640, FULL, false, true, 142830.0, 44.79, 125311488),
    ("mpt-125m", 2048, 8, 32, 512, FULL, false, true, 141737.0, 44.45, 125311488),
    ("mpt-125m", 1024, 8, 64, 1024, FULL, false, true, 156468.0, 43.15, 124525056),
    ("mpt-125m", 512, 8, 128, 2048, FULL, false, true, 165681.0, 42.56, 124131840),
];

/// The two tables of the page pplan predicts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FoundryTable {
    /// H100 80GB BF16, 128-512 GPUs (`h100-80gb`).
    H100LargeScale,
    /// A100 80GB on one to eight nodes (`a100-80gb`: the page's 1,600 Gb/s a node is its 8 x
    /// 200 Gb/s).
    A100,
}

impl FoundryTable {
    /// The bundled hardware profile of the table's GPUs.
    pub fn hardware(self) -> &'static str {
        match self {
            FoundryTable::H100LargeScale => "h100-80gb",
            FoundryTable::A100 => "a100-80gb",
        }
    }

    /// The table's rows, in its order.
    pub fn rows(self) -> Vec<FoundryRow> {
        let printed: &[Printed] = match self {
            FoundryTable::H100LargeScale => &H100_LARGE_SCALE,
            FoundryTable::A100 => &A100_80GB,
        };
        printed
            .iter()
            .map(
                |&(
                    model,
                    seq_len,
                    gpus,
                    micro_batch,
                    global_batch,
                    sharding,
                    checkpointing,
                    fp32_reduce,
                    tps,
                    mfu,
                    params,
                )| {
                    FoundryRow {
                        model,
                        seq_len,
                        gpus,
                        micro_batch,
                        global_batch,
                        sharding,
                        checkpointing,
                        fp32_reduce,
                        tokens_per_s_per_gpu: tps,
                        mfu_percent: mfu,
                        num_params: params,
                    }
                },
            )
            .collect()
    }
}

/// An MPT model of llm-foundry's pretraining configs
/// (`mpt-{125m,350m,760m,1b,3b,7b,13b,30b,70b}.yaml`) at sequence `seq_len`:
/// (layers, d_model, heads); `expansion_ratio` 4 (a GeLU MLP of 4 d_model, not gated),
/// vocabulary 50,368, input and output embeddings tied (MPT's output layer is the token
/// embedding), no dropout (MPT's `resid_pdrop`, `attn_pdrop` and `emb_pdrop` default to 0).
/// `None` for another name.
pub fn mpt_model(name: &str, seq_len: u64) -> Option<Model> {
    let (layers, d, heads) = match name {
        "mpt-125m" => (12, 768, 12),
        "mpt-350m" => (24, 1024, 16),
        "mpt-760m" => (24, 1536, 12),
        "mpt-1b" => (24, 2048, 16),
        "mpt-3b" => (32, 2560, 20),
        "mpt-7b" => (32, 4096, 32),
        "mpt-13b" => (40, 5120, 40),
        "mpt-30b" => (48, 7168, 56),
        "mpt-70b" => (80, 8192, 64),
        _ => return None,
    };
    let mut m = Model::preset("gpt-1.7b")?;
    m.name = name.to_string();
    m.num_layers = layers;
    m.hidden_size = d;
    m.num_heads = heads;
    m.num_kv_heads = heads;
    m.ffn_hidden_size = 4 * d;
    m.vocab_size = 50368;
    m.seq_len = seq_len;
    m.gated_mlp = false;
    m.tied_embeddings = true;
    m.dropout = false;
    Some(m)
}

/// The benchmark's stack for `row` (module docs): torchtitan's eager kernels, but PyTorch
/// FSDP1 (flat parameters, no FSDP2 copies) sharding parameters, gradients and optimizer state
/// (ZeRO-3), the parameters resharded after the forward only under `FULL_SHARD`, gradients
/// reduced in FP32 (`DEFAULT`) or BF16 (`PURE`).
pub fn foundry_stack(row: &FoundryRow) -> Stack {
    Stack {
        zero: Zero::Full,
        reshard_after_forward: row.sharding == FsdpSharding::FullShard,
        fsdp2: false,
        grad_reduce_bytes_per_param: if row.fp32_reduce { 4.0 } else { 2.0 },
        ..Stack::torchtitan()
    }
}

/// The request for one row on `hw`.
pub fn foundry_request<'a>(
    row: &FoundryRow,
    model: &'a Model,
    hw: &'a Hardware,
) -> PredictRequest<'a> {
    let mut req = PredictRequest::new(model, hw);
    req.gpus = row.gpus;
    req.dp = Some(row.gpus);
    req.global_batch = row.global_batch;
    req.micro_batch = row.micro_batch;
    req.recompute = if row.checkpointing {
        Recompute::Full
    } else {
        Recompute::None
    };
    req.stack = foundry_stack(row);
    req
}

/// One row predicted.
#[derive(Debug, Clone)]
pub struct FoundryComparison {
    pub row: FoundryRow,
    pub prediction: Prediction,
    /// Predicted tokens/s per GPU over the published, minus 1.
    pub error: f64,
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FoundryError {
    #[error("llm-foundry row {model} on {gpus} GPUs: {what}")]
    Row {
        model: String,
        gpus: u64,
        what: String,
    },
    #[error("llm-foundry row {model} on {gpus} GPUs: {source}")]
    Predict {
        model: String,
        gpus: u64,
        source: PredictError,
    },
}

/// Predict every row of `table` on `hw` (the table's GPUs: [`FoundryTable::hardware`]).
pub fn validate_llm_foundry(
    table: FoundryTable,
    hw: &Hardware,
) -> Result<Vec<FoundryComparison>, FoundryError> {
    let mut out = Vec::new();
    for row in table.rows() {
        let model = mpt_model(row.model, row.seq_len).ok_or_else(|| FoundryError::Row {
            model: row.model.into(),
            gpus: row.gpus,
            what: "not an MPT model of the table".into(),
        })?;
        let prediction = predict(&foundry_request(&row, &model, hw)).map_err(|source| {
            FoundryError::Predict {
                model: row.model.into(),
                gpus: row.gpus,
                source,
            }
        })?;
        let error = prediction.tokens_per_s_per_gpu / row.tokens_per_s_per_gpu - 1.0;
        out.push(FoundryComparison {
            row,
            prediction,
            error,
        });
    }
    Ok(out)
}

/// Mean absolute error of the rows.
pub fn foundry_mae(rows: &[FoundryComparison]) -> f64 {
    mean_abs(rows.iter().map(|c| c.error))
}

/// A table of docs/validation.md, its summary naming `hw`.
pub fn foundry_markdown(rows: &[FoundryComparison], hw: &str) -> String {
    let mut s = String::from(
        "| model | seq | GPUs | b | global batch | sharding | checkpointing | published tokens/s/GPU | predicted | error | published MFU | predicted MFU | peak memory (GB) |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for c in rows {
        let r = &c.row;
        let _ =
            writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {:.0} | {:.0} | {:+.1}% | {:.3} | {:.3} | {:.1}{} |",
            r.model,
            r.seq_len,
            r.gpus,
            r.micro_batch,
            r.global_batch,
            if r.sharding == FsdpSharding::FullShard {
                "FULL_SHARD"
            } else {
                "SHARD_GRAD_OP"
            },
            if r.checkpointing { "full" } else { "none" },
            r.tokens_per_s_per_gpu,
            c.prediction.tokens_per_s_per_gpu,
            100.0 * c.error,
            r.mfu_percent / 100.0,
            c.prediction.mfu,
            c.prediction.peak_memory_bytes as f64 / 1e9,
            if c.prediction.fits { "" } else { " (does not fit)" },
        );
    }
    let worst = worst_by(rows, |c| c.error);
    let _ = writeln!(
        s,
        "\n{} rows on {hw} (held out): tokens/s/GPU mean absolute error {:.1}%, worst {} on {} GPUs at sequence {} ({:+.1}%).",
        rows.len(),
        100.0 * foundry_mae(rows),
        worst.map_or("-", |w| w.row.model),
        worst.map_or(0, |w| w.row.gpus),
        worst.map_or(0, |w| w.row.seq_len),
        100.0 * worst.map_or(0.0, |w| w.error),
    );
    s
}
