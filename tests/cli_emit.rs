//! `pplan emit`: every target from plans built here with the plan types and the generators;
//! the Megatron-LM output byte for byte; bad plans and flags exit 2 naming the file and field.

mod common;
use common::pplan;
use pplan::inputs::profile::even_split;
use pplan::plan::plan_file::{
    stages_from_counts, Parallelism, Plan, PlanModel, PlanSchedule, PLAN_FORMAT, PLAN_VERSION,
};
use pplan::schedule::generators::{generate, GenParams, ScheduleName};
use pplan::schedule::ir::Placement;
use std::path::PathBuf;

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pplan-emit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn model() -> PlanModel {
    PlanModel {
        name: "tiny-gqa".into(),
        num_layers: 8,
        hidden_size: 512,
        num_attention_heads: 8,
        num_query_groups: 2,
        ffn_hidden_size: 1536,
        seq_length: 1024,
        vocab_size: 32000,
        gated_mlp: true,
        untie_embeddings_and_output_weights: false,
        dropout: false,
        kv_channels: None,
        moe: None,
        mla: None,
        normalization: None,
        position_embedding_type: None,
        mtp_num_layers: 0,
        arch: Default::default(),
        sliding_window: None,
    }
}

/// A plan for schedule `name` on p devices with v chunks, m micro-batches per step, the
/// layers split by `counts` (or evenly).
fn plan(name: ScheduleName, p: u32, v: u32, m: u32, counts: Option<&[u32]>) -> Plan {
    let sch = generate(name, GenParams::new(p, m).chunks(v)).unwrap();
    let model = model();
    let counts = counts
        .map(<[u32]>::to_vec)
        .unwrap_or_else(|| even_split(model.num_layers, p * v));
    let dp = 2;
    Plan {
        format: PLAN_FORMAT.into(),
        version: PLAN_VERSION,
        model,
        hardware: "h100-80gb".into(),
        parallelism: Parallelism {
            gpus: 2 * p as u64 * dp,
            tp: 2,
            pp: p as u64,
            dp,
            micro_batch: 2,
            global_batch: 2 * m as u64 * dp,
            chunks: v as u64,
            recompute: "full".into(),
            sequence_parallel: true,
            zero1: true,
            zero: 0,
            dp_replicate: 1,
            ..Parallelism::stack_defaults()
        },
        dtype: "bf16".into(),
        stages: stages_from_counts(&counts, name.placement(), p),
        schedule: PlanSchedule::from_schedule(name.as_str(), &sch),
        predicted: None,
    }
}

fn write_plan(file: &str, plan: &Plan) -> String {
    let path = tmp(file);
    std::fs::write(&path, plan.to_json()).unwrap();
    path.display().to_string()
}

fn emit(plan_path: &str, target: &str) -> (i32, String, String) {
    pplan(&["emit", "--plan", plan_path, "--target", target])
}

#[test]
fn megatron_interleaved_exact_output() {
    let p = plan(ScheduleName::Interleaved1F1B, 2, 2, 4, None);
    let path = write_plan("interleaved.json", &p);
    let (code, out, err) = emit(&path, "megatron");
    assert_eq!(code, 0, "{err}");
    let expected = "\
# Megatron-LM arguments for model 'tiny-gqa' with schedule 'interleaved-1f1b' (pplan emit --target megatron).
# Flags as in Megatron-LM megatron/training/arguments.py at commit d98e8a64ddf3.
# Launch on 8 GPUs: tp 2 x pp 2 x dp 2; Megatron-LM derives dp from the world size.
# Vocabulary: 32000 (--padded-vocab-size); the tokenizer's must not be larger. Add data, tokenizer and optimizer flags.
# Use: source THIS_FILE && torchrun ... pretrain_gpt.py \"${MEGATRON_ARGS[@]}\" ...
# assumed: a gated MLP is taken as the Llama family unless the plan records otherwise: SwiGLU, no linear biases, RoPE and RMSNorm (pplan's parameter count includes LayerNorm and linear biases this network does not have)
# cannot express exactly: pplan's model 'tiny-gqa' does not record its rotary base (rope_theta): Megatron-LM's default 10000 applies; add --rotary-base
# >>> environment (pplan emit; source this file before launch)
# tp or cp above 1 before Blackwell: validate_args asserts 1 (arguments.py:1477)
export CUDA_DEVICE_MAX_CONNECTIONS=1
# <<< environment
MEGATRON_ARGS=(
  --tensor-model-parallel-size 2
  --pipeline-model-parallel-size 2
  --num-layers-per-virtual-pipeline-stage 2
  --micro-batch-size 2
  --global-batch-size 16
  --num-layers 8
  --hidden-size 512
  --num-attention-heads 8
  --group-query-attention
  --num-query-groups 2
  --ffn-hidden-size 1536
  --seq-length 1024
  --max-position-embeddings 1024
  --position-embedding-type rope
  --normalization RMSNorm
  --swiglu
  --disable-bias-linear
  --hidden-dropout 0
  --attention-dropout 0
  --padded-vocab-size 32000
  --recompute-granularity full
  --recompute-method uniform
  --recompute-num-layers 1
  --sequence-parallel
  --use-distributed-optimizer
  --bf16
)
";
    assert_eq!(out, expected);
    // The one warning: the rotary base, which pplan's model does not record.
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("--rotary-base"), "{err}");
    // Same input, same bytes.
    assert_eq!(emit(&path, "megatron").1, out);
}

#[test]
fn megatron_notes_what_it_cannot_express() {
    // Uneven stages no Megatron-Core split rule gives: a layout string, and a comment saying
    // which version needs it.
    let mut p = plan(ScheduleName::OneFOneB, 4, 1, 8, Some(&[1, 3, 2, 2]));
    p.parallelism.recompute = "selective".into();
    p.dtype = "f32".into();
    let path = write_plan("uneven.json", &p);
    let (code, out, err) = emit(&path, "megatron");
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("  --pipeline-model-parallel-layout 'Et|t*3|t*2|t*2L'\n"),
        "{out}"
    );
    assert!(
        out.contains("  --recompute-granularity selective\n")
            && !out.contains("--recompute-method"),
        "{out}"
    );
    assert!(!out.contains("--bf16"), "{out}");
    assert!(!out.contains("--num-layers-per-virtual-pipeline-stage"));
    assert!(
        out.contains("# cannot express exactly: uneven stages (1, 3, 2, 2)"),
        "{out}"
    );
    assert!(
        err.contains("warning: --target megatron cannot express exactly"),
        "{err}"
    );

    for (name, v, what) in [
        (ScheduleName::ZbH1, 1, "zero-bubble"),
        (ScheduleName::ZbV, 2, "V placement"),
        (ScheduleName::PipeDream, 1, "asynchronous weight updates"),
        (ScheduleName::GPipe, 1, "'gpipe' is not in Megatron-LM core"),
    ] {
        let p = plan(name, 2, v, 4, None);
        let path = write_plan(&format!("{}.json", name.as_str()), &p);
        let (code, out, err) = emit(&path, "megatron");
        assert_eq!(code, 0, "{name}: {err}");
        let comment = out
            .lines()
            .find(|l| l.starts_with("# cannot express exactly:") && l.contains(what));
        assert!(
            comment.is_some(),
            "{name}: no note containing '{what}':\n{out}"
        );
        // Every line between the comments and the array's end is a flag, but the
        // environment block's.
        assert!(out
            .lines()
            .filter(|l| !l.starts_with('#') && *l != "MEGATRON_ARGS=(" && *l != ")")
            .all(|l| l.starts_with("  --") || l.starts_with("export ") || l.starts_with("unset ")));
    }
}

#[test]
fn torchtitan_v02_named_schedule_and_csv_schedule() {
    let p = plan(ScheduleName::ZbV, 2, 2, 4, None);
    let path = write_plan("zbv.json", &p);
    let (code, out, err) = emit(&path, "torchtitan-v0.2");
    assert_eq!(code, 0, "{err}");
    for line in [
        "[training]\n",
        "local_batch_size = 8\n",
        "global_batch_size = 16\n",
        "hf_assets_path = \"./assets/hf/PLACEHOLDER_replace_with_your_model\"\n",
        "dataset = \"PLACEHOLDER_replace_with_your_dataset\"\n",
        "seq_len = 1024\n",
        "mixed_precision_param = \"bfloat16\"\n",
        "[parallelism]\n",
        "data_parallel_replicate_degree = 1\n",
        "data_parallel_shard_degree = 2\n",
        "tensor_parallel_degree = 2\n",
        "pipeline_parallel_degree = 2\n",
        "pipeline_parallel_schedule = \"ZBVZeroBubble\"\n",
        "pipeline_parallel_microbatch_size = 2\n",
        "module_fqns_per_model_part = [[\"tok_embeddings\", \"layers.0\", \"layers.1\"], [\"layers.2\", \"layers.3\"], [\"layers.4\", \"layers.5\"], [\"layers.6\", \"layers.7\", \"norm\", \"output\"]]\n",
        "[activation_checkpoint]\n",
        "mode = \"full\"\n",
    ] {
        assert!(out.contains(line), "missing {line:?} in\n{out}");
    }
    assert!(!out.contains("pipeline_parallel_schedule_csv"), "{out}");

    // ZB-H1 has no PyTorch class with one stage per rank: a CSV next to the TOML.
    let p = plan(ScheduleName::ZbH1, 4, 1, 8, None);
    let path = write_plan("zbh1.json", &p);
    let toml = tmp("zbh1.toml");
    let (code, out, err) = pplan(&[
        "emit",
        "--plan",
        &path,
        "--target",
        "torchtitan-v0.2",
        "--output",
        toml.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.is_empty());
    let text = std::fs::read_to_string(&toml).unwrap();
    let csv_path = tmp("zbh1.schedule.csv");
    assert!(
        text.contains(&format!(
            "pipeline_parallel_schedule_csv = \"{}\"\n",
            csv_path.display()
        )),
        "{text}"
    );
    assert!(text.contains("pipeline_parallel_schedule = \"PipelineScheduleSingle\"\n"));
    let csv = std::fs::read_to_string(&csv_path).unwrap();
    let (_, expected_csv, _) = emit(&path, "csv");
    assert_eq!(csv, expected_csv);
    // Without --output there is nowhere to put the CSV: exit 2 saying so (both versions).
    let (code, _, err) = emit(&path, "torchtitan-v0.2");
    assert_eq!(code, 2);
    assert!(err.contains("--schedule-csv"), "{err}");
    let (code, _, err) = emit(&path, "torchtitan");
    assert_eq!(code, 2);
    assert!(err.contains("--schedule-csv"), "{err}");
}

#[test]
fn executor_and_csv_targets() {
    let p = plan(ScheduleName::OneFOneB, 4, 1, 8, None);
    let path = write_plan("1f1b.json", &p);
    let (code, out, err) = emit(&path, "executor");
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, p.to_json());
    assert_eq!(Plan::from_json(&out, "stdout").unwrap(), p);

    let (code, out, err) = emit(&path, "csv");
    assert_eq!(code, 0, "{err}");
    let sch = generate(ScheduleName::OneFOneB, GenParams::new(4, 8)).unwrap();
    assert_eq!(out, pplan::schedule::csv::write(&sch));
    assert!(out.starts_with("0F0,0F1,0F2,0F3,0B0,"), "{out}");
    assert_eq!(
        pplan::schedule::csv::parse(&out, Placement::Loop)
            .unwrap()
            .devices,
        sch.devices
    );
}

/// Issue 17: `generate` wrote LF and `emit` CRLF for the same schedule. Both write LF now
/// (the CSV reader takes either); `generate --crlf` is the way to PyTorch's CRLF.
#[test]
fn generate_and_emit_csv_have_the_same_lf_line_ends() {
    let p = plan(ScheduleName::OneFOneB, 4, 1, 8, None);
    let path = write_plan("lf.json", &p);
    let (code, emitted, err) = emit(&path, "csv");
    assert_eq!(code, 0, "{err}");
    let (code, generated, err) = pplan(&[
        "generate",
        "--schedule",
        "1f1b",
        "--stages",
        "4",
        "--microbatches",
        "8",
    ]);
    assert_eq!(code, 0, "{err}");
    for (what, text) in [("emit --target csv", &emitted), ("generate", &generated)] {
        assert!(
            !text.contains('\r'),
            "{what} wrote a carriage return: {text:?}"
        );
        assert_eq!(
            text.lines().count(),
            4,
            "{what}: one line per rank: {text:?}"
        );
        assert!(text.ends_with('\n'), "{what}: {text:?}");
    }
    assert_eq!(emitted, generated);
    // The schedule file written beside a torchtitan config is the same text.
    let zb = plan(ScheduleName::ZbH1, 4, 1, 8, None);
    let zb_path = write_plan("lf-zbh1.json", &zb);
    let csv_path = tmp("lf-zbh1.csv");
    let (code, _, err) = pplan(&[
        "emit",
        "--plan",
        &zb_path,
        "--target",
        "torchtitan",
        "--schedule-csv",
        csv_path.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let written = std::fs::read_to_string(&csv_path).unwrap();
    assert!(!written.contains('\r'), "{written:?}");
    assert!(written.starts_with("0F0,"), "{written:?}");
}

#[test]
fn bad_plans_exit_2_naming_file_and_field() {
    let mut p = plan(ScheduleName::OneFOneB, 2, 1, 4, None);
    p.stages[1].first_layer += 1;
    let path = write_plan("bad-stage.json", &p);
    let (code, _, err) = emit(&path, "megatron");
    assert_eq!(code, 2);
    assert!(
        err.contains("bad-stage.json") && err.contains("stages[1].first_layer"),
        "{err}"
    );

    let mut p = plan(ScheduleName::OneFOneB, 2, 1, 4, None);
    p.parallelism.recompute = "sometimes".into();
    let path = write_plan("bad-recompute.json", &p);
    let (code, _, err) = emit(&path, "executor");
    assert_eq!(code, 2);
    // Every recomputation pplan knows is listed as valid, Megatron-Core's modules too.
    assert!(
        err.contains("parallelism.recompute")
            && err.contains("selective-norm-act")
            && err.contains("selective-layer"),
        "{err}"
    );

    let path = write_plan("ok.json", &plan(ScheduleName::OneFOneB, 2, 1, 4, None));
    let (code, _, err) = emit(&path, "deepspeed");
    assert_eq!(code, 2);
    assert!(
        err.contains("--target") && err.contains("torchtitan"),
        "{err}"
    );

    let (code, _, err) = emit("no/such/plan.json", "csv");
    assert_eq!(code, 2);
    assert!(err.contains("no/such/plan.json"), "{err}");

    let garbage = tmp("garbage.json");
    std::fs::write(&garbage, "{\"format\": \"pplan-plan\", \"version\": 7}").unwrap();
    let (code, _, err) = emit(garbage.to_str().unwrap(), "csv");
    assert_eq!(code, 2);
    assert!(err.contains("version 7"), "{err}");
}

/// The stack a prediction assumed travels in the plan and reaches Megatron-LM as its flags;
/// torchtitan says what it does not set; a default stack writes none of the new fields.
#[test]
fn the_predicted_stack_reaches_megatron_flags() {
    let path = tmp("stack-plan.json");
    let (code, _, err) = pplan(&[
        "predict",
        "--model",
        "llama3-70b",
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
        "--chunks",
        "5",
        "--recompute",
        "none",
        "--sequence-parallel",
        "on",
        "--precision",
        "fp8",
        "--attention",
        "flash",
        "--tp-comm-overlap",
        "on",
        "--overlap-grad-reduce",
        "on",
        "--output",
        path.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let text = std::fs::read_to_string(&path).unwrap();
    let written: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(written["parallelism"]["precision"], "fp8");
    assert_eq!(written["parallelism"]["attention"], "flash");
    let (code, out, err) = emit(path.to_str().unwrap(), "megatron");
    assert_eq!(code, 0, "{err}");
    for f in [
        "--fp8-format hybrid",
        "--attention-backend flash",
        "--tp-comm-overlap",
        "--overlap-grad-reduce",
    ] {
        assert!(out.contains(f), "missing {f}:\n{out}");
    }
    let (code, out, err) = emit(path.to_str().unwrap(), "torchtitan");
    assert!(code == 0 || code == 2, "{err}");
    if code == 0 {
        assert!(out.contains("precision 'fp8' is not set here"), "{out}");
    }
    // A default plan carries none of the stack fields.
    let default = write_plan(
        "default-stack.json",
        &plan(ScheduleName::OneFOneB, 2, 1, 4, None),
    );
    let text = std::fs::read_to_string(&default).unwrap();
    let mut value: serde_json::Value = serde_json::from_str(&text).unwrap();
    let par = value["parallelism"].as_object_mut().unwrap();
    for key in [
        "precision",
        "attention",
        "tp_comm_overlap",
        "overlap_grad_reduce",
    ] {
        assert!(!par.contains_key(key), "{key} in a default plan: {text}");
    }
    // A bad value names the field and the valid ones.
    par.insert("precision".into(), "fp6".into());
    let bad_path = tmp("bad-precision.json");
    std::fs::write(&bad_path, value.to_string()).unwrap();
    let (code, _, err) = emit(bad_path.to_str().unwrap(), "megatron");
    assert_eq!(code, 2);
    assert!(
        err.contains("parallelism.precision") && err.contains("valid: bf16, fp8"),
        "{err}"
    );
}
