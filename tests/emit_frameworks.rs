//! The framework targets of `pplan emit` against the frameworks' own argument lists, and read
//! back: every Megatron-LM flag emitted is one of Megatron-LM's (`tests/data/megatron_args.txt`,
//! with the upstream commit), every torchtitan key one of torchtitan's (main and 0.2.x, each
//! with its commit), and the emitted Megatron-LM arguments and torchtitan config read back give
//! the plan they came from (for Llama 3 8B: the parameter count and layout `predict` reported).

mod common;
use common::pplan;
use pplan::inputs::model::Model;
use pplan::plan::emit::{emit, Target};
use pplan::plan::megatron_args::parse_megatron_args;
use pplan::plan::plan_file::{
    stages_from_counts, Parallelism, Plan, PlanModel, PlanSchedule, PLAN_FORMAT, PLAN_VERSION,
};
use pplan::plan::predict::PipelineSplit;
use pplan::schedule::generators::{generate, GenParams, ScheduleName};
use std::collections::BTreeSet;
use std::path::PathBuf;

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pplan-emitfw-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// Non-comment lines of a data file.
fn data_set(file: &str) -> BTreeSet<String> {
    let path = format!("{}/tests/data/{file}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(
        text.lines().take(3).any(|l| l.contains("commit")),
        "{file} must name its upstream commit"
    );
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(str::to_string)
        .collect()
}

/// A plan of `model` with schedule `name` on p devices, v chunks, m micro-batches, layers split
/// by `counts` (or evenly), and the stack switched by `variant` so that every flag appears.
fn plan(
    model: &Model,
    name: ScheduleName,
    p: u32,
    v: u32,
    m: u32,
    counts: Option<&[u32]>,
    variant: usize,
) -> Plan {
    let sch = generate(name, GenParams::new(p, m).chunks(v)).unwrap();
    let counts = counts
        .map(<[u32]>::to_vec)
        .unwrap_or_else(|| pplan::inputs::profile::even_split(model.num_layers, p * v));
    let dp = 2;
    // Context parallelism in half the variants, with each of the two exchanges.
    let (cp, cp_comm) = match variant % 4 {
        1 => (2, "p2p"),
        2 => (4, "all-gather"),
        _ => (1, "p2p"),
    };
    let (recompute, precision, attention) = match variant % 4 {
        0 => ("none", "bf16", "unfused"),
        1 => ("selective", "fp8", "flash"),
        2 => ("full", "mxfp8", "flash"),
        _ => ("full", "nvfp4", "unfused"),
    };
    Plan {
        format: PLAN_FORMAT.into(),
        version: PLAN_VERSION,
        model: PlanModel::from_model(model),
        hardware: "h100-80gb".into(),
        parallelism: Parallelism {
            gpus: 2 * cp * p as u64 * dp,
            tp: 2,
            pp: p as u64,
            dp,
            cp,
            cp_comm: cp_comm.into(),
            ep: 1,
            etp: 1,
            micro_batch: 2,
            global_batch: 2 * m as u64 * dp,
            chunks: v as u64,
            recompute: recompute.into(),
            sequence_parallel: variant % 2 == 1,
            zero1: variant % 3 != 0,
            // Every third variant is FSDP (ZeRO-3), with two HSDP replicas where d allows.
            zero: if variant % 3 == 2 { 3 } else { 0 },
            dp_replicate: if variant % 3 == 2 && dp % 2 == 0 {
                2
            } else {
                1
            },
            precision: precision.into(),
            // FP8 plans through the three recipes of FP8 tensor cores.
            fp8_recipe: if precision == "fp8" {
                ["delayed", "tensorwise", "blockwise"][(p * v + m) as usize % 3]
            } else {
                "delayed"
            }
            .into(),
            attention: attention.into(),
            stack: "megatron-2021".into(),
            tp_comm_overlap: variant % 2 == 1,
            overlap_grad_reduce: variant > 0,
            overlap_param_gather: variant % 3 == 1,
            defer_embedding_wgrad_compute: variant % 2 == 0,
            wgrad_deferral_limit: if variant == 2 { 22 } else { 0 },
            cross_entropy_fusion: ["off", "native", "te"][variant % 3].into(),
            // Megatron-Core's precision-aware optimizer in two variants, with FP8 and BF16
            // moments and an fp16 master copy in one.
            use_precision_aware_optimizer: variant % 4 == 1 || variant % 4 == 2,
            main_params_dtype: if variant % 4 == 2 { "fp16" } else { "fp32" }.into(),
            exp_avg_dtype: match variant % 4 {
                1 => "bf16",
                2 => "fp8",
                _ => "fp32",
            }
            .into(),
            exp_avg_sq_dtype: if variant % 4 == 1 { "bf16" } else { "fp32" }.into(),
            // The dispatcher, capacity and CUDA graphs: tests/cli_recipe_flags.rs.
            ..Parallelism::stack_defaults()
        },
        dtype: if variant == 3 { "f32" } else { "bf16" }.into(),
        stages: stages_from_counts(&counts, name.placement(), p),
        schedule: PlanSchedule::from_schedule(name.as_str(), &sch),
        predicted: None,
    }
}

/// Plans over the model families, schedules, layouts and stack variants.
fn plans() -> Vec<Plan> {
    let mut out = Vec::new();
    for (i, model) in ["llama3-8b", "gpt-1.7b", "llama3-70b"].iter().enumerate() {
        let model = Model::preset(model).unwrap();
        for variant in 0..4 {
            out.push(plan(
                &model,
                ScheduleName::OneFOneB,
                4,
                1,
                8,
                None,
                variant + i,
            ));
            out.push(plan(
                &model,
                ScheduleName::Interleaved1F1B,
                2,
                2,
                4,
                None,
                variant,
            ));
            out.push(plan(&model, ScheduleName::ZbV, 2, 2, 4, None, variant));
            out.push(plan(&model, ScheduleName::ZbH1, 4, 1, 8, None, variant));
        }
        let l = model.num_layers;
        // A split no Megatron-Core rule gives (the layout string), and splits two rules give:
        // the first and last ranks' counts (interleaved too), the embedding and the loss
        // counted as layers.
        out.push(plan(
            &model,
            ScheduleName::OneFOneB,
            4,
            1,
            8,
            Some(&[l / 4 - 1, l / 4 + 2, l / 4, l / 4 - 1]),
            1,
        ));
        let ends = PipelineSplit {
            first: Some(l / 4 - 2),
            last: Some(l / 4 - 2),
            ..PipelineSplit::default()
        };
        for v in [1, 2] {
            let counts = ends.stage_layers(l, 4, v, false).unwrap();
            let name = if v == 1 {
                ScheduleName::OneFOneB
            } else {
                ScheduleName::Interleaved1F1B
            };
            out.push(plan(&model, name, 4, v, 8, Some(&counts), 1));
        }
        // The embedding counted: l + 1 layers over the first p that divides them.
        let p = (3..=8).find(|p| (l + 1) % p == 0).unwrap();
        let embedding = PipelineSplit {
            embedding: true,
            ..PipelineSplit::default()
        };
        let counts = embedding.stage_layers(l, p, 1, false).unwrap();
        out.push(plan(
            &model,
            ScheduleName::OneFOneB,
            p,
            1,
            8,
            Some(&counts),
            0,
        ));
    }
    // Both counted (as Megatron-MoE-ModelZoo's Qwen3 runs): 30 + 2 layers over 4 x 2 stages.
    let mut model = Model::preset("gpt-1.7b").unwrap();
    model.num_layers = 30;
    let both = PipelineSplit {
        embedding: true,
        loss: true,
        ..PipelineSplit::default()
    };
    let counts = both.stage_layers(30, 4, 2, false).unwrap();
    assert_eq!(counts, [3, 4, 4, 4, 4, 4, 4, 3]);
    out.push(plan(
        &model,
        ScheduleName::Interleaved1F1B,
        4,
        2,
        8,
        Some(&counts),
        2,
    ));
    out.push(grouped_plan());
    out
}

/// Interleaving with a micro-batch count p does not divide: 10 micro-batches on 4 ranks in
/// Megatron-Core's groups of 5.
fn grouped_plan() -> Plan {
    let model = Model::preset("llama3-8b").unwrap();
    let mut p = plan(&model, ScheduleName::Interleaved1F1B, 4, 2, 10, None, 1);
    let sch = generate(
        ScheduleName::Interleaved1F1B,
        GenParams::new(4, 10).chunks(2).group(Some(5)),
    )
    .unwrap();
    p.schedule = PlanSchedule {
        microbatch_group: Some(5),
        ..PlanSchedule::from_schedule("interleaved-1f1b", &sch)
    };
    p
}

/// The micro-batch group survives the plan file, reaches Megatron-LM as its flag, and the
/// PyTorch CSV (the only way torchtitan runs this order) replays the plan's action lists
/// exactly.
#[test]
fn microbatch_group_is_emitted_and_the_csv_replays_it() {
    let p = grouped_plan();
    let back = Plan::from_json(&p.to_json(), "grouped.json").unwrap();
    assert_eq!(back.schedule.microbatch_group, Some(5));
    let out = emit(&p, Target::Megatron, None).unwrap();
    assert!(
        out.text
            .contains("--microbatch-group-size-per-virtual-pipeline-stage 5"),
        "{}",
        out.text
    );
    let csv = emit(&p, Target::Csv, None).unwrap().text;
    let replayed = pplan::schedule::csv::parse(&csv, pplan::schedule::ir::Placement::Loop).unwrap();
    assert_eq!(replayed.devices, p.schedule_ir().unwrap().devices);
    // No PyTorch class runs this order: torchtitan gets the CSV.
    let tt = emit(&p, Target::Torchtitan, Some("g.csv")).unwrap();
    assert!(
        tt.text.contains("pipeline_parallel_schedule_csv"),
        "{}",
        tt.text
    );
    // A group Megatron-Core refuses is refused in the plan file, naming the field.
    let mut bad = p.clone();
    bad.schedule.microbatch_group = Some(3);
    let e = Plan::from_json(&bad.to_json(), "bad.json")
        .unwrap_err()
        .to_string();
    assert!(e.contains("schedule.microbatch_group"), "{e}");
    assert!(
        e.contains("--microbatch-group-size-per-virtual-pipeline-stage 5"),
        "{e}"
    );
}

/// The flags of an emitted Megatron-LM file (the lines of its array).
fn megatron_flags(text: &str) -> Vec<String> {
    let body = text.split_once("MEGATRON_ARGS=(\n").expect("the array").1;
    assert!(body.ends_with(")\n"), "{text}");
    body.lines()
        .filter(|l| *l != ")")
        .map(|l| {
            assert!(l.starts_with("  --"), "not a flag line: {l:?}");
            l.split_whitespace().next().unwrap().to_string()
        })
        .collect()
}

#[test]
fn every_megatron_flag_is_in_megatron_lms_argument_list() {
    let valid = data_set("megatron_args.txt");
    assert!(valid.len() > 500, "{} flags", valid.len());
    let mut seen = BTreeSet::new();
    for p in plans() {
        let out = emit(&p, Target::Megatron, None).unwrap();
        for f in megatron_flags(&out.text) {
            assert!(
                valid.contains(&f),
                "{f} is not a Megatron-LM flag (plan {} {})",
                p.model.name,
                p.schedule.name
            );
            seen.insert(f);
        }
    }
    // The grid reaches every flag the emitter can write.
    for f in [
        "--pipeline-model-parallel-layout",
        "--num-layers-per-virtual-pipeline-stage",
        "--group-query-attention",
        "--rotary-base",
        "--normalization",
        "--disable-bias-linear",
        "--untie-embeddings-and-output-weights",
        "--padded-vocab-size",
        "--recompute-num-layers",
        "--fp8-amax-compute-algo",
        "--fp8-recipe",
        "--fp4-recipe",
        "--attention-backend",
        "--tp-comm-overlap",
        "--overlap-param-gather",
        "--use-distributed-optimizer",
        "--context-parallel-size",
        "--cp-comm-type",
        "--defer-embedding-wgrad-compute",
        "--wgrad-deferral-limit",
        "--cross-entropy-loss-fusion",
        "--cross-entropy-fusion-impl",
        "--account-for-embedding-in-pipeline-split",
        "--account-for-loss-in-pipeline-split",
        "--decoder-first-pipeline-num-layers",
        "--decoder-last-pipeline-num-layers",
        "--num-virtual-stages-per-pipeline-rank",
    ] {
        assert!(seen.contains(f), "the grid never emits {f}");
    }
    // ... and every FP8 recipe.
    let recipes: BTreeSet<String> = plans()
        .into_iter()
        .filter(|p| p.parallelism.precision == "fp8")
        .map(|p| p.parallelism.fp8_recipe)
        .collect();
    assert_eq!(recipes.len(), 3, "{recipes:?}");
}

/// Emit `plan` for Megatron-LM, read it back, and compare field by field.
fn megatron_round_trip(p: &Plan) {
    let out = emit(p, Target::Megatron, None).unwrap();
    let back = parse_megatron_args(&out.text, "megatron.sh")
        .unwrap_or_else(|e| panic!("{e}\n{}", out.text));
    let par = &p.parallelism;
    let counts: Vec<u32> = p.stages.iter().map(|s| s.num_layers).collect();
    assert_eq!(back.stage_layers, counts, "{}", out.text);
    assert_eq!(
        back.microbatch_group,
        p.schedule.microbatch_group.map(u64::from)
    );
    assert_eq!(
        (back.tp, back.pp, back.chunks),
        (par.tp, par.pp, par.chunks)
    );
    assert_eq!(
        (back.cp, back.cp_comm.as_str()),
        (par.cp, par.cp_comm.as_str())
    );
    assert_eq!(
        (back.micro_batch, back.global_batch),
        (par.micro_batch, par.global_batch)
    );
    assert_eq!(back.recompute, par.recompute);
    assert_eq!(back.sequence_parallel, par.sequence_parallel);
    assert_eq!(back.zero1, par.zero1);
    assert_eq!(back.zero, par.zero.max(u8::from(par.zero1)));
    assert_eq!(back.dp_replicate, par.dp_replicate);
    assert_eq!(back.precision, par.precision);
    assert_eq!(back.fp8_recipe, par.fp8_recipe, "{}", out.text);
    assert_eq!(back.attention, par.attention);
    assert_eq!(back.tp_comm_overlap, par.tp_comm_overlap);
    assert_eq!(back.overlap_grad_reduce, par.overlap_grad_reduce);
    assert_eq!(back.overlap_param_gather, par.overlap_param_gather);
    assert_eq!(
        back.defer_embedding_wgrad_compute,
        par.defer_embedding_wgrad_compute
    );
    assert_eq!(back.wgrad_deferral_limit, par.wgrad_deferral_limit);
    assert_eq!(back.cross_entropy_fusion, par.cross_entropy_fusion);
    assert_eq!(
        back.use_precision_aware_optimizer,
        par.use_precision_aware_optimizer
    );
    assert_eq!(
        (
            &back.main_params_dtype,
            &back.exp_avg_dtype,
            &back.exp_avg_sq_dtype
        ),
        (
            &par.main_params_dtype,
            &par.exp_avg_dtype,
            &par.exp_avg_sq_dtype
        )
    );
    assert_eq!(back.bf16, p.dtype == "bf16");
    let mut model = PlanModel::from_model(&back.model);
    model.name = p.model.name.clone();
    assert_eq!(model, p.model);
    // Read but not part of pplan's model: the positions' table size (the sequence length).
    let expected: &[&str] = &["--max-position-embeddings"];
    assert_eq!(back.ignored, expected);
}

#[test]
fn megatron_arguments_read_back_give_the_plan() {
    for p in plans() {
        // V placement is not expressible (a note); the rest must come back.
        if p.schedule.placement == "loop" {
            megatron_round_trip(&p);
        }
    }
}

/// The acceptance case: Llama 3 8B predicted, emitted for Megatron-LM, read back: the same
/// parameter count and layout as `predict` reported.
#[test]
fn llama3_8b_megatron_round_trip_matches_the_prediction() {
    for extra in [
        &["--schedule", "1f1b"][..],
        &["--schedule", "interleaved-1f1b", "--chunks", "2"][..],
        &["--partition", "balanced"][..],
        // Context parallelism: the plan records cp and the exchange, and both come back.
        &[
            "--cp",
            "2",
            "--cp-comm",
            "all-gather",
            "--attention",
            "flash",
        ][..],
    ] {
        let plan_path = tmp("llama3-8b.json");
        let mut args = vec![
            "predict",
            "--model",
            "llama3-8b",
            "--hardware",
            "h100-80gb",
            "--gpus",
            "64",
            "--tp",
            "4",
            "--pp",
            "4",
            "--global-batch",
            "128",
            "--micro-batch",
            "1",
            "--sequence-parallel",
            "on",
            "--overlap-grad-reduce",
            "on",
            "--format",
            "json",
            "--output",
            plan_path.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let (code, out, err) = pplan(&args);
        assert_eq!(code, 0, "{err}");
        let predicted: serde_json::Value = serde_json::from_str(&out).unwrap();
        let plan = Plan::from_json(&std::fs::read_to_string(&plan_path).unwrap(), "plan").unwrap();
        let args_path = tmp("llama3-8b.sh");
        let (code, _, err) = pplan(&[
            "emit",
            "--plan",
            plan_path.to_str().unwrap(),
            "--target",
            "megatron",
            "--output",
            args_path.to_str().unwrap(),
        ]);
        assert_eq!(code, 0, "{err}");
        let text = std::fs::read_to_string(&args_path).unwrap();
        let back = parse_megatron_args(&text, args_path.to_str().unwrap()).unwrap();
        assert_eq!(
            back.model.total_params(),
            predicted["params"].as_u64().unwrap(),
            "{text}"
        );
        assert_eq!(back.model.total_params(), 8_031_436_800);
        let layout: Vec<u32> = plan.stages.iter().map(|s| s.num_layers).collect();
        assert_eq!(back.stage_layers, layout);
        assert_eq!(
            back.tp * back.cp * back.pp * plan.parallelism.dp,
            plan.parallelism.gpus
        );
        assert_eq!(back.cp, predicted["cp"].as_u64().unwrap());
        if extra.contains(&"--cp") {
            assert_eq!(
                (back.cp, back.cp_comm.as_str()),
                (2, "all-gather"),
                "{text}"
            );
            assert!(text.contains("  --context-parallel-size 2\n"), "{text}");
            assert!(text.contains("  --cp-comm-type allgather\n"), "{text}");
        } else {
            assert!(!text.contains("--context-parallel-size"), "{text}");
        }
        megatron_round_trip(&plan);
    }
}

#[test]
fn megatron_layout_value_is_quoted_for_the_shell() {
    let model = Model::preset("llama3-8b").unwrap();
    let p = plan(
        &model,
        ScheduleName::OneFOneB,
        4,
        1,
        8,
        Some(&[7, 9, 10, 6]),
        0,
    );
    let out = emit(&p, Target::Megatron, None).unwrap();
    assert!(
        out.text
            .contains("  --pipeline-model-parallel-layout 'Et*7|t*9|t*10|t*6L'\n"),
        "{}",
        out.text
    );
}

/// The keys of an emitted current-torchtitan config, in the form of torchtitan_keys.txt.
fn torchtitan_keys(text: &str) -> Vec<String> {
    let mut keys = Vec::new();
    let mut module = None;
    let mut in_parallelism = false;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let l = line.trim();
        if let Some(rest) = l.strip_prefix("from torchtitan.models.") {
            let (path, names) = rest.split_once(" import ").unwrap();
            match path.split_once('.') {
                Some((m, "config_registry")) => keys.push(format!("registry:{m}:{names}")),
                None => module = Some(path.to_string()),
                Some(_) => panic!("unexpected import {l}"),
            }
        } else if let Some(names) =
            l.strip_prefix("from torchtitan.distributed.activation_checkpoint import ")
        {
            keys.extend(names.split(", ").map(|n| format!("ac:{n}")));
        } else if let Some(rest) = l.strip_prefix("config.model_spec = model_registry(\"") {
            let flavor = rest.split('"').next().unwrap();
            keys.push(format!("flavor:{}:{flavor}", module.clone().unwrap()));
            keys.push("Trainer.Config.model_spec".into());
        } else if l == "config.parallelism = ParallelismConfig(" {
            keys.push("Trainer.Config.parallelism".into());
            in_parallelism = true;
        } else if in_parallelism && l == ")" {
            in_parallelism = false;
        } else if in_parallelism {
            if let Some((k, _)) = l.split_once('=') {
                if !k.starts_with('[') && !k.starts_with('"') {
                    keys.push(format!("ParallelismConfig.{k}"));
                }
            }
        } else if let Some(rest) = l.strip_prefix("config.training.") {
            keys.push(format!(
                "TrainingConfig.{}",
                rest.split(' ').next().unwrap()
            ));
        } else if let Some(rest) = l.strip_prefix("config.") {
            if let Some((k, _)) = rest.split_once(" = ") {
                keys.push(format!("Trainer.Config.{k}"));
            }
        }
    }
    keys
}

#[test]
fn every_torchtitan_key_is_in_torchtitans() {
    let main = data_set("torchtitan_keys.txt");
    let v02 = data_set("torchtitan_v0.2_keys.txt");
    let csv = tmp("s.csv");
    let mut seen = BTreeSet::new();
    for p in plans() {
        let out = emit(&p, Target::Torchtitan, Some(csv.to_str().unwrap())).unwrap();
        for k in torchtitan_keys(&out.text) {
            assert!(main.contains(&k), "{k} is not torchtitan's:\n{}", out.text);
            seen.insert(k);
        }
        let out = emit(&p, Target::TorchtitanV02, Some(csv.to_str().unwrap())).unwrap();
        let mut section = String::new();
        for line in out
            .text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
        {
            if let Some(s) = line.strip_prefix('[').and_then(|s| s.strip_suffix(']')) {
                section = s.to_string();
                continue;
            }
            let (k, v) = line.split_once(" = ").unwrap();
            let key = format!("{section}.{k}");
            assert!(v02.contains(&key), "{key} is not torchtitan 0.2's");
            if key == "model.flavor" {
                let flavor = format!("flavor:llama3:{}", v.trim_matches('"'));
                assert!(v02.contains(&flavor), "{flavor}");
            }
            seen.insert(key);
        }
    }
    for k in [
        "registry:llama3:llama3_8b",
        "registry:llama3:llama3_70b",
        "flavor:llama3:8B",
        "ac:FullAC",
        "ac:SelectiveAC",
        "ParallelismConfig.num_pp_microbatches",
        "ParallelismConfig.pipeline_parallel_schedule_csv",
        "ParallelismConfig.module_fqns_per_model_part",
        "TrainingConfig.max_context_length",
        "Trainer.Config.activation_checkpoint",
        "model.flavor",
        "parallelism.pipeline_parallel_microbatch_size",
        "ParallelismConfig.context_parallel_degree",
        "parallelism.context_parallel_degree",
        "parallelism.context_parallel_rotate_method",
    ] {
        assert!(seen.contains(k), "the grid never emits {k}");
    }
}

/// The current-torchtitan config read back (token budgets, degrees, stage modules) gives the
/// plan's batch sizes, layout and stage boundaries.
#[test]
fn torchtitan_config_read_back_gives_the_plan() {
    let csv = tmp("rt.csv");
    for p in plans() {
        let out = emit(&p, Target::Torchtitan, Some(csv.to_str().unwrap())).unwrap();
        let num = |key: &str| -> u64 {
            out.text
                .lines()
                .find_map(|l| {
                    let l = l.trim();
                    l.strip_prefix(key)
                        .and_then(|r| r.strip_prefix(" = ").or_else(|| r.strip_prefix('=')))
                })
                .unwrap_or_else(|| panic!("no {key} in\n{}", out.text))
                .trim_end_matches(',')
                .parse()
                .unwrap()
        };
        let par = &p.parallelism;
        let seq = num("config.training.max_context_length");
        assert_eq!(seq, p.model.seq_length);
        assert_eq!(
            num("config.training.num_tokens_per_microbatch_per_dp_rank") / seq,
            par.micro_batch
        );
        assert_eq!(
            num("config.training.num_tokens_per_train_step") / seq,
            par.global_batch
        );
        assert_eq!(
            num("data_parallel_replicate_degree") * num("data_parallel_shard_degree"),
            par.dp
        );
        assert_eq!(num("tensor_parallel_degree"), par.tp);
        assert_eq!(num("pipeline_parallel_degree"), par.pp);
        if par.cp > 1 {
            assert_eq!(num("context_parallel_degree"), par.cp);
        } else {
            assert!(
                !out.text.contains("context_parallel_degree"),
                "{}",
                out.text
            );
        }
        assert_eq!(
            num("num_pp_microbatches"),
            p.schedule.microbatches_per_step as u64
        );
        // Stage modules: one list per stage, its layers in order.
        let start = out.text.find("module_fqns_per_model_part=[").unwrap();
        let stages: Vec<u32> = out.text[start..]
            .lines()
            .skip(1)
            .take_while(|l| l.trim() != "],")
            .map(|l| l.matches("\"layers.").count() as u32)
            .collect();
        let counts: Vec<u32> = p.stages.iter().map(|s| s.num_layers).collect();
        assert_eq!(stages, counts, "{}", out.text);
        let flavor_line = out.text.contains("config.model_spec = model_registry(");
        assert_eq!(
            flavor_line, p.model.gated_mlp,
            "llama models get a flavor, GPT ones a refusal:\n{}",
            out.text
        );
        if !flavor_line {
            assert!(out.text.contains("raise NotImplementedError("));
        }
    }
}

/// An ungated model with rotary positions (GPT-NeoX-like) and a gated one with LayerNorm: the
/// plan records what its MLP does not imply, and the emitted arguments read back to it.
#[test]
fn recorded_norms_and_positions_are_emitted_and_read_back() {
    let mut neox = Model::preset("gpt-1.7b").unwrap();
    neox.rotary = true;
    let mut gated = Model::preset("llama3-8b").unwrap();
    gated.rms_norm = false;
    for m in [neox, gated] {
        let p = plan(&m, ScheduleName::OneFOneB, 2, 1, 4, None, 0);
        let out = emit(&p, Target::Megatron, None).unwrap();
        let (norm, pos) = (
            if m.rms_norm { "RMSNorm" } else { "LayerNorm" },
            if m.rotary { "rope" } else { "learned_absolute" },
        );
        assert!(
            out.text.contains(&format!("--normalization {norm}")),
            "{}",
            out.text
        );
        assert!(
            out.text
                .contains(&format!("--position-embedding-type {pos}")),
            "{}",
            out.text
        );
        let back = parse_megatron_args(&out.text, "megatron.sh").unwrap();
        assert_eq!(
            (back.model.rms_norm, back.model.rotary),
            (m.rms_norm, m.rotary)
        );
        megatron_round_trip(&p);
    }
}

/// Megatron-LM arguments with the cross-entropy flags read back as Megatron-Core runs them:
/// the implementation alone (no fusion) is ignored, an unknown one is refused naming the flag.
#[test]
fn cross_entropy_flags_read_back_as_megatron_runs_them() {
    let m = Model::preset("llama3-8b").unwrap();
    let p = plan(&m, ScheduleName::OneFOneB, 2, 1, 4, None, 0);
    let text = emit(&p, Target::Megatron, None).unwrap().text;
    assert!(!text.contains("--cross-entropy"), "{text}");
    for (extra, want) in [
        ("--cross-entropy-fusion-impl te", Ok("off")),
        ("--cross-entropy-loss-fusion", Ok("native")),
        (
            "--cross-entropy-loss-fusion --cross-entropy-fusion-impl te",
            Ok("te"),
        ),
        (
            "--cross-entropy-loss-fusion --cross-entropy-fusion-impl liger",
            Err("--cross-entropy-fusion-impl"),
        ),
    ] {
        let got = parse_megatron_args(&format!("{text}\n{extra}\n"), "megatron.sh");
        match (got, want) {
            (Ok(back), Ok(w)) => assert_eq!(back.cross_entropy_fusion, w, "{extra}"),
            (Err(e), Err(w)) => {
                let e = e.to_string();
                assert!(e.contains(w) && e.contains("native or te"), "{e}");
            }
            (got, _) => panic!("{extra}: {:?}", got.map(|b| b.cross_entropy_fusion)),
        }
    }
}
