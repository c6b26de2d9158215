//! What a run's measured figure is and how a prediction is put beside it: tokens/s per GPU,
//! step time, or model TFLOP/s per GPU in a named FLOP convention. Every error is a
//! throughput error, predicted over measured minus 1 (positive: pplan predicts the run
//! faster than it ran), whatever the figure.

use crate::inputs::model::Model;
use crate::plan::predict::{PredictRequest, Prediction};
use serde::Serialize;

/// How a published TFLOP/s figure counts FLOPs (`measured.flop_convention`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FlopConvention {
    /// pplan's model FLOPs (`model_tflops_per_gpu`): three passes of every layer's GEMMs with
    /// the attention core's `s x s` scores and values counted whole, the logit layer;
    /// recomputation not counted. NeMo's "Model TFLOP/sec/GPU" counts the same terms.
    Pplan,
    /// pplan's model FLOPs with the attention core counted causally (the blocks on and below
    /// the diagonal only, [`crate::cost::CostModel::causal_model_flops_fraction`]).
    PplanCausal,
    /// Narayanan et al. 2021 (Megatron-LM), eq. 3: hardware FLOPs, the forward counted a
    /// fourth time under full recomputation: pplan's `tflops_per_gpu`.
    Megatron2021,
    /// Megatron-LM's `num_floating_point_operations` (`megatron/training/training.py`),
    /// which Megatron-Core's logs and the Megatron-MoE-ModelZoo report:
    /// [`megatron_lm_flops_per_token`].
    MegatronLm,
}

impl FlopConvention {
    /// The names `flop_convention` takes.
    pub const NAMES: [&'static str; 4] = ["pplan", "pplan-causal", "megatron-2021", "megatron-lm"];

    pub fn as_str(self) -> &'static str {
        match self {
            FlopConvention::Pplan => "pplan",
            FlopConvention::PplanCausal => "pplan-causal",
            FlopConvention::Megatron2021 => "megatron-2021",
            FlopConvention::MegatronLm => "megatron-lm",
        }
    }
}

impl std::str::FromStr for FlopConvention {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "pplan" => Ok(FlopConvention::Pplan),
            "pplan-causal" => Ok(FlopConvention::PplanCausal),
            "megatron-2021" => Ok(FlopConvention::Megatron2021),
            "megatron-lm" => Ok(FlopConvention::MegatronLm),
            other => Err(format!(
                "unknown flop_convention '{other}' (valid: {})",
                FlopConvention::NAMES.join(", ")
            )),
        }
    }
}

/// The figure a run is compared on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    /// `measured.tokens_per_s_per_gpu`.
    TokensPerSPerGpu,
    /// `measured.step_time_s`.
    StepTimeS,
    /// `measured.model_tflops_per_gpu` with its `flop_convention`.
    ModelTflopsPerGpu(FlopConvention),
}

impl Metric {
    /// The measured key, as the runs file and the JSON output name it.
    pub fn key(self) -> &'static str {
        match self {
            Metric::TokensPerSPerGpu => "tokens_per_s_per_gpu",
            Metric::StepTimeS => "step_time_s",
            Metric::ModelTflopsPerGpu(_) => "model_tflops_per_gpu",
        }
    }

    /// A short label for tables.
    pub fn label(self) -> String {
        match self {
            Metric::TokensPerSPerGpu => "tokens/s/GPU".into(),
            Metric::StepTimeS => "step (s)".into(),
            Metric::ModelTflopsPerGpu(c) => format!("TFLOP/s ({})", c.as_str()),
        }
    }

    /// A value of this metric as tables print it.
    pub fn format(self, value: f64) -> String {
        match self {
            Metric::TokensPerSPerGpu => format!("{value:.0}"),
            Metric::StepTimeS => format!("{value:.3}"),
            Metric::ModelTflopsPerGpu(_) => format!("{value:.1}"),
        }
    }

    /// The prediction's value of this metric. `req` is the request it was predicted from
    /// (its model and cost model give the FLOP counts of the conventions).
    pub fn predicted(self, pred: &Prediction, req: &PredictRequest) -> f64 {
        match self {
            Metric::TokensPerSPerGpu => pred.tokens_per_s_per_gpu,
            Metric::StepTimeS => pred.step_time_s,
            Metric::ModelTflopsPerGpu(c) => match c {
                FlopConvention::Pplan => pred.model_tflops_per_gpu,
                FlopConvention::Megatron2021 => pred.tflops_per_gpu,
                FlopConvention::PplanCausal => {
                    let mut r = req.clone();
                    r.micro_batch = pred.micro_batch;
                    r.chunks = pred.chunks;
                    pred.model_tflops_per_gpu * r.cost_model(pred.dp).causal_model_flops_fraction()
                }
                FlopConvention::MegatronLm => {
                    let tokens = (pred.global_batch * req.model.seq_len) as f64;
                    megatron_lm_flops_per_token(req.model) * tokens
                        / (pred.step_time_s * pred.gpus as f64)
                        / 1e12
                }
            },
        }
    }

    /// Predicted over measured throughput minus 1: for a step time, measured over predicted.
    pub fn error(self, predicted: f64, measured: f64) -> f64 {
        match self {
            Metric::StepTimeS => measured / predicted - 1.0,
            _ => predicted / measured - 1.0,
        }
    }
}

/// Training FLOPs per token as Megatron-LM counts them for a GQA model with (or without)
/// routed experts (`num_floating_point_operations` in `megatron/training/training.py`): 3
/// passes x 2 FLOPs a multiply-add x, for each layer, the QKV projection `h (q + 2 g d_h)`,
/// the attention core `q s` (scores and values, causal: `q (s / 2) x 2`), the output
/// projection `q h`, and the MLP `(3 | 2) h f` dense or `k (3 | 2) h f_e + (3 | 2) h f_s` for a
/// MoE block (top-k routed experts and the shared ones; the router's `h E` is not counted);
/// plus the logits `h V`. `q = a d_h`.
pub fn megatron_lm_flops_per_token(model: &Model) -> f64 {
    let h = model.hidden_size as f64;
    let d = model.head_dim() as f64;
    let q = model.num_heads as f64 * d;
    let kv = 2.0 * model.num_kv_heads as f64 * d;
    let s = model.seq_len as f64;
    let mats = if model.gated_mlp { 3.0 } else { 2.0 };
    let attention = h * (q + kv) + q * s + q * h;
    let layers: f64 = (0..model.num_layers as usize)
        .map(|i| {
            let mlp = match &model.moe {
                Some(m) if model.is_moe_layer(i) => {
                    mats * h * (m.top_k as f64 * m.expert_ffn as f64 + m.shared_ffn as f64)
                }
                _ => mats * h * model.ffn_hidden_size as f64,
            };
            attention + mlp
        })
        .sum();
    6.0 * (layers + h * model.vocab_size as f64)
}
