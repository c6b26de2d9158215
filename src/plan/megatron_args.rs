//! Reading Megatron-LM arguments back: the model and parallel layout a Megatron-LM command line
//! describes.
//!
//! The input is shell text: the file `pplan emit --target megatron` writes (a bash array), a
//! plain list of flags, or a launch script's `torchrun ... pretrain_gpt.py --flag value ...`.
//! It is split into words as a shell would for quoting (single and double quotes, backslash
//! escapes and line continuations; `#` comments), then every word that starts with `--` is a
//! flag and the words up to the next flag are its values; words before the first flag and
//! anything else a shell would interpret (`NAME=(`, `)`, `$VAR`) are not values. Flags pplan
//! does not use are listed in [`MegatronPlan::ignored`], not refused, so a real training script
//! reads too. Defaults are Megatron-LM's (`megatron/training/arguments.py`): ffn 4h (SwiGLU:
//! `int(4h·2/3 / 64)·64`), query groups = heads, the vocabulary padded to a multiple of
//! `--make-vocab-size-divisible-by` (128) × tp unless `--padded-vocab-size` gives it, the even
//! pipeline split unless `--pipeline-model-parallel-layout` gives one. No IO.

use crate::cost::{CrossEntropyFusion, Fp8Recipe};
use crate::inputs::model::{megatron_dropout, megatron_rms_norm, megatron_rotary, Model};
use crate::plan::predict::{parse_layout, PipelineSplit};
use std::collections::BTreeMap;

mod arch;

/// What a Megatron-LM command line trains: the model and the layout, in pplan's terms.
#[derive(Debug, Clone, PartialEq)]
pub struct MegatronPlan {
    pub model: Model,
    pub tp: u64,
    pub pp: u64,
    /// `--context-parallel-size` (1 when absent).
    pub cp: u64,
    /// `--cp-comm-type` in pplan's names: `p2p` (Megatron-LM's default) or `all-gather`.
    pub cp_comm: String,
    pub micro_batch: u64,
    pub global_batch: u64,
    /// Virtual stages per pipeline rank (v).
    pub chunks: u64,
    /// `--microbatch-group-size-per-virtual-pipeline-stage` (absent: Megatron-Core's default,
    /// the pipeline size).
    pub microbatch_group: Option<u64>,
    /// Transformer layers of each stage in stage order (virtual stage `vpp_rank·p + pp_rank`,
    /// pplan's loop placement): `p·v` entries.
    pub stage_layers: Vec<u32>,
    /// The stage the layout string's `m` puts the model's multi-token prediction layers on
    /// (`--mtp-num-layers`, in `model.mtp_layers`); `None`: the last, Megatron-Core's place
    /// for them without a layout.
    pub mtp_stage: Option<u32>,
    /// `none`, `selective` or `full` (pplan's names).
    pub recompute: String,
    pub sequence_parallel: bool,
    /// `--use-distributed-optimizer` (ZeRO-1), or Megatron-FSDP (ZeRO-2/3).
    pub zero1: bool,
    /// ZeRO stage: `--use-megatron-fsdp` with `--data-parallel-sharding-strategy`
    /// `optim_grads` (2) or `optim_grads_params` (3); else 1 with the distributed optimizer, 0.
    pub zero: u8,
    /// `--num-distributed-optimizer-instances` (1 when absent).
    pub dp_replicate: u64,
    /// `bf16`, `fp8`, `mxfp8` or `nvfp4` (pplan's names).
    pub precision: String,
    /// With `fp8`, `--fp8-recipe`: `delayed` (Megatron-LM's default, and the value for every
    /// other precision), `tensorwise` or `blockwise`, as a plan file's `fp8_recipe`.
    pub fp8_recipe: String,
    /// `unfused` or `flash`.
    pub attention: String,
    pub tp_comm_overlap: bool,
    pub overlap_grad_reduce: bool,
    pub overlap_param_gather: bool,
    /// `--defer-embedding-wgrad-compute`, and `--wgrad-deferral-limit` (0 when absent: all).
    pub defer_embedding_wgrad_compute: bool,
    /// `--use-transformer-engine-op-fuser`.
    pub te_op_fuser: bool,
    pub wgrad_deferral_limit: u32,
    /// `off` without `--cross-entropy-loss-fusion`, else `--cross-entropy-fusion-impl`
    /// (`native` when absent).
    pub cross_entropy_fusion: String,
    /// `--use-precision-aware-optimizer`, `--main-params-dtype`, `--exp-avg-dtype`,
    /// `--exp-avg-sq-dtype` (pplan's names; fp32 when absent).
    pub use_precision_aware_optimizer: bool,
    /// `--fp8-param-gather`.
    pub fp8_param_gather: bool,
    /// `--cpu-offloading-num-layers` (0 when absent).
    pub cpu_offloading_num_layers: u32,
    pub main_params_dtype: String,
    pub exp_avg_dtype: String,
    pub exp_avg_sq_dtype: String,
    pub bf16: bool,
    /// `--expert-model-parallel-size` (1 when absent).
    pub ep: u64,
    /// `--expert-tensor-parallel-size` (1 when absent).
    pub etp: u64,
    /// The token dispatcher in pplan's names (`--moe-dispatcher`): `alltoall`, `deepep` or
    /// `hybridep` (`--moe-token-dispatcher-type flex` with `--moe-flex-dispatcher-backend`,
    /// DeepEP when absent; the deprecated `--moe-enable-deepep` too).
    pub moe_dispatcher: String,
    /// `--moe-expert-capacity-factor` (absent: dropless) and
    /// `--moe-pad-expert-input-to-capacity`.
    pub moe_expert_capacity_factor: Option<f64>,
    pub moe_pad_expert_input_to_capacity: bool,
    /// `--cuda-graph-impl` (`none` when absent; the deprecated `--enable-cuda-graph` is
    /// `local`, `--external-cuda-graph` `transformer_engine`) and `--cuda-graph-modules`
    /// (or the deprecated `--cuda-graph-scope`; `full` dropped: the whole layer).
    pub cuda_graph_impl: String,
    pub cuda_graph_modules: Vec<String>,
    /// `--no-overlap-p2p-communication`: `Some(false)` (absent: `None`, Megatron-LM's
    /// default, overlapped), as a plan file's `overlap_p2p_comm`.
    pub overlap_p2p_comm: Option<bool>,
    /// `--no-gradient-accumulation-fusion`: `Some(false)` (absent: `None`, fused).
    pub gradient_accumulation_fusion: Option<bool>,
    /// `--accumulate-allreduce-grads-in-fp32` (`fp32`) or `--grad-reduce-in-bf16` (`bf16`);
    /// `None` without either.
    pub grad_reduce_dtype: Option<String>,
    /// `--overlap-moe-expert-parallel-comm`.
    pub moe_comm_overlap: bool,
    /// Flags read but not used by pplan, in order of first appearance.
    pub ignored: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MegatronArgsError {
    #[error("{origin}: unterminated {quote} quote")]
    Unterminated { origin: String, quote: char },
    #[error("{origin}: missing {flag} ({what})")]
    Missing {
        origin: String,
        flag: &'static str,
        what: &'static str,
    },
    #[error("{origin}: {flag} '{got}': {expected}")]
    BadValue {
        origin: String,
        flag: String,
        got: String,
        expected: String,
    },
}

/// Shell words of `text`, with comments removed; quotes and escapes resolved.
fn shell_words(text: &str, origin: &str) -> Result<Vec<String>, MegatronArgsError> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(x) => cur.push(x),
                        None => {
                            return Err(MegatronArgsError::Unterminated {
                                origin: origin.to_string(),
                                quote: '\'',
                            })
                        }
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(x @ ('"' | '\\' | '$' | '`')) => cur.push(x),
                            Some('\n') => {}
                            Some(x) => {
                                cur.push('\\');
                                cur.push(x);
                            }
                            None => break,
                        },
                        Some(x) => cur.push(x),
                        None => {
                            return Err(MegatronArgsError::Unterminated {
                                origin: origin.to_string(),
                                quote: '"',
                            })
                        }
                    }
                }
            }
            '\\' => match chars.next() {
                Some('\n') | None => {}
                Some(x) => {
                    in_word = true;
                    cur.push(x);
                }
            },
            '#' if !in_word => {
                for x in chars.by_ref() {
                    if x == '\n' {
                        break;
                    }
                }
            }
            c if c.is_whitespace() || c == ';' => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                cur.push(c);
            }
        }
    }
    if in_word {
        words.push(cur);
    }
    Ok(words)
}

/// Flags and their values; a later occurrence of a flag replaces an earlier one (argparse).
struct Flags {
    origin: String,
    map: BTreeMap<String, Vec<String>>,
    order: Vec<String>,
}

impl Flags {
    fn has(&self, f: &str) -> bool {
        self.map.contains_key(f)
    }
    fn str(&self, f: &str) -> Option<&str> {
        self.map.get(f).and_then(|v| v.first()).map(String::as_str)
    }
    fn num(&self, f: &'static str) -> Result<Option<u64>, MegatronArgsError> {
        let Some(v) = self.map.get(f) else {
            return Ok(None);
        };
        let got = v.first().cloned().unwrap_or_default();
        match got.parse::<u64>() {
            Ok(n) if n > 0 => Ok(Some(n)),
            _ => Err(MegatronArgsError::BadValue {
                origin: self.origin.clone(),
                flag: f.to_string(),
                got,
                expected: "a positive integer".into(),
            }),
        }
    }
    /// A probability flag (`--hidden-dropout 0.1`), `None` when absent.
    fn prob(&self, f: &'static str) -> Result<Option<f64>, MegatronArgsError> {
        let Some(v) = self.map.get(f) else {
            return Ok(None);
        };
        let got = v.first().cloned().unwrap_or_default();
        match got.parse::<f64>() {
            Ok(p) if (0.0..=1.0).contains(&p) => Ok(Some(p)),
            _ => Err(MegatronArgsError::BadValue {
                origin: self.origin.clone(),
                flag: f.to_string(),
                got,
                expected: "a probability from 0 to 1".into(),
            }),
        }
    }
    fn need(&self, f: &'static str, what: &'static str) -> Result<u64, MegatronArgsError> {
        self.num(f)?.ok_or_else(|| MegatronArgsError::Missing {
            origin: self.origin.clone(),
            flag: f,
            what,
        })
    }
    fn bad(&self, flag: &str, got: &str, expected: &str) -> MegatronArgsError {
        MegatronArgsError::BadValue {
            origin: self.origin.clone(),
            flag: flag.to_string(),
            got: got.to_string(),
            expected: expected.to_string(),
        }
    }
}

/// The flags this reader interprets.
/// Megatron-Core's `--recompute-modules` lists (with `--recompute-granularity selective`)
/// that pplan models beside the default `core_attn`, each with the `--recompute` value it is;
/// the modules in sorted order. Emitting and reading Megatron-LM arguments both use it.
pub const RECOMPUTE_MODULES: [(&str, &[&str]); 7] = [
    ("selective-norm-act", &["layernorm", "moe_act"]),
    ("selective-norm-moe", &["layernorm", "moe"]),
    ("selective-mla-up-proj", &["mla_up_proj"]),
    ("selective-mlp", &["mlp"]),
    ("selective-norm-mla-up-proj", &["layernorm", "mla_up_proj"]),
    ("selective-mla-up-proj-mlp", &["mla_up_proj", "mlp"]),
    (
        "selective-norm-act-mla-up-proj",
        &["layernorm", "mla_up_proj", "moe_act"],
    ),
];

const USED: &[&str] = &[
    "--tensor-model-parallel-size",
    "--pipeline-model-parallel-size",
    "--context-parallel-size",
    "--cp-comm-type",
    "--num-layers-per-virtual-pipeline-stage",
    "--num-virtual-stages-per-pipeline-rank",
    "--microbatch-group-size-per-virtual-pipeline-stage",
    "--pipeline-model-parallel-layout",
    "--account-for-embedding-in-pipeline-split",
    "--account-for-loss-in-pipeline-split",
    "--decoder-first-pipeline-num-layers",
    "--decoder-last-pipeline-num-layers",
    "--micro-batch-size",
    "--global-batch-size",
    "--num-layers",
    "--hidden-size",
    "--num-attention-heads",
    "--group-query-attention",
    "--num-query-groups",
    "--kv-channels",
    "--ffn-hidden-size",
    "--seq-length",
    "--swiglu",
    "--normalization",
    "--position-embedding-type",
    "--hidden-dropout",
    "--attention-dropout",
    "--untie-embeddings-and-output-weights",
    "--padded-vocab-size",
    "--vocab-size",
    "--make-vocab-size-divisible-by",
    "--recompute-granularity",
    "--recompute-modules",
    "--recompute-method",
    "--recompute-num-layers",
    "--sequence-parallel",
    "--use-distributed-optimizer",
    "--use-megatron-fsdp",
    "--data-parallel-sharding-strategy",
    "--num-distributed-optimizer-instances",
    "--fp8-format",
    "--fp8-recipe",
    "--fp8-amax-history-len",
    "--fp8-amax-compute-algo",
    "--fp4-format",
    "--fp4-recipe",
    "--attention-backend",
    "--tp-comm-overlap",
    "--overlap-grad-reduce",
    "--overlap-param-gather",
    "--defer-embedding-wgrad-compute",
    "--use-transformer-engine-op-fuser",
    "--wgrad-deferral-limit",
    "--cross-entropy-loss-fusion",
    "--cross-entropy-fusion-impl",
    "--use-precision-aware-optimizer",
    "--fp8-param-gather",
    "--cpu-offloading-num-layers",
    "--no-overlap-p2p-communication",
    "--no-gradient-accumulation-fusion",
    "--accumulate-allreduce-grads-in-fp32",
    "--grad-reduce-in-bf16",
    "--overlap-moe-expert-parallel-comm",
    "--main-params-dtype",
    "--exp-avg-dtype",
    "--exp-avg-sq-dtype",
    "--bf16",
    "--expert-model-parallel-size",
    "--expert-tensor-parallel-size",
    "--num-experts",
    "--moe-router-topk",
    "--moe-ffn-hidden-size",
    "--moe-shared-expert-intermediate-size",
    "--moe-layer-freq",
    "--moe-router-num-groups",
    "--moe-router-group-topk",
    "--moe-token-dispatcher-type",
    "--moe-flex-dispatcher-backend",
    "--moe-enable-deepep",
    "--moe-expert-capacity-factor",
    "--moe-pad-expert-input-to-capacity",
    "--moe-token-drop-policy",
    "--cuda-graph-impl",
    "--cuda-graph-modules",
    "--cuda-graph-scope",
    "--enable-cuda-graph",
    "--external-cuda-graph",
    "--multi-latent-attention",
    "--q-lora-rank",
    "--kv-lora-rank",
    "--qk-head-dim",
    "--qk-pos-emb-head-dim",
    "--v-head-dim",
    "--mtp-num-layers",
];

/// Read a Megatron-LM command line (see the module docs); `origin` names it in errors and
/// becomes the model's name.
pub fn parse_megatron_args(text: &str, origin: &str) -> Result<MegatronPlan, MegatronArgsError> {
    let words = shell_words(text, origin)?;
    let mut flags = Flags {
        origin: origin.to_string(),
        map: BTreeMap::new(),
        order: Vec::new(),
    };
    let mut current: Option<String> = None;
    for w in words {
        if let Some(f) = w.strip_prefix("--").filter(|f| !f.is_empty()) {
            // `--flag=value` is argparse's other spelling.
            let (name, value) = match f.split_once('=') {
                Some((n, v)) => (format!("--{n}"), Some(v.to_string())),
                None => (w.clone(), None),
            };
            if !flags.map.contains_key(&name) {
                flags.order.push(name.clone());
            }
            flags.map.insert(name.clone(), value.into_iter().collect());
            current = Some(name);
        } else if let Some(f) = &current {
            let shell_syntax = w == ")" || w.ends_with("=(") || w.starts_with('$');
            if !shell_syntax {
                flags.map.get_mut(f).expect("inserted").push(w);
            }
        }
    }

    let tp = flags.num("--tensor-model-parallel-size")?.unwrap_or(1);
    let pp = flags.num("--pipeline-model-parallel-size")?.unwrap_or(1);
    let cp = flags.num("--context-parallel-size")?.unwrap_or(1);
    // Megatron-Core's exchanges; pplan models the ring (p2p) and the all-gather only, so the
    // all-to-all ones are refused rather than read as something else.
    let cp_comm = match flags.str("--cp-comm-type") {
        None | Some("p2p") => "p2p",
        Some("allgather") => "all-gather",
        Some(other) => {
            return Err(flags.bad(
                "--cp-comm-type",
                other,
                "p2p or allgather (pplan does not model a2a or a2a+p2p)",
            ))
        }
    };
    let num_layers = flags.need("--num-layers", "the number of transformer layers")?;
    let hidden = flags.need("--hidden-size", "the hidden size")?;
    let heads = flags.need("--num-attention-heads", "the number of attention heads")?;
    let kv = if flags.has("--group-query-attention") {
        flags.need(
            "--num-query-groups",
            "the key/value heads, with --group-query-attention",
        )?
    } else {
        heads
    };
    // Megatron's default is hidden / heads; a different value is the model's head_dim.
    let head_dim = flags
        .num("--kv-channels")?
        .filter(|&d| heads == 0 || d != hidden / heads);
    // `--quick-geglu` (GPT-OSS) is a gated MLP too.
    let gated = flags.has("--swiglu") || flags.has("--quick-geglu");
    let ffn = match flags.num("--ffn-hidden-size")? {
        Some(f) => f,
        // arguments.py's defaults (validate_args).
        None if gated => (4 * hidden * 2 / 3) / 64 * 64,
        None => 4 * hidden,
    };
    let seq = flags.need("--seq-length", "the sequence length")?;
    let vocab = match flags.num("--padded-vocab-size")? {
        Some(v) => v,
        None => {
            let v = flags.need(
                "--vocab-size",
                "or --padded-vocab-size: the vocabulary otherwise comes from a tokenizer file pplan does not read",
            )?;
            let div = flags.num("--make-vocab-size-divisible-by")?.unwrap_or(128) * tp;
            v.div_ceil(div) * div
        }
    };
    let micro_batch = flags.num("--micro-batch-size")?.unwrap_or(1);
    let global_batch = flags.need("--global-batch-size", "the global batch size")?;
    // Megatron-LM's default is none (0 here); each depth is one more layer, so a count above
    // the layers is refused.
    let mtp_layers = match flags.str("--mtp-num-layers") {
        None => 0,
        Some(v) => match v.parse::<u64>() {
            Ok(n) if n <= num_layers => n as u32,
            _ => {
                return Err(flags.bad(
                    "--mtp-num-layers",
                    v,
                    &format!("an integer from 0 to --num-layers ({num_layers})"),
                ))
            }
        },
    };

    // Layout: the layout string, or the even split of the layers over p·v stages.
    let mut mtp_stage = None;
    let (chunks, stage_layers) = match flags.str("--pipeline-model-parallel-layout") {
        Some(s) => {
            let layout = parse_layout(s)
                .map_err(|e| flags.bad("--pipeline-model-parallel-layout", s, &e))?;
            if mtp_layers > 0 || !layout.mtp.is_empty() {
                // Megatron-Core's checks of the 'm's (count, one stage, after the layers, a
                // rank's last virtual stage), with this command line's flag names.
                let n = layout.layers.len() as u64;
                layout
                    .check(num_layers as u32, mtp_layers, pp, (n / pp).max(1))
                    .map_err(|e| {
                        let e = e
                            .replace("--pipeline-layout", "--pipeline-model-parallel-layout")
                            .replace("--chunks", "virtual stages");
                        flags.bad("--pipeline-model-parallel-layout", s, &e)
                    })?;
                mtp_stage = layout.mtp_stage().map(|x| x as u32);
            }
            let stages = layout.layers;
            let n = stages.len() as u64;
            if n % pp != 0 {
                return Err(flags.bad(
                    "--pipeline-model-parallel-layout",
                    s,
                    &format!("{n} stages is not a multiple of the pipeline size {pp}"),
                ));
            }
            let total: u64 = stages.iter().map(|&x| x as u64).sum();
            if total != num_layers {
                return Err(flags.bad(
                    "--pipeline-model-parallel-layout",
                    s,
                    &format!("{total} transformer layers, but --num-layers is {num_layers}"),
                ));
            }
            (n / pp, stages)
        }
        None => {
            // Megatron-Core's split rules (plan::predict::PipelineSplit).
            let rule = PipelineSplit {
                embedding: flags.has("--account-for-embedding-in-pipeline-split"),
                loss: flags.has("--account-for-loss-in-pipeline-split"),
                first: flags
                    .num("--decoder-first-pipeline-num-layers")?
                    .map(|n| n.min(u32::MAX as u64) as u32),
                last: flags
                    .num("--decoder-last-pipeline-num-layers")?
                    .map(|n| n.min(u32::MAX as u64) as u32),
            };
            let v = match (
                flags.num("--num-layers-per-virtual-pipeline-stage")?,
                flags.num("--num-virtual-stages-per-pipeline-rank")?,
            ) {
                (Some(per), _) => {
                    // Layers per virtual stage, counted as the split rule (if any) counts them.
                    let counted = num_layers + u64::from(rule.embedding) + u64::from(rule.loss);
                    if counted % (per * pp) != 0 {
                        let what = if rule.is_set() {
                            " (with the embedding and loss the split counts)"
                        } else {
                            ""
                        };
                        return Err(flags.bad(
                            "--num-layers-per-virtual-pipeline-stage",
                            &per.to_string(),
                            &format!(
                                "{counted} layers{what} are not a multiple of it times the pipeline size {pp}"
                            ),
                        ));
                    }
                    counted / (per * pp)
                }
                (None, Some(v)) => v,
                (None, None) => 1,
            };
            if rule.is_set() {
                let counts = rule
                    .stage_layers(num_layers as u32, pp as u32, v as u32, false)
                    .map_err(|e| flags.bad("--num-layers", &num_layers.to_string(), &e))?;
                (v, counts)
            } else {
                let stages = pp * v;
                if num_layers % stages != 0 {
                    return Err(flags.bad(
                        "--num-layers",
                        &num_layers.to_string(),
                        &format!(
                            "Megatron-LM's even split needs a multiple of the {stages} stages (or a --pipeline-model-parallel-layout)"
                        ),
                    ));
                }
                (v, vec![(num_layers / stages) as u32; stages as usize])
            }
        }
    };

    let recompute = match flags.str("--recompute-granularity") {
        None => "none",
        Some("selective") => {
            // Megatron-Core's modules (default `core_attn`); pplan models the sets above.
            let mut modules: Vec<&str> = flags
                .map
                .get("--recompute-modules")
                .map(|v| v.iter().map(String::as_str).collect())
                .unwrap_or_default();
            modules.sort_unstable();
            match modules.as_slice() {
                [] | ["core_attn"] => "selective",
                listed => match RECOMPUTE_MODULES.iter().find(|(_, m)| *m == listed) {
                    Some((recompute, _)) => recompute,
                    None => {
                        let valid: Vec<String> =
                            RECOMPUTE_MODULES.iter().map(|(_, m)| m.join(" ")).collect();
                        return Err(flags.bad(
                            "--recompute-modules",
                            &modules.join(" "),
                            &format!("core_attn (the default), {}", valid.join(", or ")),
                        ));
                    }
                },
            }
        }
        Some("full") => "full",
        Some(other) => {
            return Err(flags.bad("--recompute-granularity", other, "full or selective"))
        }
    };
    let (precision, fp8_recipe) = precision_from_flags(&flags)?;
    let ignored = flags
        .order
        .iter()
        .filter(|f| !USED.contains(&f.as_str()) && !arch::USED.contains(&f.as_str()))
        .cloned()
        .collect();
    let name = std::path::Path::new(origin)
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| origin.to_string());
    let model = Model {
        name,
        num_layers: u32::try_from(num_layers)
            .map_err(|_| flags.bad("--num-layers", &num_layers.to_string(), "at most 2^32-1"))?,
        hidden_size: hidden,
        num_heads: heads,
        num_kv_heads: kv,
        ffn_hidden_size: ffn,
        vocab_size: vocab,
        seq_len: seq,
        gated_mlp: gated,
        tied_embeddings: !flags.has("--untie-embeddings-and-output-weights"),
        dropout: megatron_dropout(
            flags.prob("--hidden-dropout")?,
            flags.prob("--attention-dropout")?,
        ),
        attention_head_dim: head_dim,
        seq_len_defaulted: false,
        moe: None,
        mla: None,
        sliding_window: arch::window_from_flags(&flags, num_layers as u32)?,
        rms_norm: megatron_rms_norm(flags.str("--normalization"))
            .map_err(|got| flags.bad("--normalization", &got, "LayerNorm or RMSNorm"))?,
        rotary: megatron_rotary(flags.str("--position-embedding-type")).map_err(|got| {
            flags.bad(
                "--position-embedding-type",
                &got,
                "learned_absolute, rope, mrope, yarn, relative or none",
            )
        })?,
        mtp_layers,
        arch: arch::arch_from_flags(&flags, gated, flags.has("--multi-latent-attention"))?,
    };
    let mut model = model;
    model.moe = moe_from_flags(&flags, model.num_layers, model.ffn_hidden_size)?;
    if flags.has("--multi-latent-attention") {
        model.mla = Some(crate::inputs::moe::Mla {
            q_lora_rank: flags.num("--q-lora-rank")?.unwrap_or(0),
            kv_lora_rank: flags.num("--kv-lora-rank")?.unwrap_or(32),
            qk_nope_head_dim: flags.num("--qk-head-dim")?.unwrap_or(128),
            qk_rope_head_dim: flags.num("--qk-pos-emb-head-dim")?.unwrap_or(64),
            v_head_dim: flags.num("--v-head-dim")?.unwrap_or(128),
        });
    }
    model
        .check()
        .map_err(|e| flags.bad("model", &model.name, &e.to_string()))?;
    let zero = if flags.has("--use-megatron-fsdp") {
        match flags.str("--data-parallel-sharding-strategy") {
            Some("optim_grads") => 2,
            Some("optim_grads_params") | None => 3,
            Some("optim") => 1,
            Some(other) => {
                return Err(flags.bad(
                    "--data-parallel-sharding-strategy",
                    other,
                    "optim, optim_grads or optim_grads_params",
                ))
            }
        }
    } else {
        u8::from(flags.has("--use-distributed-optimizer"))
    };
    Ok(MegatronPlan {
        model,
        tp,
        pp,
        cp,
        cp_comm: cp_comm.to_string(),
        micro_batch,
        global_batch,
        chunks,
        microbatch_group: flags.num("--microbatch-group-size-per-virtual-pipeline-stage")?,
        stage_layers,
        mtp_stage,
        recompute: recompute.to_string(),
        sequence_parallel: flags.has("--sequence-parallel"),
        zero1: flags.has("--use-distributed-optimizer") || zero >= 2,
        zero,
        dp_replicate: flags
            .num("--num-distributed-optimizer-instances")?
            .unwrap_or(1),
        precision: precision.to_string(),
        fp8_recipe: fp8_recipe.as_str().to_string(),
        attention: if flags.str("--attention-backend") == Some("flash") {
            "flash".into()
        } else {
            "unfused".into()
        },
        tp_comm_overlap: flags.has("--tp-comm-overlap"),
        overlap_grad_reduce: flags.has("--overlap-grad-reduce"),
        overlap_param_gather: flags.has("--overlap-param-gather"),
        defer_embedding_wgrad_compute: flags.has("--defer-embedding-wgrad-compute"),
        te_op_fuser: flags.has("--use-transformer-engine-op-fuser"),
        wgrad_deferral_limit: match flags.num("--wgrad-deferral-limit")? {
            None => 0,
            Some(k) => u32::try_from(k).map_err(|_| {
                flags.bad(
                    "--wgrad-deferral-limit",
                    &k.to_string(),
                    "a micro-batch count below 2^32 (0: all)",
                )
            })?,
        },
        cross_entropy_fusion: CrossEntropyFusion::from_megatron(
            flags.has("--cross-entropy-loss-fusion"),
            flags.str("--cross-entropy-fusion-impl"),
        )
        .map_err(|_| {
            let got = flags.str("--cross-entropy-fusion-impl").unwrap_or_default();
            flags.bad("--cross-entropy-fusion-impl", got, "native or te")
        })?
        .as_str()
        .into(),
        use_precision_aware_optimizer: flags.has("--use-precision-aware-optimizer"),
        fp8_param_gather: flags.has("--fp8-param-gather"),
        cpu_offloading_num_layers: match flags.num("--cpu-offloading-num-layers")? {
            None => 0,
            Some(k) => u32::try_from(k).map_err(|_| {
                flags.bad(
                    "--cpu-offloading-num-layers",
                    &k.to_string(),
                    "a layer count below 2^32",
                )
            })?,
        },
        main_params_dtype: flags.str("--main-params-dtype").unwrap_or("fp32").into(),
        exp_avg_dtype: flags.str("--exp-avg-dtype").unwrap_or("fp32").into(),
        exp_avg_sq_dtype: flags.str("--exp-avg-sq-dtype").unwrap_or("fp32").into(),
        bf16: flags.has("--bf16"),
        ep: flags.num("--expert-model-parallel-size")?.unwrap_or(1),
        etp: flags.num("--expert-tensor-parallel-size")?.unwrap_or(1),
        moe_dispatcher: dispatcher_from_flags(&flags)?,
        moe_expert_capacity_factor: match flags.str("--moe-expert-capacity-factor") {
            None => None,
            Some(v) => match v.parse::<f64>() {
                Ok(c) if c.is_finite() && c > 0.0 => Some(c),
                // Megatron-LM's `-1` (and any value below 0) means dropless.
                Ok(c) if c < 0.0 => None,
                _ => {
                    return Err(flags.bad(
                        "--moe-expert-capacity-factor",
                        v,
                        "a positive number (or -1: dropless)",
                    ))
                }
            },
        },
        moe_pad_expert_input_to_capacity: flags.has("--moe-pad-expert-input-to-capacity"),
        cuda_graph_impl: match flags.str("--cuda-graph-impl") {
            Some(i) => {
                crate::cost::recipe::CudaGraphImpl::parse(i).map_err(|_| {
                    flags.bad(
                        "--cuda-graph-impl",
                        i,
                        crate::cost::recipe::CudaGraphImpl::NAMES,
                    )
                })?;
                i.to_string()
            }
            None if flags.has("--enable-cuda-graph") => "local".into(),
            None if flags.has("--external-cuda-graph") => "transformer_engine".into(),
            None => "none".into(),
        },
        cuda_graph_modules: {
            let words: Vec<&str> = ["--cuda-graph-modules", "--cuda-graph-scope"]
                .iter()
                .filter_map(|f| flags.map.get(*f))
                .flatten()
                .map(String::as_str)
                .collect();
            crate::cost::recipe::CudaGraphModules::parse(words.iter().copied())
                .map_err(|e| flags.bad("--cuda-graph-modules", &words.join(" "), &e))?
                .names()
                .into_iter()
                .map(String::from)
                .collect()
        },
        overlap_p2p_comm: flags.has("--no-overlap-p2p-communication").then_some(false),
        gradient_accumulation_fusion: flags
            .has("--no-gradient-accumulation-fusion")
            .then_some(false),
        grad_reduce_dtype: if flags.has("--accumulate-allreduce-grads-in-fp32") {
            Some("fp32".into())
        } else if flags.has("--grad-reduce-in-bf16") {
            Some("bf16".into())
        } else {
            None
        },
        moe_comm_overlap: flags.has("--overlap-moe-expert-parallel-comm"),
        ignored,
    })
}

/// `--moe-token-dispatcher-type` with `--moe-flex-dispatcher-backend` in pplan's names;
/// `allgather` and the `ncclep` backend are not modelled and are refused.
fn dispatcher_from_flags(flags: &Flags) -> Result<String, MegatronArgsError> {
    match flags.str("--moe-token-dispatcher-type") {
        None | Some("alltoall") => Ok("alltoall".into()),
        Some("flex") => match flags.str("--moe-flex-dispatcher-backend") {
            None | Some("deepep") => Ok("deepep".into()),
            Some("hybridep") => Ok("hybridep".into()),
            Some(other) => Err(flags.bad(
                "--moe-flex-dispatcher-backend",
                other,
                "deepep or hybridep (pplan does not model ncclep)",
            )),
        },
        Some(other) => Err(flags.bad(
            "--moe-token-dispatcher-type",
            other,
            "alltoall or flex (pplan does not model allgather)",
        )),
    }
}

/// The precision (pplan's name) and FP8 recipe of `--fp8-format`/`--fp8-recipe` and
/// `--fp4-format`/`--fp4-recipe` as Megatron-LM reads them (`TransformerConfig`: `fp8` e4m3 or
/// hybrid, `fp8_recipe` default delayed; `fp4` e2m1, `fp4_recipe` default nvfp4; the two
/// formats together are an error in `validate_args`). A recipe without its format leaves
/// the layers in BF16, as in Megatron-LM; `custom` recipes (a user's quantizer factory) are
/// refused, having no cost pplan can derive.
fn precision_from_flags(flags: &Flags) -> Result<(&'static str, Fp8Recipe), MegatronArgsError> {
    let fp8 = flags.str("--fp8-format");
    let fp4 = flags.str("--fp4-format");
    if let Some(f) = fp8.filter(|f| !["e4m3", "hybrid"].contains(f)) {
        return Err(flags.bad("--fp8-format", f, "e4m3 or hybrid"));
    }
    if let Some(f) = fp4.filter(|&f| f != "e2m1") {
        return Err(flags.bad("--fp4-format", f, "e2m1"));
    }
    if let (Some(a), Some(_)) = (fp8, fp4) {
        return Err(flags.bad(
            "--fp8-format",
            a,
            "not with --fp4-format (Megatron-LM: cannot be used simultaneously); give one of them",
        ));
    }
    let recipe = match flags.str("--fp8-recipe") {
        None => Fp8Recipe::Delayed,
        Some(r) => r
            .parse::<Fp8Recipe>()
            .map_err(|e| flags.bad("--fp8-recipe", r, &e))?,
    };
    if let Some(r) = flags.str("--fp4-recipe").filter(|&r| r != "nvfp4") {
        let why = if r == "custom" {
            "nvfp4 ('custom', a user's quantizer factory, has no cost pplan can derive)"
        } else {
            "nvfp4"
        };
        return Err(flags.bad("--fp4-recipe", r, why));
    }
    Ok(match (fp8, fp4) {
        (_, Some(_)) => ("nvfp4", Fp8Recipe::Delayed),
        (Some(_), None) if recipe == Fp8Recipe::Mxfp8 => ("mxfp8", Fp8Recipe::Delayed),
        (Some(_), None) => ("fp8", recipe),
        (None, None) => ("bf16", Fp8Recipe::Delayed),
    })
}

/// The experts of `--num-experts` with Megatron-LM's defaults: `--moe-router-topk` 2,
/// `--moe-ffn-hidden-size` the dense FFN size, `--moe-layer-freq` 1 (an integer N: every N-th
/// layer from layer 0; or a 0/1 list `[1,0,...]`, one entry per layer).
fn moe_from_flags(
    flags: &Flags,
    layers: u32,
    ffn: u64,
) -> Result<Option<crate::inputs::moe::Moe>, MegatronArgsError> {
    let Some(num_experts) = flags.num("--num-experts")? else {
        return Ok(None);
    };
    let n = layers as usize;
    let freq = flags.str("--moe-layer-freq").unwrap_or("1");
    let layers_pattern: Vec<bool> =
        if let Ok(f) = freq.parse::<u64>() {
            (0..n).map(|i| f > 0 && i as u64 % f == 0).collect()
        } else {
            let inner = freq
                .trim()
                .strip_prefix('[')
                .and_then(|x| x.strip_suffix(']'))
                .unwrap_or("x");
            let bits: Option<Vec<bool>> = inner
                .split(',')
                .map(|b| match b.trim() {
                    "0" => Some(false),
                    "1" => Some(true),
                    _ => None,
                })
                .collect();
            match bits {
                Some(b) if b.len() == n => b,
                _ => return Err(flags.bad(
                    "--moe-layer-freq",
                    freq,
                    "a positive integer or a 0/1 list with one entry per layer, such as [0,1,1,1]",
                )),
            }
        };
    Ok(Some(crate::inputs::moe::Moe {
        num_experts,
        top_k: flags.num("--moe-router-topk")?.unwrap_or(2),
        expert_ffn: flags.num("--moe-ffn-hidden-size")?.unwrap_or(ffn),
        shared_ffn: flags
            .num("--moe-shared-expert-intermediate-size")?
            .unwrap_or(0),
        layers: layers_pattern,
        groups: crate::inputs::moe::router_groups(
            flags.num("--moe-router-num-groups")?,
            flags.num("--moe-router-group-topk")?,
        ),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts() {
        assert_eq!(
            parse_layout("Et|t*3|t*3|tL").unwrap().layers,
            vec![1, 3, 3, 1]
        );
        assert_eq!(
            parse_layout("E|(tt|)*2,L").unwrap().layers,
            vec![0, 2, 2, 0]
        );
        assert_eq!(parse_layout("Et*0|tL").unwrap().layers, vec![0, 1]);
        assert!(parse_layout("Etx|L").unwrap_err().contains("'x'"));
        assert!(parse_layout("E(t|").is_err());
    }

    #[test]
    fn shell_words_quotes_comments_continuations() {
        let w = shell_words(
            "# c\nA=(\n  --x 'a|b*2' \"q\\\"\" \\\n --y # tail\n)\n",
            "f",
        )
        .unwrap();
        assert_eq!(w, ["A=(", "--x", "a|b*2", "q\"", "--y", ")"]);
        assert!(matches!(
            shell_words("--x 'open", "f"),
            Err(MegatronArgsError::Unterminated { quote: '\'', .. })
        ));
    }

    #[test]
    fn defaults_and_errors() {
        let p = parse_megatron_args(
            "torchrun x.py --num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 16 --vocab-size 1000 --tensor-model-parallel-size 2 --global-batch-size 8 --swiglu --lr 1e-4",
            "run.sh",
        )
        .unwrap();
        assert_eq!(p.model.ffn_hidden_size, 128); // int(4*64*2/3 / 64) * 64
        assert_eq!(p.model.vocab_size, 1024); // padded to 128 x tp 2
        assert_eq!(p.stage_layers, vec![4]);
        assert_eq!(p.ignored, vec!["--lr".to_string()]);
        let e = parse_megatron_args("--num-layers 4", "f").unwrap_err();
        assert!(e.to_string().contains("--hidden-size"), "{e}");
        let e = parse_megatron_args(
            "--num-layers x --hidden-size 64 --num-attention-heads 4",
            "f",
        )
        .unwrap_err();
        assert!(e.to_string().contains("--num-layers 'x'"), "{e}");
    }
}
