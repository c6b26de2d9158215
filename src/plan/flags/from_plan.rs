//! A plan file as the `pplan predict` flags that describe it (`predict --plan`, `simulate
//! --plan`, `search --gantt`, `pplan report`): the plan goes through the same flag parser
//! ([`super::PredictFlags`]) as typed flags and runs-file rows, so a plan is predicted
//! exactly as `predict` would predict it with those flags, and a flag typed on top replaces
//! the plan's value in one place. No IO.

use crate::inputs::profile::even_split;
use crate::plan::emit::megatron::megatron_layout;
use crate::plan::plan_file::Plan;

/// One flag a plan implies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanArg {
    /// The flag, e.g. `--micro-batch`.
    pub flag: &'static str,
    /// Its value; `None` for a bare switch (`--moe-pad-expert-input-to-capacity`).
    pub value: Option<String>,
    /// The plan field it comes from, as the plan file names it (`parallelism.micro_batch`).
    pub field: &'static str,
    /// Other flags that, typed on top, make this one meaningless, so it is dropped with them
    /// (`--zero1` replaces the plan's `--zero`; a new `--pp` the plan's pipeline layout).
    pub yields_to: &'static [&'static str],
}

fn arg(flag: &'static str, value: impl ToString, field: &'static str) -> PlanArg {
    PlanArg {
        flag,
        value: Some(value.to_string()),
        field,
        yields_to: &[],
    }
}

fn on_off(b: bool) -> &'static str {
    if b {
        "on"
    } else {
        "off"
    }
}

/// The flags that change the stages: a plan's pipeline layout and micro-batch group give
/// way to any of them.
const STAGE_FLAGS: &[&str] = &[
    "--pp",
    "--chunks",
    "--schedule",
    "--partition",
    "--model",
    "--mtp-num-layers",
    "--account-for-embedding-in-pipeline-split",
    "--account-for-loss-in-pipeline-split",
    "--decoder-first-pipeline-num-layers",
    "--decoder-last-pipeline-num-layers",
];

/// The flags `pplan predict` takes for `plan`, in the order `predict --help` lists them. The
/// model is named by `model.name` only (a label: the caller builds the model from the plan's
/// dimensions); the data-parallel size is left to follow from `--gpus`, so that a new `--tp`
/// or `--pp` typed on top keeps the GPU count. The stages become `--pipeline-layout` only
/// where they are not the even split of the layers (or the multi-token prediction depths
/// sit elsewhere than on the last stage).
pub fn plan_args(plan: &Plan) -> Vec<PlanArg> {
    let m = &plan.model;
    let p = &plan.parallelism;
    let mut out = vec![
        arg("--model", &m.name, "model.name"),
        arg("--hardware", &plan.hardware, "hardware"),
        arg("--gpus", p.gpus, "parallelism.gpus"),
        arg("--tp", p.tp, "parallelism.tp"),
        arg("--pp", p.pp, "parallelism.pp"),
        arg("--cp", p.cp, "parallelism.cp"),
        arg("--ep", p.ep, "parallelism.ep"),
        arg("--etp", p.etp, "parallelism.etp"),
        arg("--global-batch", p.global_batch, "parallelism.global_batch"),
        arg("--micro-batch", p.micro_batch, "parallelism.micro_batch"),
        arg("--schedule", &plan.schedule.name, "schedule.name"),
        arg("--chunks", p.chunks, "parallelism.chunks"),
    ];
    if let Some(g) = plan.schedule.microbatch_group {
        out.push(PlanArg {
            yields_to: STAGE_FLAGS,
            ..arg(
                "--microbatch-group-size-per-virtual-pipeline-stage",
                g,
                "schedule.microbatch_group",
            )
        });
    }
    out.extend([
        arg("--recompute", &p.recompute, "parallelism.recompute"),
        arg(
            "--sequence-parallel",
            on_off(p.sequence_parallel),
            "parallelism.sequence_parallel",
        ),
        arg("--seq-len", m.seq_length, "model.seq_length"),
        arg(
            "--overlap-grad-reduce",
            on_off(p.overlap_grad_reduce),
            "parallelism.overlap_grad_reduce",
        ),
        PlanArg {
            yields_to: &["--zero1"],
            ..arg(
                "--zero",
                if p.zero >= 2 {
                    p.zero
                } else {
                    u8::from(p.zero1)
                },
                "parallelism.zero",
            )
        },
        arg("--dp-replicate", p.dp_replicate, "parallelism.dp_replicate"),
        arg("--stack", &p.stack, "parallelism.stack"),
        PlanArg {
            yields_to: &["--fp8-recipe"],
            ..arg("--precision", &p.precision, "parallelism.precision")
        },
    ]);
    // Always: `--precision fp8` alone is tensorwise on Megatron-Core's stack, delayed on others.
    if p.precision == "fp8" {
        out.push(PlanArg {
            yields_to: &["--precision"],
            ..arg("--fp8-recipe", &p.fp8_recipe, "parallelism.fp8_recipe")
        });
    }
    out.extend([
        arg("--attention", &p.attention, "parallelism.attention"),
        arg(
            "--tp-comm-overlap",
            on_off(p.tp_comm_overlap),
            "parallelism.tp_comm_overlap",
        ),
        arg(
            "--overlap-param-gather",
            on_off(p.overlap_param_gather),
            "parallelism.overlap_param_gather",
        ),
        arg("--cp-comm", &p.cp_comm, "parallelism.cp_comm"),
        arg(
            "--attention-kernel",
            &p.attention_kernel,
            "parallelism.attention_kernel",
        ),
        arg(
            "--use-transformer-engine-op-fuser",
            on_off(p.use_transformer_engine_op_fuser),
            "parallelism.use_transformer_engine_op_fuser",
        ),
        arg(
            "--activation-func-fp8-input-store",
            on_off(p.activation_func_fp8_input_store),
            "parallelism.activation_func_fp8_input_store",
        ),
        arg(
            "--moe-dispatcher",
            &p.moe_dispatcher,
            "parallelism.moe_dispatcher",
        ),
    ]);
    if let Some(c) = p.moe_expert_capacity_factor {
        out.push(arg(
            "--moe-expert-capacity-factor",
            c,
            "parallelism.moe_expert_capacity_factor",
        ));
    }
    if p.moe_pad_expert_input_to_capacity {
        out.push(PlanArg {
            flag: "--moe-pad-expert-input-to-capacity",
            value: None,
            field: "parallelism.moe_pad_expert_input_to_capacity",
            yields_to: &["--moe-expert-capacity-factor"],
        });
    }
    out.push(arg(
        "--cuda-graph-impl",
        &p.cuda_graph_impl,
        "parallelism.cuda_graph_impl",
    ));
    if !p.cuda_graph_modules.is_empty() {
        out.push(PlanArg {
            yields_to: &["--cuda-graph-scope"],
            ..arg(
                "--cuda-graph-modules",
                p.cuda_graph_modules.join(","),
                "parallelism.cuda_graph_modules",
            )
        });
    }
    out.extend([
        arg(
            "--defer-embedding-wgrad-compute",
            on_off(p.defer_embedding_wgrad_compute),
            "parallelism.defer_embedding_wgrad_compute",
        ),
        arg(
            "--wgrad-deferral-limit",
            p.wgrad_deferral_limit,
            "parallelism.wgrad_deferral_limit",
        ),
        arg(
            "--cross-entropy-loss-fusion",
            on_off(p.cross_entropy_fusion != "off"),
            "parallelism.cross_entropy_fusion",
        ),
    ]);
    if p.cross_entropy_fusion != "off" {
        out.push(arg(
            "--cross-entropy-fusion-impl",
            &p.cross_entropy_fusion,
            "parallelism.cross_entropy_fusion",
        ));
    }
    out.push(PlanArg {
        yields_to: &["--precision", "--fp8-recipe", "--stack"],
        ..arg(
            "--fp8-param-gather",
            on_off(p.fp8_param_gather),
            "parallelism.fp8_param_gather",
        )
    });
    if p.cpu_offloading_num_layers > 0 {
        out.push(PlanArg {
            yields_to: &["--pp", "--chunks", "--recompute", "--model"],
            ..arg(
                "--cpu-offloading-num-layers",
                p.cpu_offloading_num_layers,
                "parallelism.cpu_offloading_num_layers",
            )
        });
    }
    out.extend([
        arg(
            "--use-precision-aware-optimizer",
            on_off(p.use_precision_aware_optimizer),
            "parallelism.use_precision_aware_optimizer",
        ),
        arg(
            "--main-params-dtype",
            &p.main_params_dtype,
            "parallelism.main_params_dtype",
        ),
        arg(
            "--exp-avg-dtype",
            &p.exp_avg_dtype,
            "parallelism.exp_avg_dtype",
        ),
        arg(
            "--exp-avg-sq-dtype",
            &p.exp_avg_sq_dtype,
            "parallelism.exp_avg_sq_dtype",
        ),
    ]);
    out.extend(recorded_switches(p));
    let counts: Vec<u32> = plan.stages.iter().map(|s| s.num_layers).collect();
    let even = counts == even_split(m.num_layers, counts.len() as u32);
    let mtp_elsewhere = plan.mtp_stage().is_some_and(|s| s + 1 != plan.stages.len());
    if !even || mtp_elsewhere {
        out.push(PlanArg {
            yields_to: STAGE_FLAGS,
            ..arg("--pipeline-layout", megatron_layout(plan), "stages")
        });
    }
    out
}

/// The switches `parallelism` records only where they differ from their defaults
/// ([`crate::cost::switches::RecordedSwitches`], `shared_gpu`, `profile`), as flags. The
/// stack-dependent ones give way to a `--stack` typed on top, which brings its own defaults.
fn recorded_switches(p: &crate::plan::plan_file::Parallelism) -> Vec<PlanArg> {
    let stack_dependent = |a: PlanArg| PlanArg {
        yields_to: &["--stack"],
        ..a
    };
    let switch = |flag: &'static str, field: &'static str| PlanArg {
        flag,
        value: None,
        field,
        yields_to: &[],
    };
    let mut out = Vec::new();
    if let Some(on) = p.overlap_p2p_comm {
        out.push(stack_dependent(arg(
            "--overlap-p2p-comm",
            on_off(on),
            "parallelism.overlap_p2p_comm",
        )));
    }
    if let Some(on) = p.gradient_accumulation_fusion {
        out.push(stack_dependent(arg(
            "--gradient-accumulation-fusion",
            on_off(on),
            "parallelism.gradient_accumulation_fusion",
        )));
    }
    if let Some(d) = &p.grad_reduce_dtype {
        out.push(stack_dependent(arg(
            "--grad-reduce-dtype",
            d,
            "parallelism.grad_reduce_dtype",
        )));
    }
    if let Some(on) = p.fsdp_copies {
        out.push(stack_dependent(arg(
            "--fsdp-copies",
            on_off(on),
            "parallelism.fsdp_copies",
        )));
    }
    if !p.reshard_after_forward {
        out.push(arg(
            "--reshard-after-forward",
            "off",
            "parallelism.reshard_after_forward",
        ));
    }
    if !crate::cost::switches::is_default_moe_imbalance(&p.moe_imbalance) {
        out.push(arg(
            "--moe-imbalance",
            p.moe_imbalance,
            "parallelism.moe_imbalance",
        ));
    }
    if p.moe_comm_overlap {
        out.push(arg(
            "--moe-comm-overlap",
            "on",
            "parallelism.moe_comm_overlap",
        ));
    }
    if let Some(ms) = p.moe_layer_host_ms {
        out.push(stack_dependent(arg(
            "--moe-layer-host-ms",
            ms,
            "parallelism.moe_layer_host_ms",
        )));
    }
    if p.no_scatter_gather {
        out.push(switch(
            "--no-scatter-gather",
            "parallelism.no_scatter_gather",
        ));
    }
    if let Some(path) = &p.profile {
        out.push(arg("--profile", path, "parallelism.profile"));
    }
    if p.shared_gpu {
        out.push(switch("--shared-gpu", "parallelism.shared_gpu"));
    }
    out
}
