//! `--target torchtitan-v0.2`: a TOML job config for torchtitan 0.2.x (`[training]`,
//! `[parallelism]`, `[activation_checkpoint]`), with a PyTorch schedule CSV beside it when no
//! built-in schedule class runs the plan's order. Keys as in `torchtitan/config/job_config.py`
//! at tag v0.2.2 (docs/emit.md; the key list is kept in `tests/data/torchtitan_v0.2_keys.txt`).

use crate::plan::emit::common::{
    common_notes, model_dims, quoted, torchtitan_dp_degrees, torchtitan_flavor, torchtitan_fqns,
    torchtitan_pipeline, torchtitan_stack_notes, EmitError, Emitted,
};
use crate::plan::megatron_args::RECOMPUTE_MODULES;
use crate::plan::plan_file::Plan;
use std::fmt::Write as _;

/// `[training] dataset`: no dataset torchtitan knows, so that it stops until the user names one.
pub const DATASET_PLACEHOLDER: &str = "PLACEHOLDER_replace_with_your_dataset";

/// `[model] hf_assets_path` for a model without a torchtitan flavor.
pub const TOKENIZER_PLACEHOLDER: &str = "./assets/hf/PLACEHOLDER_replace_with_your_model";

/// The TOML job config of torchtitan 0.2.x for `plan`; `csv_path` as in
/// `emit` (`target.rs`).
pub fn torchtitan_toml(plan: &Plan, csv_path: Option<&str>) -> Result<Emitted, EmitError> {
    let par = &plan.parallelism;
    let m = &plan.model;
    let sch = plan.schedule.name.as_str();
    let mut notes = Vec::new();
    let mut schedule_csv = None;

    let mut training = Vec::new();
    // torchtitan 0.2.2's train.py runs `global_batch_size / (local_batch_size x dp)` gradient
    // accumulation steps, each one forward of `local_batch_size` sequences per data-parallel
    // rank; with pp > 1 that forward is the pipeline schedule, which cuts the batch into
    // `local_batch_size / pipeline_parallel_microbatch_size` micro-batches
    // (distributed/pipeline_parallel.py). So pp > 1: the rank's whole share in one schedule
    // step; pp = 1: one micro-batch per forward, accumulated global / (micro x dp) times.
    let local_batch = if par.pp > 1 {
        par.global_batch / par.dp
    } else {
        par.micro_batch
    };
    training.push(format!("local_batch_size = {local_batch}"));
    training.push(format!("global_batch_size = {}", par.global_batch));
    training.push(format!("seq_len = {}", m.seq_length));
    // torchtitan's default is its test set (`c4_test`, a few samples in its repository): a
    // name it refuses makes the run stop at start-up rather than train on that.
    training.push(
        "# dataset: a placeholder torchtitan refuses ('Dataset ... is not supported'): name one registered in\n\
         # torchtitan/hf_datasets/text_datasets.py DATASETS (e.g. \"c4\") and set dataset_path to a local copy"
            .into(),
    );
    training.push(format!("dataset = {}", quoted(DATASET_PLACEHOLDER)));
    training.push(format!(
        "mixed_precision_param = {}",
        quoted(if plan.dtype == "bf16" {
            "bfloat16"
        } else {
            "float32"
        })
    ));

    if let Some(d) = &par.grad_reduce_dtype {
        training.push(format!(
            "mixed_precision_reduce = {}",
            quoted(super::torchtitan::reduce_dtype(d))
        ));
    }

    let mut parallelism = Vec::new();
    let (replicate, shard) = torchtitan_dp_degrees(plan, &mut notes);
    parallelism.push(format!("data_parallel_replicate_degree = {replicate}"));
    parallelism.push(format!("data_parallel_shard_degree = {shard}"));
    if !par.reshard_after_forward {
        parallelism.push(format!("fsdp_reshard_after_forward = {}", quoted("never")));
    }
    parallelism.push(format!("tensor_parallel_degree = {}", par.tp));
    if par.cp > 1 {
        parallelism.push(format!("context_parallel_degree = {}", par.cp));
        // torchtitan 0.2's two exchanges: "allgather" gathers every K/V shard, "alltoall"
        // passes the shards between ranks step by step, the counterpart of the p2p ring.
        let rotate = if par.cp_comm == "all-gather" {
            "allgather"
        } else {
            "alltoall"
        };
        parallelism.push(format!(
            "context_parallel_rotate_method = {}",
            quoted(rotate)
        ));
    }
    if par.tp > 1 && !par.sequence_parallel {
        notes.push(
            "sequence parallelism off is not expressible: torchtitan's tensor-parallel plan always shards the norms along the sequence".into(),
        );
    }
    // The stack fields the prediction assumed that this config does not set.
    torchtitan_stack_notes(plan, "enable_async_tensor_parallel", &mut notes);
    parallelism.push(format!("pipeline_parallel_degree = {}", par.pp));
    if plan.model.moe.is_some() {
        parallelism.push(format!("expert_parallel_degree = {}", par.ep));
        parallelism.push(format!("expert_tensor_parallel_degree = {}", par.etp));
    }
    if par.pp > 1 {
        let (class, csv) = torchtitan_pipeline(plan, csv_path, &mut notes)?;
        if let (Some(csv), Some(path)) = (csv, csv_path) {
            schedule_csv = Some(csv);
            parallelism.push(format!("pipeline_parallel_schedule_csv = {}", quoted(path)));
        }
        parallelism.push(format!("pipeline_parallel_schedule = {}", quoted(class)));
        parallelism.push(format!(
            "pipeline_parallel_microbatch_size = {}",
            par.micro_batch
        ));
        // The exact stage boundaries, in torchtitan's module names (tok_embeddings, layers.i,
        // norm, output), so its own even split does not apply.
        let parts: Vec<String> = torchtitan_fqns(plan, "output")
            .iter()
            .map(|names| format!("[{}]", names.join(", ")))
            .collect();
        parallelism.push(format!(
            "module_fqns_per_model_part = [{}]",
            parts.join(", ")
        ));
    }

    let mut ac = Vec::new();
    match par.recompute.as_str() {
        "selective" => {
            ac.push(format!("mode = {}", quoted("selective")));
            ac.push(format!("selective_ac_option = {}", quoted("op")));
            notes.push(
                "selective recomputation maps to torchtitan's per-op selective checkpointing, which chooses its own ops (Megatron recomputes the attention core)".into(),
            );
        }
        "selective-op" | "selective-layer" => {
            let option = if par.recompute == "selective-op" {
                "op"
            } else {
                "2"
            };
            ac.push(format!("mode = {}", quoted("selective")));
            ac.push(format!("selective_ac_option = {}", quoted(option)));
        }
        // Megatron-Core's recompute modules (every set pplan models).
        modules if RECOMPUTE_MODULES.iter().any(|(r, _)| *r == modules) => {
            ac.push(format!("mode = {}", quoted("selective")));
            ac.push(format!("selective_ac_option = {}", quoted("op")));
            notes.push(format!(
                "recompute {modules} is Megatron-Core's recompute modules; torchtitan has no such mode, so its per-op selective checkpointing is written"
            ));
        }
        other => ac.push(format!("mode = {}", quoted(other))),
    }
    // The network: a flavor with exactly the plan's dimensions, or no [model] section and a
    // note (torchtitan's default is its debug model).
    // The tokenizer: torchtitan's default `hf_assets_path` is its test tokenizer
    // (`./tests/assets/tokenizer`), so the model's own is always named.
    let mut model = Vec::new();
    match torchtitan_flavor(m) {
        Some(f) => {
            model.push(format!("name = {}", quoted(f.module)));
            model.push(format!("flavor = {}", quoted(f.flavor)));
            // Where torchtitan's own llama3 train configs put it
            // (`scripts/download_hf_assets.py --repo_id meta-llama/Llama-3.1-8B --assets tokenizer`).
            model.push(format!(
                "hf_assets_path = {}",
                quoted(&format!("./assets/hf/Llama-3.1-{}", f.flavor))
            ));
        }
        None => {
            notes.push(format!(
                "no torchtitan flavor has this model's dimensions ({}): add one and set [model] name and flavor, or torchtitan trains its default debug model",
                model_dims(m)
            ));
            model.push(
                "# hf_assets_path: a placeholder: the folder of this model's Hugging Face tokenizer files".into(),
            );
            model.push(format!(
                "hf_assets_path = {}",
                quoted(TOKENIZER_PLACEHOLDER)
            ));
        }
    }
    common_notes(plan, &mut notes);

    let mut text = String::new();
    let _ = writeln!(
        text,
        "# torchtitan job config for model '{}' with schedule '{sch}' (pplan emit --target torchtitan-v0.2).",
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
    for n in &notes {
        let _ = writeln!(text, "# cannot express exactly: {n}");
    }
    let sections = [
        ("model", model),
        ("training", training),
        ("parallelism", parallelism),
        ("activation_checkpoint", ac),
    ];
    for (name, lines) in sections {
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
