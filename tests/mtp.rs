//! Multi-token prediction (MTP; DeepSeek-V3 technical report Sec. 2.2, Megatron-Core's
//! `--mtp-num-layers`): read from the configs that state it, costed as one more layer of the
//! last layer's kind plus its projection and one more output layer and loss per depth, placed
//! by the layout's 'm', emitted for Megatron-LM and read back, refused where Megatron-Core
//! refuses it. Each figure is compared with one computed here from its parts.

mod common;
use common::{json, pplan};
use pplan::cost::{CostModel, Stack};
use pplan::inputs::{Hardware, Model};
use pplan::plan::megatron_args::parse_megatron_args;
use pplan::plan::predict::{check, predict, PredictRequest, Prediction};

fn hf_path(name: &str) -> String {
    format!("{}/tests/data/hf/{name}.json", env!("CARGO_MANIFEST_DIR"))
}

/// DeepSeek-V3's published config.json says `num_nextn_predict_layers: 1`; Megatron-style JSON
/// says `mtp_num_layers`; a count above the layers or below 0 is refused naming the key.
#[test]
fn configs_give_their_mtp_layers() {
    let v3 = Model::load(&hf_path("deepseek-v3")).unwrap();
    assert_eq!(v3.mtp_layers, 1);
    assert_eq!(Model::preset("deepseek-v3").unwrap().mtp_layers, 1);
    assert_eq!(Model::preset("qwen3-235b-a22b").unwrap().mtp_layers, 0);
    let meg = |extra: &str| {
        Model::from_json(
            &format!(
                r#"{{"num_layers": 4, "hidden_size": 64, "num_attention_heads": 4, "ffn_hidden_size": 256, "seq_length": 128, "vocab_size": 1000{extra}}}"#
            ),
            "m.json",
        )
    };
    assert_eq!(meg(r#", "mtp_num_layers": 2"#).unwrap().mtp_layers, 2);
    assert_eq!(meg(r#", "mtp_num_layers": null"#).unwrap().mtp_layers, 0);
    for bad in [r#", "mtp_num_layers": 5"#, r#", "mtp_num_layers": -1"#] {
        let e = meg(bad).unwrap_err().to_string();
        assert!(
            e.contains("'mtp_num_layers'") && e.contains("from 0 to"),
            "{e}"
        );
    }
    let text = std::fs::read_to_string(hf_path("deepseek-v3"))
        .unwrap()
        .replace(
            "\"num_nextn_predict_layers\": 1",
            "\"num_nextn_predict_layers\": 62",
        );
    let e = Model::from_json(&text, "v3.json").unwrap_err().to_string();
    assert!(
        e.contains("'num_nextn_predict_layers'") && e.contains("61 layers"),
        "{e}"
    );
}

/// DeepSeek-V3 on one pipeline stage (64 GB200, EP 64, 4 micro-batches): the step with its
/// MTP depth against the step without it. The difference is at least one MoE layer and one
/// output layer (logits and loss) per micro-batch, forward and backward, and at most that plus
/// the depth's lookup and projection and the optimizer step and gradient reduction of its
/// parameters. The parameters grow by the hand count of one depth (DeepSeek-V3's MLA MoE
/// layer, eh_proj 2h x h, three RMSNorms); the model FLOPs by 3 x tokens x (one MoE layer, the
/// projection 2 (2h) h and the logits 2 h V) a token, the MoE layer's taken from the model
/// without its last layer.
#[test]
fn deepseek_v3_with_mtp_costs_one_moe_layer_and_one_output_layer_more() {
    let hw = Hardware::bundled("gb200-nvl72").unwrap();
    let with = Model::preset("deepseek-v3").unwrap();
    let mut without = with.clone();
    without.mtp_layers = 0;
    let req = |m: &'static Model| {
        let mut r = PredictRequest::new(m, &*Box::leak(Box::new(hw.clone())));
        r.gpus = 64;
        r.ep = 64;
        r.global_batch = 256;
        r.micro_batch = 1;
        r.recompute = pplan::cost::Recompute::None;
        r.stack = Stack::megatron_core();
        r
    };
    let with: &'static Model = Box::leak(Box::new(with));
    let without: &'static Model = Box::leak(Box::new(without));
    let (a, b) = (req(with), req(without));
    let (pa, pb) = (predict(&a).unwrap(), predict(&b).unwrap());
    let dp = check(&a).unwrap();
    let m = (a.global_batch / dp / a.micro_batch) as f64;
    assert_eq!(m, 4.0);
    let cm: CostModel = a.cost_model(dp);
    let fb = |c: pplan::cost::BlockCost| {
        c.forward.total_s() + c.backward_input.total_s() + c.backward_weight.total_s()
    };
    let layer = fb(cm.moe_layer());
    let output = fb(cm.output_layer());
    let extra = fb(cm.mtp_projection()) + fb(cm.embedding());
    // The depth's parameters on this rank: the MoE layer's dense part and projection over
    // t = 1, its 64th of the 256 experts.
    let h = 7168u64;
    let attention = 7168 * 1536
        + 1536
        + 1536 * 128 * 192
        + 7168 * 576
        + 512
        + 512 * 128 * 256
        + 128 * 128 * 7168;
    let expert = 3 * h * 2048;
    let dense = attention + expert + h * 256 + 4 * h + (2 * h * h + 3 * h);
    let experts = (256 / 64) * expert;
    let state_s = cm.optimizer_s(dense as f64)
        + cm.expert_optimizer_s(experts as f64)
        + cm.step_grad_reduce_s(dense as f64)
        + cm.expert_grad_reduce_s(experts as f64);
    let lower = m * (layer + output);
    let upper = m * (layer + output + extra) + state_s;
    let diff = pa.step_time_s - pb.step_time_s;
    assert!(
        diff >= lower - 1e-6 && diff <= upper + 1e-6,
        "step {:.4} s - {:.4} s = {diff:.4} s, outside [{lower:.4}, {upper:.4}] (layer {layer:.4} s, output {output:.4} s, lookup and projection {extra:.4} s, state {state_s:.4} s)",
        pa.step_time_s,
        pb.step_time_s
    );
    // Parameters: one depth by hand, 11.61B (DeepSeek-V3 README_WEIGHTS.md: 11.5B unique).
    let depth = attention + 256 * expert + expert + h * 256 + 4 * h + 2 * h * h + 3 * h;
    assert_eq!(pa.params - pb.params, depth);
    assert_eq!(depth, 11_610_082_304);
    assert_eq!(
        (pa.mtp_num_layers, pa.mtp_stage, pb.mtp_stage),
        (1, Some(0), None)
    );
    // Model FLOPs: the last layer's from the model cut before it.
    let mut cut = without.clone();
    cut.num_layers = 60;
    cut.moe.as_mut().unwrap().layers.truncate(60);
    let cut: &'static Model = Box::leak(Box::new(cut));
    let pc = predict(&req(cut)).unwrap();
    let flops = |p: &Prediction| p.model_tflops_per_gpu * 1e12 * p.step_time_s * p.gpus as f64;
    let last_layer = flops(&pb) - flops(&pc);
    let tokens = 256.0 * 4096.0;
    let (hf, v) = (h as f64, 129280.0);
    let want = last_layer + 3.0 * tokens * (2.0 * 2.0 * hf * hf + 2.0 * hf * v);
    let got = flops(&pa) - flops(&pb);
    assert!(
        (got / want - 1.0).abs() < 1e-9,
        "MTP model FLOPs {got:.6e}, want {want:.6e}"
    );
    // Memory: the depth's weights, gradients and optimizer state, and its activations.
    assert!(pa.model_state_bytes > pb.model_state_bytes);
    assert!(pa.peak_memory_bytes > pb.peak_memory_bytes);
}

const V3: [&str; 20] = [
    "--model",
    "deepseek-v3",
    "--hardware",
    "gb200-nvl72",
    "--gpus",
    "256",
    "--tp",
    "1",
    "--pp",
    "4",
    "--chunks",
    "4",
    "--ep",
    "64",
    "--global-batch",
    "4096",
    "--micro-batch",
    "1",
    "--precision",
    "mxfp8",
];

fn predict_cli(extra: &[&str]) -> (i32, String, String) {
    let mut args = vec!["predict"];
    args.extend(V3);
    args.extend(extra);
    pplan(&args)
}

fn temp(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("pplan-mtp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// The layout of the task: Megatron-Core's PP 4 x VP 4 split of DeepSeek-V3 with its MTP layer
/// in the last stage predicts (slower than without the layer: the last rank does more), is
/// written to the plan and emitted as `--mtp-num-layers 1` with the 'm' in place; Megatron-LM's
/// arguments read back give the same model and stage. A standalone MTP stage (its own stage
/// before the loss's) goes the same way, through the layout string.
#[test]
fn layouts_with_m_predict_emit_and_read_back() {
    for (layout, stage) in [
        ("Et*3|(t*4|)*13t*3|t*3mL", 15usize),
        ("Et*5|(t*4|)*13t*4m|L", 14),
    ] {
        let plan = temp(&format!("plan-{stage}.json"));
        let (code, out, err) = predict_cli(&[
            "--pipeline-layout",
            layout,
            "--format",
            "json",
            "--output",
            plan.to_str().unwrap(),
        ]);
        assert_eq!(code, 0, "{layout}: {err}");
        let with = json(&out);
        assert_eq!(with["mtp_num_layers"], 1);
        assert_eq!(with["mtp_stage"], stage);
        let no_m = layout.replace('m', "");
        let (code, out, err) = predict_cli(&[
            "--pipeline-layout",
            &no_m,
            "--mtp-num-layers",
            "0",
            "--format",
            "json",
        ]);
        assert_eq!(code, 0, "{err}");
        let without = json(&out);
        assert!(without.get("mtp_num_layers").is_none() && without.get("mtp_stage").is_none());
        let t = |v: &serde_json::Value| v["step_time_s"].as_f64().unwrap();
        assert!(
            t(&with) > t(&without),
            "{layout}: {} <= {}",
            t(&with),
            t(&without)
        );
        assert_eq!(
            with["params"].as_u64().unwrap() - without["params"].as_u64().unwrap(),
            11_610_082_304
        );
        let plan_json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&plan).unwrap()).unwrap();
        assert_eq!(plan_json["model"]["mtp_num_layers"], 1);
        assert_eq!(plan_json["stages"][stage]["mtp_layers"], 1);
        let (code, text, err) = pplan(&[
            "emit",
            "--plan",
            plan.to_str().unwrap(),
            "--target",
            "megatron",
        ]);
        assert_eq!(code, 0, "{err}");
        assert!(text.contains("--mtp-num-layers 1"), "{text}");
        let valid = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/data/megatron_args.txt"
        ))
        .unwrap();
        assert!(valid.lines().any(|l| l == "--mtp-num-layers"));
        let back = parse_megatron_args(&text, "megatron.sh").unwrap();
        assert_eq!(back.model.mtp_layers, 1);
        assert_eq!(back.mtp_stage, Some(stage as u32));
        let counts: Vec<u32> = serde_json::from_value(with["stage_layers"].clone()).unwrap();
        assert_eq!(back.stage_layers, counts);
        assert_eq!(back.model.total_params(), with["params"].as_u64().unwrap());
        // torchtitan has no MTP module: the emitted config says so.
        let (code, tt, err) = pplan(&[
            "emit",
            "--plan",
            plan.to_str().unwrap(),
            "--target",
            "torchtitan",
        ]);
        assert_eq!(code, 0, "{err}");
        assert!(
            format!("{tt}{err}").contains("multi-token prediction layer(s)"),
            "{tt}\n{err}"
        );
    }
}

/// Bad counts and placements exit 2 naming the flag (or key) and what is valid.
#[test]
fn bad_mtp_values_exit_2_naming_the_flag() {
    for (extra, want) in [
        (vec!["--mtp-num-layers", "-1"], "0 or a positive integer"),
        (vec!["--mtp-num-layers", "62"], "valid: 0 to 61"),
        (vec!["--mtp-num-layers", "x"], "0 or a positive integer"),
        // An 'm' outside a rank's last virtual stage (stages 12-15 at PP 4 x VP 4).
        (
            vec!["--pipeline-layout", "Et*17|(t*4|)*10t*4m||||L"],
            "last virtual stage",
        ),
        // Two depths asked, one 'm' written.
        (
            vec![
                "--mtp-num-layers",
                "2",
                "--pipeline-layout",
                "Et*3|(t*4|)*13t*3|t*3mL",
            ],
            "valid: 'm' written 2 times",
        ),
    ] {
        let (code, _, err) = predict_cli(&extra);
        assert_eq!(code, 2, "{extra:?}: {err}");
        let flag = if extra[0] == "--pipeline-layout" {
            "--pipeline-layout"
        } else {
            "--mtp-num-layers"
        };
        assert!(err.contains(flag) && err.contains(want), "{extra:?}: {err}");
    }
    let (code, _, err) = pplan(&[
        "search",
        "--gpus",
        "256",
        "--model",
        "deepseek-v3",
        "--mtp-num-layers",
        "99",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--mtp-num-layers 99"), "{err}");
    // Megatron-LM's arguments: more depths than layers.
    let args = "--num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 128 \
        --padded-vocab-size 1024 --global-batch-size 8 --mtp-num-layers 5";
    let e = parse_megatron_args(args, "args.sh")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("--mtp-num-layers") && e.contains("0 to --num-layers (4)"),
        "{e}"
    );
}
