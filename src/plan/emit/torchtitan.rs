//! `--target torchtitan`: a Python config function for current torchtitan (main since its
//! February 2026 move from TOML job configs to Python config functions, `--module`/`--config`).
//!
//! The file defines `pplan_config() -> Trainer.Config`. For a model with a torchtitan flavor of
//! exactly its dimensions it starts from torchtitan's own config function for that flavor
//! (`torchtitan/models/llama3/config_registry.py`: tokenizer, data, loss, optimizer) and
//! replaces the model, the token budgets, the parallel layout, the pipeline schedule and stage
//! boundaries and the activation checkpointing with the plan's. Without such a flavor the
//! function raises, naming the dimensions, rather than train another model. Keys as in
//! `torchtitan/config/configs.py` and `torchtitan/trainer.py` at the commit in
//! [`TORCHTITAN_COMMIT`] (`tests/data/torchtitan_keys.txt`).

use crate::plan::emit::common::{
    common_notes, model_dims, quoted, torchtitan_dp_degrees, torchtitan_flavor, torchtitan_fqns,
    torchtitan_pipeline, torchtitan_stack_notes, EmitError, Emitted,
};
use crate::plan::megatron_args::RECOMPUTE_MODULES;
use crate::plan::plan_file::Plan;
use std::fmt::Write as _;

/// The torchtitan commit the keys were checked against (`tests/data/torchtitan_keys.txt`).
pub const TORCHTITAN_COMMIT: &str = "b5bcd76c66d0acb1a08b176d9639425bc55e0b2a";

/// The config function the file defines (`--config`).
pub const CONFIG_FN: &str = "pplan_config";

/// The Python config for current torchtitan; `csv_path` as in [`crate::plan::emit::emit`].
pub fn torchtitan(plan: &Plan, csv_path: Option<&str>) -> Result<Emitted, EmitError> {
    let par = &plan.parallelism;
    let m = &plan.model;
    let sch = plan.schedule.name.as_str();
    let mut notes = Vec::new();
    let mut schedule_csv = None;
    let flavor = torchtitan_flavor(m);
    if flavor.is_none() {
        notes.push(format!(
            "no torchtitan flavor has this model's dimensions ({}): the config raises until a model_registry flavor is added",
            model_dims(m)
        ));
    }

    // Token budgets: one pipeline micro-batch per data-parallel rank is micro-batch x sequence
    // tokens; a step is the global batch's tokens (torchtitan derives the gradient
    // accumulation from the two and num_pp_microbatches).
    let mut body = Vec::new();
    body.push(format!(
        "config.training.num_tokens_per_microbatch_per_dp_rank = {}",
        par.micro_batch * m.seq_length
    ));
    body.push(format!(
        "config.training.num_tokens_per_train_step = {}",
        par.global_batch * m.seq_length
    ));
    body.push(format!(
        "config.training.max_context_length = {}",
        m.seq_length
    ));
    body.push(format!(
        "config.training.mixed_precision_param = {}",
        quoted(if plan.dtype == "bf16" {
            "bfloat16"
        } else {
            "float32"
        })
    ));

    // Recorded only where the plan's stack did not imply it (torchtitan's own default is
    // float32, the torchtitan stack's).
    if let Some(d) = &par.grad_reduce_dtype {
        body.push(format!(
            "config.training.mixed_precision_reduce = {}",
            quoted(reduce_dtype(d))
        ));
    }

    let mut pc = Vec::new();
    let (replicate, shard) = torchtitan_dp_degrees(plan, &mut notes);
    pc.push(format!("data_parallel_replicate_degree={replicate}"));
    pc.push(format!("data_parallel_shard_degree={shard}"));
    if !par.reshard_after_forward {
        pc.push(format!("fsdp_reshard_after_forward={}", quoted("never")));
    }
    pc.push(format!("tensor_parallel_degree={}", par.tp));
    if par.cp > 1 {
        pc.push(format!("context_parallel_degree={}", par.cp));
        notes.push(format!(
            "the context-parallel exchange ('{}') is not set here: current torchtitan has no config key for it and uses its own",
            par.cp_comm
        ));
    }
    pc.push(format!(
        "enable_sequence_parallel={}",
        if par.sequence_parallel {
            "True"
        } else {
            "False"
        }
    ));
    torchtitan_stack_notes(
        plan,
        "config.compile.enable_async_tensor_parallel",
        &mut notes,
    );
    pc.push(format!("pipeline_parallel_degree={}", par.pp));
    if plan.model.moe.is_some() {
        pc.push(format!("expert_parallel_degree={}", par.ep));
        if par.etp > 1 {
            notes.push(format!(
                "expert tensor parallelism {} is not expressible in this torchtitan's ParallelismConfig (it has expert_parallel_degree only): experts are not tensor-parallel there",
                par.etp
            ));
        }
    }
    if par.pp > 1 {
        let (class, csv) = torchtitan_pipeline(plan, csv_path, &mut notes)?;
        if let (Some(csv), Some(path)) = (csv, csv_path) {
            schedule_csv = Some(csv);
            pc.push(format!("pipeline_parallel_schedule_csv={}", quoted(path)));
        }
        pc.push(format!("pipeline_parallel_schedule={}", quoted(class)));
        pc.push(format!(
            "num_pp_microbatches={}",
            par.global_batch / (par.dp * par.micro_batch).max(1)
        ));
        let parts: Vec<String> = torchtitan_fqns(plan, "lm_head")
            .iter()
            .map(|names| format!("[{}]", names.join(", ")))
            .collect();
        pc.push(format!(
            "module_fqns_per_model_part=[\n            {},\n        ]",
            parts.join(",\n            ")
        ));
    }
    body.push(format!(
        "config.parallelism = ParallelismConfig(\n        {},\n    )",
        pc.join(",\n        ")
    ));
    let ac = match par.recompute.as_str() {
        "selective" => {
            notes.push(
                "selective recomputation maps to torchtitan's SelectiveAC, which chooses its own ops (Megatron recomputes the attention core)".into(),
            );
            "SelectiveAC.Config()"
        }
        "full" => "FullAC.Config()",
        "selective-op" => "SelectiveAC.Config()",
        // Megatron-Core's recompute modules (every set pplan models).
        modules if RECOMPUTE_MODULES.iter().any(|(r, _)| *r == modules) => {
            notes.push(format!(
                "recompute {modules} is Megatron-Core's recompute modules; torchtitan has no such mode, so its per-op SelectiveAC is written"
            ));
            "SelectiveAC.Config()"
        }
        "selective-layer" => {
            notes.push(
                "selective-layer (every second layer checkpointed) is gone from torchtitan main; SelectiveAC (per-op, of about the same cost) is written instead".into(),
            );
            "SelectiveAC.Config()"
        }
        _ => "None",
    };
    body.push(format!("config.activation_checkpoint = {ac}"));
    common_notes(plan, &mut notes);

    let mut text = String::new();
    let _ = writeln!(
        text,
        "# torchtitan config for model '{}' with schedule '{sch}' (pplan emit --target torchtitan).",
        m.name
    );
    let _ = writeln!(
        text,
        "# Keys as in torchtitan/config/configs.py and torchtitan/trainer.py at commit {};",
        &TORCHTITAN_COMMIT[..12]
    );
    let _ = writeln!(
        text,
        "# schedule names as in torch/distributed/pipelining/schedules.py get_schedule_class."
    );
    let _ = writeln!(
        text,
        "# Run on {} GPUs from a directory on PYTHONPATH holding this file as FILE.py:",
        par.gpus
    );
    let _ = writeln!(
        text,
        "#   NGPU={} MODULE=FILE CONFIG={CONFIG_FN} ./run_train.sh",
        par.gpus
    );
    for n in &notes {
        let _ = writeln!(text, "# cannot express exactly: {n}");
    }
    text.push_str("from torchtitan.config import ParallelismConfig\n");
    match ac {
        "None" => {}
        a => {
            let _ = writeln!(
                text,
                "from torchtitan.distributed.activation_checkpoint import {}",
                a.trim_end_matches(".Config()")
            );
        }
    }
    if let Some(f) = flavor {
        let _ = writeln!(
            text,
            "from torchtitan.models.{} import model_registry",
            f.module
        );
        let _ = writeln!(
            text,
            "from torchtitan.models.{}.config_registry import {}",
            f.module, f.registry_fn
        );
    }
    text.push_str("from torchtitan.trainer import Trainer\n\n\n");
    let _ = writeln!(text, "def {CONFIG_FN}() -> Trainer.Config:");
    match flavor {
        Some(f) => {
            let _ = writeln!(
                text,
                "    # torchtitan's own {} config (tokenizer, data, loss, optimizer), with pplan's plan.",
                f.registry_fn
            );
            let _ = writeln!(text, "    config = {}()", f.registry_fn);
            let _ = writeln!(
                text,
                "    config.model_spec = model_registry({})",
                quoted(f.flavor)
            );
        }
        None => {
            let _ = writeln!(
                text,
                "    raise NotImplementedError({})",
                quoted(&format!(
                    "no torchtitan flavor has {}: add one to a model_registry and start from its config",
                    model_dims(m)
                ))
            );
            text.push_str("    config = Trainer.Config()\n");
        }
    }
    for l in body {
        let _ = writeln!(text, "    {l}");
    }
    text.push_str("    return config\n");
    Ok(Emitted {
        text,
        notes,
        schedule_csv,
    })
}

/// torchtitan's `mixed_precision_reduce` for a plan's `grad_reduce_dtype`.
pub(crate) fn reduce_dtype(d: &str) -> &'static str {
    if d == "fp32" {
        "float32"
    } else {
        "bfloat16"
    }
}
