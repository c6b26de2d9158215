//! `pplan emit`: a checked [`Plan`] written for the systems that run it.
//!
//! Four targets (docs/emit.md has the mapping of every field and the source file each flag or
//! key was checked against):
//! - [`Target::Executor`]: the normalised plan JSON the executor crate reads ([`Plan::to_json`]);
//! - [`Target::Megatron`]: Megatron-LM command-line arguments, one per line, `#` comments first;
//! - [`Target::Torchtitan`]: a torchtitan TOML job config (`[training]`, `[parallelism]`,
//!   `[activation_checkpoint]`), with a PyTorch schedule CSV beside it when no built-in schedule
//!   class runs the plan's order;
//! - [`Target::Csv`]: the schedule in PyTorch's `compute_only` CSV (`csv::write_torch`).
//!
//! What a target cannot express (uneven stages in old Megatron versions, zero-bubble orders
//! Megatron-LM core does not run, PipeDream's asynchronous weight updates, ...) is never dropped
//! silently: it is written as a comment line in the output and returned in [`Emitted::notes`].
//! Pure functions of the plan: no IO, byte-stable output.

use crate::plan::plan_file::{Plan, PlanError};
use crate::schedule::csv;
use std::fmt::Write as _;

/// What to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Executor,
    Megatron,
    Torchtitan,
    Csv,
}

impl std::str::FromStr for Target {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "executor" => Ok(Target::Executor),
            "megatron" => Ok(Target::Megatron),
            "torchtitan" => Ok(Target::Torchtitan),
            "csv" => Ok(Target::Csv),
            _ => Err(format!(
                "unknown target '{s}' (valid: executor, megatron, torchtitan, csv)"
            )),
        }
    }
}

/// The emitted text and what it could not say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Emitted {
    pub text: String,
    /// One line per thing the target cannot express (also written into `text` as comments,
    /// except for the executor and csv targets, whose formats have no comments).
    pub notes: Vec<String>,
    /// torchtitan only: the schedule CSV to write at the path the TOML names.
    pub schedule_csv: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EmitError {
    #[error("{0}")]
    Plan(#[from] PlanError),
    #[error("the torchtitan config needs a schedule CSV for schedule '{schedule}' (no PyTorch schedule class runs this order): give --schedule-csv FILE or --output FILE")]
    NeedsCsvPath { schedule: String },
}

/// Emit `plan` for `target`. `csv_path` is the path a torchtitan config should name for its
/// schedule CSV (only used when the plan's order needs one).
pub fn emit(plan: &Plan, target: Target, csv_path: Option<&str>) -> Result<Emitted, EmitError> {
    match target {
        Target::Executor => Ok(Emitted {
            text: plan.to_json(),
            notes: Vec::new(),
            schedule_csv: None,
        }),
        Target::Csv => Ok(Emitted {
            text: csv::write_torch(&plan.schedule_ir()?),
            notes: Vec::new(),
            schedule_csv: None,
        }),
        Target::Megatron => Ok(megatron(plan)),
        Target::Torchtitan => torchtitan(plan, csv_path),
    }
}

fn all_equal(v: &[u32]) -> bool {
    v.windows(2).all(|w| w[0] == w[1])
}

/// Micro-batches per step that the batch sizes imply, for a consistency note.
fn implied_microbatches(plan: &Plan) -> u64 {
    let par = &plan.parallelism;
    par.global_batch / par.dp.max(1) / par.micro_batch.max(1)
}

/// Notes shared by both framework targets.
fn common_notes(plan: &Plan, notes: &mut Vec<String>) {
    let par = &plan.parallelism;
    if par.global_batch % (par.dp * par.micro_batch) != 0 {
        notes.push(format!(
            "global batch {} is not a multiple of dp x micro-batch = {} x {}",
            par.global_batch, par.dp, par.micro_batch
        ));
    } else if implied_microbatches(plan) != plan.schedule.microbatches_per_step as u64 {
        notes.push(format!(
            "the schedule has {} micro-batches per step but global batch / (dp x micro-batch) = {}; the framework runs the latter",
            plan.schedule.microbatches_per_step,
            implied_microbatches(plan)
        ));
    }
}

/// Megatron-LM's layout string (`--pipeline-model-parallel-layout`): stages split by `|`,
/// `E` embedding, `t` a transformer layer (`t*n` for n of them), `L` the loss.
fn megatron_layout(plan: &Plan) -> String {
    let mut out = String::new();
    for (i, st) in plan.stages.iter().enumerate() {
        if i > 0 {
            out.push('|');
        }
        if st.embedding {
            out.push('E');
        }
        match st.num_layers {
            0 => {}
            1 => out.push('t'),
            n => {
                let _ = write!(out, "t*{n}");
            }
        }
        if st.output {
            out.push('L');
        }
    }
    out
}

fn megatron(plan: &Plan) -> Emitted {
    let par = &plan.parallelism;
    let m = &plan.model;
    let sch = plan.schedule.name.as_str();
    let mut notes = Vec::new();
    let mut flags: Vec<String> = Vec::new();
    let mut flag = |s: String| flags.push(s);

    flag(format!("--tensor-model-parallel-size {}", par.tp));
    flag(format!("--pipeline-model-parallel-size {}", par.pp));
    let counts: Vec<u32> = plan.stages.iter().map(|s| s.num_layers).collect();
    if plan.schedule.placement != "loop" {
        notes.push(format!(
            "V placement (device r holds stages r and 2p-1-r, schedule '{sch}') is not expressible: Megatron-LM places virtual stage s on rank s mod p"
        ));
    }
    if all_equal(&counts) {
        if par.chunks > 1 {
            flag(format!(
                "--num-layers-per-virtual-pipeline-stage {}",
                counts[0]
            ));
        }
    } else {
        // Megatron-LM's default split is even; anything else needs the layout string.
        flag(format!(
            "--pipeline-model-parallel-layout {}",
            megatron_layout(plan)
        ));
        notes.push(format!(
            "uneven stages ({}) use --pipeline-model-parallel-layout, which needs Megatron-Core 0.13 or later",
            counts
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    match sch {
        "1f1b" | "interleaved-1f1b" => {}
        "gpipe" => notes.push(
            "schedule 'gpipe' is not in Megatron-LM core: it runs 1F1B (same bubble, fewer activations in flight)".into(),
        ),
        "looped-bfs" => notes.push(
            "schedule 'looped-bfs' is not in Megatron-LM core: it runs interleaved 1F1B over the same chunks".into(),
        ),
        "zb-h1" | "zb-h2" | "zbv" | "dualpipev" => notes.push(format!(
            "schedule '{sch}' (zero-bubble, split I/W backward) is not in Megatron-LM core: it runs {} with a full backward",
            if par.chunks > 1 { "interleaved 1F1B" } else { "1F1B" }
        )),
        "pipedream" | "pipedream-2bw" => notes.push(format!(
            "schedule '{sch}' (PipeDream asynchronous weight updates) is not expressible: Megatron-LM flushes the pipeline every step (1F1B)"
        )),
        other => notes.push(format!(
            "schedule '{other}' (a custom order) is not expressible: Megatron-LM runs its own {} order",
            if par.chunks > 1 { "interleaved 1F1B" } else { "1F1B" }
        )),
    }
    flag(format!("--micro-batch-size {}", par.micro_batch));
    flag(format!("--global-batch-size {}", par.global_batch));
    flag(format!("--num-layers {}", m.num_layers));
    flag(format!("--hidden-size {}", m.hidden_size));
    flag(format!("--num-attention-heads {}", m.num_attention_heads));
    if m.num_query_groups != m.num_attention_heads {
        flag("--group-query-attention".into());
        flag(format!("--num-query-groups {}", m.num_query_groups));
    }
    flag(format!("--ffn-hidden-size {}", m.ffn_hidden_size));
    if m.gated_mlp {
        flag("--swiglu".into());
    }
    flag(format!("--seq-length {}", m.seq_length));
    flag(format!("--max-position-embeddings {}", m.seq_length));
    match par.recompute.as_str() {
        "selective" => flag("--recompute-granularity selective".into()),
        "full" => {
            flag("--recompute-granularity full".into());
            flag("--recompute-method uniform".into());
            flag("--recompute-num-layers 1".into());
        }
        _ => {}
    }
    if par.sequence_parallel {
        flag("--sequence-parallel".into());
    }
    if par.zero1 {
        flag("--use-distributed-optimizer".into());
    }
    // The stack the prediction assumed (Megatron-Core argument names; docs/emit.md).
    match par.precision.as_str() {
        "fp8" => {
            flag("--fp8-format hybrid".into());
            flag("--fp8-amax-history-len 1024".into());
            flag("--fp8-amax-compute-algo max".into());
        }
        "mxfp8" => {
            flag("--fp8-format e4m3".into());
            flag("--fp8-recipe mxfp8".into());
        }
        "nvfp4" => {
            flag("--fp4-format e2m1".into());
            flag("--fp4-recipe nvfp4".into());
        }
        _ => {}
    }
    if par.attention == "flash" {
        flag("--attention-backend flash".into());
    }
    if par.tp_comm_overlap {
        flag("--tp-comm-overlap".into());
    }
    if par.overlap_grad_reduce {
        flag("--overlap-grad-reduce".into());
    }
    if par.overlap_param_gather {
        flag("--overlap-param-gather".into());
    }
    if plan.dtype == "bf16" {
        flag("--bf16".into());
    }
    common_notes(plan, &mut notes);

    let mut text = String::new();
    let _ = writeln!(
        text,
        "# Megatron-LM arguments for model '{}' with schedule '{sch}' (pplan emit --target megatron).",
        m.name
    );
    let _ = writeln!(
        text,
        "# Flags as in Megatron-LM megatron/training/arguments.py (Megatron-Core 0.15)."
    );
    let _ = writeln!(
        text,
        "# Launch on {} GPUs: tp {} x pp {} x dp {}; Megatron-LM derives dp from the world size.",
        par.gpus, par.tp, par.pp, par.dp
    );
    let _ = writeln!(
        text,
        "# Vocabulary ({}) comes from the tokenizer flags; add data, tokenizer and optimizer flags.",
        m.vocab_size
    );
    let _ = writeln!(
        text,
        "# Use: torchrun ... pretrain_gpt.py $(grep -v '^#' THIS_FILE) ..."
    );
    for n in &notes {
        let _ = writeln!(text, "# cannot express exactly: {n}");
    }
    for f in flags {
        text.push_str(&f);
        text.push('\n');
    }
    Emitted {
        text,
        notes,
        schedule_csv: None,
    }
}

/// The PyTorch schedule class (`get_schedule_class` name) that runs exactly the plan's order,
/// if one does.
fn torch_class(plan: &Plan) -> Option<&'static str> {
    let p = plan.parallelism.pp as u32;
    let m = plan.schedule.microbatches_per_step;
    match plan.schedule.name.as_str() {
        "gpipe" => Some("GPipe"),
        "1f1b" => Some("1F1B"),
        // PyTorch's rounds equal pplan's only when p divides m (docs/schedules.md).
        "interleaved-1f1b" if p > 0 && m % p == 0 => Some("Interleaved1F1B"),
        "looped-bfs" => Some("LoopedBFS"),
        "zbv" => Some("ZBVZeroBubble"),
        "dualpipev" => Some("DualPipeV"),
        _ => None,
    }
}

fn toml_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn torchtitan(plan: &Plan, csv_path: Option<&str>) -> Result<Emitted, EmitError> {
    let par = &plan.parallelism;
    let m = &plan.model;
    let sch = plan.schedule.name.as_str();
    let mut notes = Vec::new();
    let mut schedule_csv = None;

    let mut training = Vec::new();
    training.push(format!("local_batch_size = {}", par.global_batch / par.dp));
    training.push(format!("global_batch_size = {}", par.global_batch));
    training.push(format!("seq_len = {}", m.seq_length));
    training.push(format!(
        "mixed_precision_param = {}",
        toml_str(if plan.dtype == "bf16" {
            "bfloat16"
        } else {
            "float32"
        })
    ));

    let mut parallelism = Vec::new();
    let (replicate, shard) = if par.zero1 && par.dp > 1 {
        notes.push(
            "ZeRO-1 maps to FSDP (data_parallel_shard_degree), which shards parameters and gradients too (ZeRO-3)".into(),
        );
        (1, par.dp)
    } else {
        (par.dp, 1)
    };
    parallelism.push(format!("data_parallel_replicate_degree = {replicate}"));
    parallelism.push(format!("data_parallel_shard_degree = {shard}"));
    parallelism.push(format!("tensor_parallel_degree = {}", par.tp));
    if par.tp > 1 && !par.sequence_parallel {
        notes.push(
            "sequence parallelism off is not expressible: torchtitan's tensor-parallel plan always shards the norms along the sequence".into(),
        );
    }
    // The stack fields the prediction assumed that this config does not set.
    if par.precision != "bf16" {
        notes.push(format!(
            "precision '{}' is not set here: torchtitan's float8/mx converters ([model] converters) differ from Transformer Engine's recipes the prediction assumed",
            par.precision
        ));
    }
    if par.tp_comm_overlap {
        notes.push(
            "tensor-parallel communication overlap is not set here: torchtitan's counterpart is async tensor parallelism (enable_async_tensor_parallel, with torch.compile)".into(),
        );
    }
    if par.overlap_grad_reduce {
        notes.push("the overlapped gradient reduction is FSDP2's default; nothing to set".into());
    }
    parallelism.push(format!("pipeline_parallel_degree = {}", par.pp));
    if par.pp > 1 {
        let class = match torch_class(plan) {
            Some(c) => c,
            None => {
                if matches!(sch, "pipedream" | "pipedream-2bw") {
                    notes.push(format!(
                        "schedule '{sch}' (asynchronous weight updates) is not expressible: torchtitan flushes every step; the CSV keeps the order of one step's micro-batches only"
                    ));
                }
                let Some(path) = csv_path else {
                    return Err(EmitError::NeedsCsvPath {
                        schedule: sch.to_string(),
                    });
                };
                if plan.schedule.placement != "loop" {
                    notes.push(
                        "V placement of a custom order is not expressible with a CSV: torchtitan places stages in a loop unless the schedule class is ZBVZeroBubble or DualPipeV".into(),
                    );
                }
                schedule_csv = Some(csv::write_torch(&plan.schedule_ir()?));
                parallelism.push(format!(
                    "pipeline_parallel_schedule_csv = {}",
                    toml_str(path)
                ));
                // torchtitan reads a CSV with _PipelineScheduleRuntime; the schedule name then
                // only says how many stages each rank holds.
                if par.chunks > 1 {
                    "PipelineScheduleMulti"
                } else {
                    "PipelineScheduleSingle"
                }
            }
        };
        parallelism.push(format!("pipeline_parallel_schedule = {}", toml_str(class)));
        parallelism.push(format!(
            "pipeline_parallel_microbatch_size = {}",
            par.micro_batch
        ));
        // The exact stage boundaries, in torchtitan's module names (tok_embeddings, layers.i,
        // norm, output), so its own even split does not apply.
        let mut parts = Vec::new();
        for st in &plan.stages {
            let mut names = Vec::new();
            if st.embedding {
                names.push(toml_str("tok_embeddings"));
            }
            for l in st.first_layer..st.first_layer + st.num_layers {
                names.push(toml_str(&format!("layers.{l}")));
            }
            if st.output {
                names.push(toml_str("norm"));
                names.push(toml_str("output"));
            }
            parts.push(format!("[{}]", names.join(", ")));
        }
        parallelism.push(format!(
            "module_fqns_per_model_part = [{}]",
            parts.join(", ")
        ));
    }

    let mut ac = Vec::new();
    match par.recompute.as_str() {
        "selective" => {
            ac.push(format!("mode = {}", toml_str("selective")));
            ac.push(format!("selective_ac_option = {}", toml_str("op")));
            notes.push(
                "selective recomputation maps to torchtitan's per-op selective checkpointing, which chooses its own ops (Megatron recomputes the attention core)".into(),
            );
        }
        other => ac.push(format!("mode = {}", toml_str(other))),
    }
    common_notes(plan, &mut notes);

    let mut text = String::new();
    let _ = writeln!(
        text,
        "# torchtitan job config for model '{}' with schedule '{sch}' (pplan emit --target torchtitan).",
        m.name
    );
    let _ = writeln!(
        text,
        "# Keys as in torchtitan/config/job_config.py (torchtitan 0.2.2); schedule names as in"
    );
    let _ = writeln!(
        text,
        "# torch/distributed/pipelining/schedules.py get_schedule_class. Launch on {} GPUs.",
        par.gpus
    );
    let _ = writeln!(
        text,
        "# Choose a [model] name and flavor with {} layers, hidden size {}, {} heads ({} key/value heads), FFN {}, vocabulary {}.",
        m.num_layers, m.hidden_size, m.num_attention_heads, m.num_query_groups, m.ffn_hidden_size, m.vocab_size
    );
    for n in &notes {
        let _ = writeln!(text, "# cannot express exactly: {n}");
    }
    for (name, lines) in [
        ("training", training),
        ("parallelism", parallelism),
        ("activation_checkpoint", ac),
    ] {
        let _ = writeln!(text, "\n[{name}]");
        for l in lines {
            text.push_str(&l);
            text.push('\n');
        }
    }
    Ok(Emitted {
        text,
        notes,
        schedule_csv,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_strings() {
        use crate::inputs::model::Model;
        use crate::plan::plan_file::*;
        use crate::schedule::generators::{generate, GenParams, ScheduleName};
        use crate::schedule::ir::Placement;
        let model = Model::preset("gpt-1.7b").unwrap();
        let sch = generate(ScheduleName::OneFOneB, GenParams::new(3, 3)).unwrap();
        let plan = Plan {
            format: PLAN_FORMAT.into(),
            version: PLAN_VERSION,
            model: PlanModel::from_model(&model),
            hardware: "a100-80gb".into(),
            parallelism: Parallelism {
                gpus: 3,
                tp: 1,
                pp: 3,
                dp: 1,
                micro_batch: 1,
                global_batch: 3,
                chunks: 1,
                recompute: "none".into(),
                sequence_parallel: false,
                zero1: false,
                ..Parallelism::stack_defaults()
            },
            dtype: "bf16".into(),
            stages: stages_from_counts(&[1, 22, 1], Placement::Loop, 3),
            schedule: PlanSchedule::from_schedule("1f1b", &sch),
            predicted: None,
        };
        assert_eq!(megatron_layout(&plan), "Et|t*22|tL");
        assert_eq!(toml_str("a\"b\\c"), "\"a\\\"b\\\\c\"");
    }
}
