//! `pplan predict`'s model, layout and stack flags, and the [`PredictRequest`] they describe:
//! one definition that the `predict` command and every row of a runs file
//! (`pplan validate --runs`) go through, so that a row is predicted exactly as `predict`
//! would predict it with the same flags.

use super::stack::{zero_stage, StackFlags};
use super::values::{count, positive, positive_or_auto, Auto, FlagError, OnOff};
use crate::cost::{Recompute, Zero};
use crate::inputs::hardware::Hardware;
use crate::inputs::model::Model;
use crate::inputs::profile::LayerProfile;
use crate::plan::predict::{
    best_micro_batch_and_chunks, parse_layout, predict, PipelineSplit, PredictError,
    PredictRequest, Prediction, Split,
};
use crate::schedule::generators::ScheduleName;
use std::path::PathBuf;

/// Megatron-Core's split rules (`predict` and `search`; docs/partition.md): how Megatron-LM
/// runs started with these flags spread their layers over the stages.
#[derive(Debug, Clone, clap::Args)]
pub struct SplitRuleFlags {
    /// Count the embedding as a layer when splitting the layers evenly; the first stage
    /// builds one transformer layer fewer (Megatron-LM's flag).
    #[arg(long)]
    pub account_for_embedding_in_pipeline_split: bool,
    /// Count the loss (output layer and cross-entropy) as a layer when splitting evenly; the
    /// last stage builds one transformer layer fewer (Megatron-LM's flag).
    #[arg(long)]
    pub account_for_loss_in_pipeline_split: bool,
    /// Layers of the first pipeline rank; the middle ranks share the rest evenly
    /// (Megatron-LM's flag).
    #[arg(long)]
    pub decoder_first_pipeline_num_layers: Option<u32>,
    /// Layers of the last pipeline rank (Megatron-LM's flag).
    #[arg(long)]
    pub decoder_last_pipeline_num_layers: Option<u32>,
}

impl SplitRuleFlags {
    /// The rule these flags set, if any: with `--partition` other than `even` it is an error
    /// (the rule fixes the split).
    pub fn rule(&self, partition: &str) -> Result<Option<PipelineSplit>, FlagError> {
        let rule = PipelineSplit {
            embedding: self.account_for_embedding_in_pipeline_split,
            loss: self.account_for_loss_in_pipeline_split,
            first: self.decoder_first_pipeline_num_layers,
            last: self.decoder_last_pipeline_num_layers,
        };
        if !rule.is_set() {
            return Ok(None);
        }
        if partition != "even" {
            return Err(FlagError(format!(
                "--partition {partition} cannot be combined with {}, which fix the split; valid: --partition even (the default), or drop those flags",
                rule.flags().join(" ")
            )));
        }
        Ok(Some(rule))
    }
}

/// The flags that say what `pplan predict` predicts: model, hardware, layout, schedule and
/// training stack. (The output flags -- charts, traces, plan files, format -- are the
/// command's own.)
#[derive(Debug, Clone, clap::Args)]
pub struct PredictFlags {
    /// A bundled model (gpt-1.7b ... gpt-1t, gpt3-175b, llama3-8b, llama3-70b, llama3-405b,
    /// mixtral-8x7b, mixtral-8x22b, qwen3-30b-a3b, qwen3-235b-a22b, deepseek-v3) or a Hugging
    /// Face config.json / Megatron-style JSON file.
    #[arg(long)]
    pub model: String,
    /// A bundled hardware profile (a100-80gb, h100-80gb, h100-96gb-500w, h200, h800, b200, b300, gb200-nvl72, gb300-nvl72) or
    /// a JSON profile.
    #[arg(long, default_value = "a100-80gb")]
    pub hardware: String,
    /// Total GPUs; must equal tp x cp x pp x dp.
    #[arg(long, value_parser = positive::<u64>)]
    pub gpus: u64,
    /// Tensor-parallel size t.
    #[arg(long, default_value_t = 1, value_parser = positive::<u64>)]
    pub tp: u64,
    /// Pipeline-parallel size p.
    #[arg(long, default_value_t = 1, value_parser = positive::<u64>)]
    pub pp: u64,
    /// Data-parallel size d (default gpus / (tp x cp x pp)).
    #[arg(long, value_parser = positive::<u64>)]
    pub dp: Option<u64>,
    /// Context-parallel size: each sequence split over this many ranks (Megatron-Core
    /// --context-parallel-size; needs --attention flash).
    #[arg(long, default_value_t = 1, value_parser = positive::<u64>)]
    pub cp: u64,
    /// Expert-parallel size (mixture-of-experts models): the routed experts split over this
    /// many ranks carved from tp x cp x dp (Megatron-Core --expert-model-parallel-size).
    #[arg(long, default_value_t = 1, value_parser = positive::<u64>)]
    pub ep: u64,
    /// Expert tensor-parallel size: 1 or --tp (Megatron-Core --expert-tensor-parallel-size).
    #[arg(long, default_value_t = 1, value_parser = positive::<u64>)]
    pub etp: u64,
    /// Global batch size B in sequences.
    #[arg(long, value_parser = positive::<u64>)]
    pub global_batch: u64,
    /// Micro-batch size b in sequences; must divide B / d. `auto`: the fastest that fits
    /// among the divisors of B / d (for runs whose micro-batch is not published).
    #[arg(long, default_value = "1", value_parser = positive_or_auto)]
    pub micro_batch: Auto,
    /// Pipeline schedule (default: interleaved-1f1b when --chunks > 1, else 1f1b).
    #[arg(long)]
    pub schedule: Option<String>,
    /// Model chunks per pipeline device v (interleaving). `auto`: the fastest that fits among
    /// the divisors of the layers per device (interleaved 1F1B where the micro-batch count
    /// allows it, as Megatron-LM requires; with --pp 1, one chunk).
    #[arg(long, default_value = "1", value_parser = positive_or_auto)]
    pub chunks: Auto,
    /// Interleaved 1F1B: micro-batches a virtual stage runs in a row (Megatron-Core
    /// --microbatch-group-size-per-virtual-pipeline-stage). Default --pp, which needs the
    /// micro-batch count m divisible by --pp; a larger group runs any m >= --pp (between --pp
    /// and m, the last group empty or at least --pp).
    #[arg(long, value_parser = positive::<u64>, value_name = "N")]
    pub microbatch_group_size_per_virtual_pipeline_stage: Option<u64>,
    /// Activation recomputation: none, selective (Megatron: the attention core), full,
    /// torchtitan's selective-op (every second linear GEMM and the elementwise kernels) and
    /// selective-layer (every second layer whole), or Megatron-Core's recompute modules
    /// selective-norm-act (--recompute-modules layernorm moe_act), selective-norm-moe
    /// (layernorm moe), selective-mla-up-proj (mla_up_proj: latent attention's queries,
    /// keys and values rebuilt from its latents in the backward), selective-mlp (mlp: the
    /// dense layers' MLPs checkpointed, MoE layers untouched), and the sets
    /// selective-norm-mla-up-proj (layernorm mla_up_proj), selective-mla-up-proj-mlp
    /// (mla_up_proj mlp) and selective-norm-act-mla-up-proj (layernorm moe_act mla_up_proj:
    /// DeepSeek-V3's report, Sec. 3.3). Default: none with --stack megatron-core (Megatron-LM's
    /// recompute_granularity default, and what Megatron-Bridge's performance recipes run),
    /// full with megatron-2021 and torchtitan.
    #[arg(long)]
    pub recompute: Option<String>,
    /// Sequence parallelism (Korthikanti et al. 2022). Default: on with --stack megatron-core
    /// and --tp > 1 (Megatron-Bridge's recipes set sequence_parallel with tensor
    /// parallelism), else off.
    #[arg(long, value_enum)]
    pub sequence_parallel: Option<OnOff>,
    /// Training sequence length in tokens. Default: the model's (a bundled model's, or a
    /// Megatron-style file's seq_length); a Hugging Face config.json has none, so 4096, or its
    /// max_position_embeddings when shorter (never the whole context window).
    #[arg(long, value_parser = positive::<u64>)]
    pub seq_len: Option<u64>,
    /// Pad the vocabulary to a multiple of N x --tp, as Megatron-LM does
    /// (--make-vocab-size-divisible-by; Megatron-LM's default is 128, NeMo's configs set it).
    /// Default: the model's vocabulary as given, unpadded.
    #[arg(long, value_parser = positive::<u64>, value_name = "N")]
    pub make_vocab_size_divisible_by: Option<u64>,
    /// Start each stage's data-parallel gradient reduction when its last backward finishes
    /// (`on|off`; the bare flag means on).
    /// Default: on with --stack megatron-core, off with megatron-2021.
    #[arg(long, value_enum, num_args = 0..=1, default_missing_value = "on")]
    pub overlap_grad_reduce: Option<OnOff>,
    /// Shard the optimizer state over the data-parallel group (ZeRO-1; `on|off`, the bare
    /// flag means on): a spelling of --zero 1 / --zero 0.
    #[arg(long, value_enum, num_args = 0..=1, default_missing_value = "on")]
    pub zero1: Option<OnOff>,
    /// ZeRO stage: 0 replicated (DDP), 1 optimizer state sharded (distributed optimizer),
    /// 2 gradients too (reduce-scattered every micro-batch), 3 parameters too (FSDP: gathered
    /// layer by layer). Default: 1 with --stack megatron-core (Megatron-Bridge's recipes run
    /// the distributed optimizer, use_distributed_optimizer=True), 3 with torchtitan, 0 with
    /// megatron-2021.
    #[arg(long)]
    pub zero: Option<String>,
    /// HSDP: replicas of the sharded state; the state is sharded over d x cp / R ranks and
    /// replicated R times (torchtitan data_parallel_replicate_degree); needs --zero 1, 2 or 3.
    #[arg(long, default_value_t = 1, value_parser = positive::<u64>)]
    pub dp_replicate: u64,
    /// Send pipeline activations whole from every tensor-parallel rank instead of with the
    /// scatter/gather optimisation.
    #[arg(long)]
    pub no_scatter_gather: bool,
    #[command(flatten)]
    pub stack: StackFlags,
    /// A measured layer profile (JSON): transformer layers' forward/backward times and
    /// activation bytes come from it instead of the cost model (num_layers entries, or
    /// num_layers + 2 with the embedding first and the output layer last).
    #[arg(long)]
    pub profile: Option<PathBuf>,
    /// The pipeline devices share one GPU that runs one device's work at a time (as
    /// `pplan-exec run` does with PPLAN_CUDA_SHARE=serialize on a single GPU): compute actions
    /// and optimizer steps of all devices take the GPU in turn.
    #[arg(long)]
    pub shared_gpu: bool,
    /// How layers are split over the stages: even, or balanced (the partitioner's DP on the
    /// per-layer costs; kept only where it beats the even split).
    #[arg(long, default_value = "even")]
    pub partition: String,
    #[command(flatten)]
    pub split_rule: SplitRuleFlags,
    /// The layers of each pipeline stage, in Megatron-Core's layout syntax
    /// (--pipeline-model-parallel-layout): `E` the embedding, `t` a transformer layer, `m` a
    /// multi-token prediction layer, `L` the loss, `|` between the --pp x --chunks stages in
    /// stage order, `x*n` and `(...)*n` repeat; e.g. `Et*7|(t*8|)*14t*7L` for 126 layers on
    /// 16 stages.
    #[arg(long, value_name = "LAYOUT")]
    pub pipeline_layout: Option<String>,
    /// Multi-token prediction depths (Megatron-LM --mtp-num-layers; DeepSeek-V3 trains 1):
    /// each one more layer of the model's last-layer kind with its own projection, output
    /// logits and loss, on the stage --pipeline-layout's `m` names, else the last. Default:
    /// the model's (num_nextn_predict_layers, mtp_num_layers); 0 turns them off.
    #[arg(long, value_parser = count::<u32>, value_name = "N")]
    pub mtp_num_layers: Option<u32>,
}

/// `--mtp-num-layers N` on `model` (`predict`, `search`, a runs-file row): N depths instead of
/// the model's own; more than the model's transformer layers is refused, naming the range.
pub fn set_mtp_layers(n: Option<u32>, model: &mut Model) -> Result<(), FlagError> {
    let Some(n) = n else {
        return Ok(());
    };
    if n > model.num_layers {
        return Err(FlagError(format!(
            "--mtp-num-layers {n}: more multi-token prediction depths than {}'s {} transformer layers (each depth is one more layer; DeepSeek-V3 trains 1); valid: 0 to {}",
            model.name, model.num_layers, model.num_layers
        )));
    }
    model.mtp_layers = n;
    Ok(())
}

/// Why a prediction from flags failed: a flag that cannot hold, or the prediction's own error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FlagsPredictError {
    #[error(transparent)]
    Flag(#[from] FlagError),
    #[error(transparent)]
    Predict(#[from] PredictError),
    /// `--micro-batch auto` / `--chunks auto` found nothing that fits.
    #[error("no micro-batch and chunk count of --micro-batch {micro_batch} --chunks {chunks} fits in memory ({why})")]
    NothingFits {
        micro_batch: Auto,
        chunks: Auto,
        why: String,
    },
}

impl PredictFlags {
    /// The flags that change the model itself, on `model`: `--mtp-num-layers` and
    /// [`PredictFlags::pad_vocab`]; the caller has already applied `--seq-len`.
    pub fn apply_to_model(&self, model: &mut Model) -> Result<(), FlagError> {
        set_mtp_layers(self.mtp_num_layers, model)?;
        self.pad_vocab(model)
    }

    /// Pad `model`'s vocabulary as `--make-vocab-size-divisible-by` asks (to a multiple of
    /// N x t, Megatron-LM's `_vocab_size_with_padding`); the caller has already applied
    /// `--seq-len`.
    pub fn pad_vocab(&self, model: &mut Model) -> Result<(), FlagError> {
        if let Some(n) = self.make_vocab_size_divisible_by {
            if n == 0 {
                return Err(FlagError(
                    "--make-vocab-size-divisible-by 0: valid values are 1 or more (Megatron-LM's default is 128)".into(),
                ));
            }
            let multiple = n.saturating_mul(self.tp.max(1));
            model.vocab_size = model.vocab_size.div_ceil(multiple).saturating_mul(multiple);
        }
        Ok(())
    }

    /// The request these flags describe for `model` (with [`PredictFlags::apply_to_model`]
    /// applied) on `hw`, with the layer profile of `--profile` already read. `--micro-batch
    /// auto` and `--chunks auto` leave 1 in the request; [`PredictFlags::predict`] searches
    /// them.
    pub fn request<'a>(
        &self,
        model: &'a Model,
        hw: &'a Hardware,
        profile: Option<&'a LayerProfile>,
    ) -> Result<PredictRequest<'a>, FlagError> {
        let megatron_core = self.stack.preset == super::stack::StackPreset::MegatronCore;
        let recompute: Recompute = self
            .recompute
            .as_deref()
            .unwrap_or(if megatron_core { "none" } else { "full" })
            .parse()
            .map_err(|e: String| FlagError(format!("--recompute: {e}")))?;
        let schedule = match &self.schedule {
            None => None,
            Some(s) => Some(
                s.parse::<ScheduleName>()
                    .map_err(|e| FlagError(format!("--schedule: {e}")))?,
            ),
        };
        if self.chunks == Auto::Auto
            && schedule
                .is_some_and(|s| s != ScheduleName::Interleaved1F1B && s != ScheduleName::OneFOneB)
        {
            return Err(FlagError(format!(
                "--chunks auto chooses between 1f1b and interleaved-1f1b; valid: drop --schedule {}, or give --chunks N",
                self.schedule.as_deref().unwrap_or("")
            )));
        }
        let mut req = PredictRequest::new(model, hw);
        req.gpus = self.gpus;
        req.tp = self.tp;
        req.pp = self.pp;
        req.dp = self.dp;
        req.cp = self.cp;
        req.ep = self.ep;
        req.etp = self.etp;
        req.global_batch = self.global_batch;
        req.micro_batch = self.micro_batch.value().unwrap_or(1);
        req.schedule = schedule;
        req.chunks = self.chunks.value().unwrap_or(1);
        req.microbatch_group = self.microbatch_group_size_per_virtual_pipeline_stage;
        req.recompute = recompute;
        req.sequence_parallel = self
            .sequence_parallel
            .map_or(megatron_core && self.tp > 1, OnOff::is_on);
        let zero = zero_stage(self.zero.as_deref(), self.zero1)?.unwrap_or(if megatron_core {
            Zero::Optimizer
        } else {
            self.stack.preset.stack().zero
        });
        if self.stack.overlap_param_gather == Some(OnOff::On)
            && (!zero.shards_optimizer() || zero.shards_weights())
        {
            return Err(FlagError(
                "--overlap-param-gather on needs a sharded optimizer that gathers parameters after its step (--zero1, --zero 1 or 2); valid: add --zero1, or --overlap-param-gather off".into(),
            ));
        }
        req.dp_replicate = self.dp_replicate;
        if self.stack.tp_comm_overlap == Some(OnOff::On) && !req.sequence_parallel && self.tp > 1 {
            return Err(FlagError(
                "--tp-comm-overlap on needs --sequence-parallel on (Megatron-Core overlaps the reduce-scatter and all-gather that sequence parallelism uses); valid: add --sequence-parallel on, or --tp-comm-overlap off".into(),
            ));
        }
        req.stack =
            self.stack
                .apply(zero, !self.no_scatter_gather, self.overlap_grad_reduce, hw)?;
        super::stack::check_recipe(&req.stack, model, Some(recompute))?;
        crate::cost::offload::check(
            req.stack.cpu_offload_layers,
            u64::from(model.num_layers),
            self.pp,
            recompute,
            hw.node.host_link_bytes_per_s,
            &hw.name,
        )
        .map_err(FlagError)?;
        if req.stack.cpu_offload_layers > 0 && self.chunks != Auto::Value(1) {
            return Err(FlagError(format!(
                "--cpu-offloading-num-layers {} needs one model chunk (Megatron-Core offloads within one pipeline stage); valid: --chunks 1",
                req.stack.cpu_offload_layers
            )));
        }
        req.profile = profile;
        req.shared_gpu = self.shared_gpu;
        req.partition = self
            .partition
            .parse()
            .map_err(|e: String| FlagError(format!("--partition: {e}")))?;
        if let Some(rule) = self.split_rule.rule(&self.partition)? {
            req.partition = Split::Megatron(rule);
        }
        if let Some(rule) = self.implied_split(model, &req) {
            req.partition = Split::Megatron(rule);
        }
        if let Some(text) = &self.pipeline_layout {
            if self.split_rule.rule("even")?.is_some() || self.partition != "even" {
                return Err(FlagError(
                    "--pipeline-layout fixes every stage's layers: it cannot be combined with --partition balanced or Megatron-Core's split-rule flags; valid: one of them".into(),
                ));
            }
            if self.chunks == Auto::Auto {
                return Err(FlagError(
                    "--pipeline-layout fixes the stages: give --chunks N (its stages / --pp), not auto".into(),
                ));
            }
            let layout = parse_layout(text)
                .map_err(|e| FlagError(format!("--pipeline-layout '{text}': {e}")))?;
            layout
                .check(model.num_layers, model.mtp_layers, self.pp, req.chunks)
                .map_err(|e| FlagError(format!("{e} ('{text}')")))?;
            req.mtp_stage = layout.mtp_stage().map(|s| s as u32);
            req.stage_layers = Some(layout.layers);
        }
        Ok(req)
    }

    /// Where the flags give no split and the --pp x --chunks stages outnumber the transformer
    /// layers, the split Megatron-Core needs to run them: the embedding and the loss counted
    /// as layers (stages holding only the embedding or the loss), or one of them, the first
    /// that splits the layers (`--account-for-*-in-pipeline-split`). `None` otherwise.
    pub fn implied_split(&self, model: &Model, req: &PredictRequest) -> Option<PipelineSplit> {
        let stages = self.pp.saturating_mul(req.chunks);
        if stages <= model.num_layers as u64
            || self.pipeline_layout.is_some()
            || req.partition != Split::Even
            || stages > u32::MAX as u64
        {
            return None;
        }
        let v_placed = req
            .schedule
            .is_some_and(|s| s.placement() == crate::schedule::ir::Placement::V);
        [
            PipelineSplit::EMBEDDING_AND_LOSS,
            PipelineSplit {
                embedding: true,
                ..PipelineSplit::default()
            },
            PipelineSplit {
                loss: true,
                ..PipelineSplit::default()
            },
        ]
        .into_iter()
        .find(|rule| {
            rule.stage_layers(
                model.num_layers,
                self.pp as u32,
                req.chunks as u32,
                v_placed,
            )
            .is_ok()
        })
    }

    /// Predict `req` (from [`PredictFlags::request`]) as these flags ask: as it is, or with
    /// the fastest micro-batch and chunk count that fits where `--micro-batch` or `--chunks`
    /// is `auto` (the other one held at its given value).
    pub fn predict(&self, req: &PredictRequest) -> Result<Prediction, FlagsPredictError> {
        if self.micro_batch != Auto::Auto && self.chunks != Auto::Auto {
            return Ok(predict(req)?);
        }
        best_micro_batch_and_chunks(req, self.micro_batch.value(), self.chunks.value())?.ok_or_else(
            || FlagsPredictError::NothingFits {
                micro_batch: self.micro_batch,
                chunks: self.chunks,
                why: format!(
                    "every candidate needs more than the {:.1} GB of {}",
                    req.hardware.gpu.memory_bytes as f64 / 1e9,
                    req.hardware.name
                ),
            },
        )
    }
}
