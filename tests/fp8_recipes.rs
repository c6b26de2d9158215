//! `--fp8-recipe` (Megatron-LM's FP8 recipes, docs/cost-model.md "FP8 recipes"): each recipe
//! costs what its mechanism adds, checked against counts made here from the layer shapes;
//! the flag sets or contradicts `--precision`; the GPUs that cannot run a recipe refuse it;
//! plans carry it through `pplan emit --target megatron` and back.

mod common;
use common::{json, pplan, with};
use pplan::cost::{CostModel, Fp8Recipe, Layout, Stack};
use pplan::inputs::hardware::Hardware;
use pplan::inputs::model::Model;
use pplan::plan::megatron_args::parse_megatron_args;

fn predict(args: &[&str]) -> serde_json::Value {
    let mut all = vec!["predict"];
    all.extend_from_slice(args);
    all.extend(["--format", "json"]);
    let (code, out, err) = pplan(&all);
    assert_eq!(code, 0, "{all:?}: {err}");
    json(&out)
}

fn step(v: &serde_json::Value) -> f64 {
    v["step_time_s"].as_f64().unwrap()
}

/// A refused command: exit 2 and the message on standard error.
fn refused(args: &[&str]) -> String {
    let mut all = vec!["predict"];
    all.extend_from_slice(args);
    let (code, out, err) = pplan(&all);
    assert_eq!(code, 2, "{all:?} should be refused: {out}{err}");
    err
}

/// Llama 3 8B on one H100, 4 micro-batches of 2,048 tokens, no recomputation: the step is the
/// micro-batches' forwards and backwards back to back, so what a recipe adds per layer adds
/// up exactly.
const ONE_H100: [&str; 14] = [
    "--model",
    "llama3-8b",
    "--hardware",
    "h100-80gb",
    "--gpus",
    "1",
    "--global-batch",
    "4",
    "--recompute",
    "none",
    "--seq-len",
    "2048",
    "--micro-batch",
    "1",
];

/// Llama 3 70B on 64 H100 (8 DGX nodes) as t = 4, p = 4 with 5 chunks, d = 4, sequence
/// parallelism, 128 sequences of 8,192 tokens: the layout docs/cost-model.md quotes.
const LLAMA3_70B_64: [&str; 18] = [
    "--recompute",
    "full",
    "--model",
    "llama3-70b",
    "--gpus",
    "64",
    "--tp",
    "4",
    "--pp",
    "4",
    "--chunks",
    "5",
    "--global-batch",
    "128",
    "--sequence-parallel",
    "on",
    "--micro-batch",
    "1",
];

/// Current scaling (tensorwise) against delayed scaling, counted here from Llama 3 8B's
/// published shapes (h 4096, 32 heads of 128, 8 KV heads, SwiGLU width 14336, 32 layers):
/// per layer and micro-batch the amax pass reads every cast BF16 tensor once more (2 bytes an
/// element: the inputs of the projection and of MLP-out forward, the four output gradients
/// backward), the two norms' outputs get casts of their own (read 2, write the FP8 copy and
/// its transpose, 2), and every cast launches 3 more kernels (amax zeroed, amax, scale), each
/// costing the H100's gap between kernels. Nothing else moves.
#[test]
fn tensorwise_adds_exactly_the_amax_pass_and_the_norm_casts() {
    let delayed = predict(&with(&ONE_H100, &["--fp8-recipe", "delayed"]));
    let tensorwise = predict(&with(&ONE_H100, &["--fp8-recipe", "tensorwise"]));
    assert_eq!(tensorwise["precision"], "fp8");
    assert_eq!(tensorwise["fp8_recipe"], "tensorwise");
    let (s, h, q, kv, f, layers, m) = (
        2048.0,
        4096.0,
        32.0 * 128.0,
        8.0 * 128.0,
        14336.0,
        32.0,
        4.0,
    );
    let beside_norms = s * (q + f);
    let norm_outputs = 2.0 * s * h;
    let gradients = s * ((q + 2.0 * kv) + h + 2.0 * f + h);
    let extra_bytes = 2.0 * beside_norms + (2.0 + 2.0) * norm_outputs + 2.0 * gradients;
    // 2 casts beside the norms and 2 of the norms' outputs forward, 4 backward, 3 kernels each.
    let extra_kernels = 3.0 * (4.0 + 4.0);
    let hw = Hardware::bundled("h100-80gb").unwrap();
    let expected =
        layers * m * (extra_bytes / hw.hbm_bytes_per_s() + extra_kernels * hw.kernel_gap_s());
    let got = step(&tensorwise) - step(&delayed);
    assert!(
        (got - expected).abs() < 1e-6 * step(&delayed),
        "tensorwise adds {got} s, the count {expected} s"
    );
    assert!(expected > 0.01, "{expected}");
    // The memory does not move: the same copies are kept.
    assert_eq!(
        tensorwise["peak_memory_bytes"],
        delayed["peak_memory_bytes"]
    );
}

/// With sequence parallelism current scaling also all-reduces each column-parallel input's
/// and row-parallel output gradient's amax over the tensor-parallel group, in line: 2 per
/// layer forward and 2 backward.
#[test]
fn tensorwise_reduces_its_amax_over_the_tensor_parallel_group() {
    let m = Model::preset("llama3-70b").unwrap();
    let hw = Hardware::bundled("h100-80gb").unwrap();
    let cost = |recipe: Fp8Recipe, sp: bool| {
        CostModel {
            model: &m,
            hw: &hw,
            layout: Layout {
                sequence_parallel: sp,
                ..Layout::tensor_parallel(4)
            },
            stack: Stack {
                precision: recipe.precision(),
                fp8_recipe: recipe,
                ..Stack::megatron_core()
            },
        }
        .layer()
    };
    let one = pplan::cost::all_reduce_s(4.0, 4, hw.nvlink_bytes_per_s(), hw.node.nvlink_latency_s);
    let (d, t) = (
        cost(Fp8Recipe::Delayed, true),
        cost(Fp8Recipe::Tensorwise, true),
    );
    assert!((t.forward.tp_comm_s - d.forward.tp_comm_s - 2.0 * one).abs() < 1e-12);
    assert!((t.backward_input.tp_comm_s - d.backward_input.tp_comm_s - 2.0 * one).abs() < 1e-12);
    let (d, t) = (
        cost(Fp8Recipe::Delayed, false),
        cost(Fp8Recipe::Tensorwise, false),
    );
    assert_eq!(t.forward.tp_comm_s, d.forward.tp_comm_s);
}

/// Block scaling on Hopper runs every GEMM with its block scales and the split accumulator
/// (the forward too: `gpu.fp8_block_scaling_slowdown`, measured on H200) and casts the norms'
/// outputs separately: slower than current scaling on Llama 3 70B, and than delayed scaling.
/// On Blackwell it runs as MXFP8: the GEMMs take MXFP8's time.
#[test]
fn blockwise_pays_its_block_scales_in_every_gemm_on_hopper_only() {
    let h100 = with(&LLAMA3_70B_64, &["--hardware", "h100-80gb"]);
    let delayed = step(&predict(&with(&h100, &["--fp8-recipe", "delayed"])));
    let tensorwise = step(&predict(&with(&h100, &["--fp8-recipe", "tensorwise"])));
    let blockwise = predict(&with(&h100, &["--fp8-recipe", "blockwise"]));
    assert_eq!(blockwise["fp8_recipe"], "blockwise");
    assert!(
        step(&blockwise) > tensorwise && tensorwise > delayed,
        "blockwise {} tensorwise {tensorwise} delayed {delayed}",
        step(&blockwise)
    );
    let m = Model::preset("llama3-70b").unwrap();
    let layer = |hw: &Hardware, recipe: Fp8Recipe| {
        CostModel {
            model: &m,
            hw,
            layout: Layout {
                sequence_parallel: true,
                ..Layout::tensor_parallel(4)
            },
            stack: Stack {
                precision: recipe.precision(),
                fp8_recipe: recipe,
                ..Stack::megatron_core()
            },
        }
        .layer()
    };
    let h = Hardware::bundled("h100-80gb").unwrap();
    let split = h.gpu.fp8_split_accumulator_slowdown.unwrap();
    let block = h.gpu.fp8_block_scaling_slowdown.unwrap();
    let (d, b) = (
        layer(&h, Fp8Recipe::Delayed),
        layer(&h, Fp8Recipe::Blockwise),
    );
    // The linear GEMMs take the block scales' measured slowdown in the forward, where the
    // per-tensor recipes run the fast accumulator; the attention core (BF16) does not change;
    // the gradient GEMMs take it where the per-tensor ones take the split accumulator's.
    let core = CostModel {
        model: &m,
        hw: &h,
        layout: Layout {
            sequence_parallel: true,
            ..Layout::tensor_parallel(4)
        },
        stack: Stack::megatron_core(),
    }
    .attention_core_s()
    .0;
    let linear = d.forward.gemm_s - core;
    assert!(
        ((b.forward.gemm_s - core) - block * linear).abs() < 1e-9 * linear,
        "{} {}",
        b.forward.gemm_s - core,
        block * linear
    );
    let ratio = b.backward_weight.gemm_s / d.backward_weight.gemm_s;
    assert!((ratio - block / split).abs() < 1e-9, "{ratio}");
    let b200 = Hardware::bundled("b200").unwrap();
    let (mx, bw) = (
        layer(&b200, Fp8Recipe::Mxfp8),
        layer(&b200, Fp8Recipe::Blockwise),
    );
    assert_eq!(bw.forward.gemm_s, mx.forward.gemm_s);
    assert_eq!(bw.backward_weight.gemm_s, mx.backward_weight.gemm_s);
}

/// The flag absent, `--precision fp8` is what the stack's recipes run: current scaling on
/// Megatron-Core's (Megatron-Bridge's performance recipes, `fp8_cs`), the same prediction byte
/// for byte as `--fp8-recipe tensorwise` with or without `--precision fp8`; delayed scaling,
/// Megatron-LM's own default, on the other stacks, where it names no recipe. `--fp8-recipe
/// mxfp8` is `--precision mxfp8`.
#[test]
fn the_default_recipe_is_the_stacks_and_mxfp8_is_its_precision() {
    let h100 = with(&ONE_H100, &[]);
    let fp8 = predict(&with(&h100, &["--precision", "fp8"]));
    assert_eq!(fp8["fp8_recipe"], "tensorwise", "{fp8}");
    for extra in [
        &["--fp8-recipe", "tensorwise"][..],
        &["--precision", "fp8", "--fp8-recipe", "tensorwise"],
    ] {
        assert_eq!(predict(&with(&h100, extra)), fp8, "{extra:?}");
    }
    let delayed = predict(&with(&h100, &["--fp8-recipe", "delayed"]));
    assert!(delayed.get("fp8_recipe").is_none(), "{delayed}");
    assert!(step(&fp8) > step(&delayed));
    let titan = with(&h100, &["--stack", "torchtitan"]);
    let titan_fp8 = predict(&with(&titan, &["--precision", "fp8"]));
    assert!(titan_fp8.get("fp8_recipe").is_none(), "{titan_fp8}");
    assert_eq!(
        predict(&with(&titan, &["--fp8-recipe", "delayed"])),
        titan_fp8
    );
    let b200 = with(&LLAMA3_70B_64, &["--hardware", "b200"]);
    let mx = predict(&with(&b200, &["--precision", "mxfp8"]));
    assert_eq!(predict(&with(&b200, &["--fp8-recipe", "mxfp8"])), mx);
    assert_eq!(
        predict(&with(
            &b200,
            &["--precision", "mxfp8", "--fp8-recipe", "mxfp8"]
        )),
        mx
    );
    assert!(mx.get("fp8_recipe").is_none());
}

#[test]
fn mxfp8_on_hopper_is_refused_naming_the_flag_and_the_recipes_it_runs() {
    let err = refused(&with(
        &LLAMA3_70B_64,
        &["--hardware", "h100-80gb", "--fp8-recipe", "mxfp8"],
    ));
    assert!(err.contains("--fp8-recipe mxfp8"), "{err}");
    assert!(
        err.contains("h100-80gb has no block-scaled (MXFP8) tensor cores"),
        "{err}"
    );
    assert!(err.contains("delayed, tensorwise, blockwise"), "{err}");
    let err = refused(&with(
        &ONE_H100[..2],
        &[
            "--hardware",
            "a100-80gb",
            "--gpus",
            "8",
            "--global-batch",
            "8",
            "--fp8-recipe",
            "blockwise",
        ],
    ));
    assert!(
        err.contains("--fp8-recipe blockwise: a100-80gb has no FP8 tensor cores"),
        "{err}"
    );
}

#[test]
fn a_recipe_that_contradicts_the_precision_is_refused_naming_both_flags() {
    for (precision, recipe, valid) in [
        (
            "bf16",
            "tensorwise",
            "--precision fp8 with --fp8-recipe tensorwise",
        ),
        (
            "mxfp8",
            "blockwise",
            "--fp8-recipe mxfp8 with --precision mxfp8",
        ),
        (
            "fp8",
            "mxfp8",
            "--fp8-recipe delayed or tensorwise or blockwise",
        ),
        ("nvfp4", "delayed", "drop --fp8-recipe"),
    ] {
        let err = refused(&with(
            &LLAMA3_70B_64,
            &[
                "--hardware",
                "b200",
                "--precision",
                precision,
                "--fp8-recipe",
                recipe,
            ],
        ));
        assert!(
            err.contains(&format!(
                "--fp8-recipe {recipe} contradicts --precision {precision}"
            )),
            "{err}"
        );
        assert!(err.contains(valid), "{err}");
    }
    let err = refused(&with(&ONE_H100, &["--fp8-recipe", "custom"]));
    assert!(
        err.contains("--fp8-recipe") && err.contains("delayed, tensorwise, blockwise, mxfp8"),
        "{err}"
    );
}

fn tmp(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("pplan-fp8-recipes-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// A prediction with each recipe written as a plan, emitted as Megatron-LM arguments and read
/// back: the recipe flags Megatron-LM takes, and the precision and recipe of the plan.
#[test]
fn recipes_round_trip_through_megatron_arguments() {
    for (hw, extra, flags, precision, recipe) in [
        (
            "h100-80gb",
            &["--fp8-recipe", "delayed"][..],
            &[
                "--fp8-format hybrid",
                "--fp8-recipe delayed",
                "--fp8-amax-history-len 1024",
            ][..],
            "fp8",
            "delayed",
        ),
        (
            "h100-80gb",
            &["--fp8-recipe", "tensorwise"],
            &["--fp8-format hybrid", "--fp8-recipe tensorwise"],
            "fp8",
            "tensorwise",
        ),
        (
            "h100-80gb",
            &["--fp8-recipe", "blockwise"],
            &["--fp8-format hybrid", "--fp8-recipe blockwise"],
            "fp8",
            "blockwise",
        ),
        (
            "b200",
            &["--fp8-recipe", "mxfp8"],
            &["--fp8-format e4m3", "--fp8-recipe mxfp8"],
            "mxfp8",
            "delayed",
        ),
        (
            "b200",
            &["--precision", "nvfp4"],
            &["--fp4-format e2m1", "--fp4-recipe nvfp4"],
            "nvfp4",
            "delayed",
        ),
    ] {
        let path = tmp(&format!("{hw}-{precision}-{recipe}.json"));
        let mut args = with(&LLAMA3_70B_64, &["--hardware", hw]);
        args.extend_from_slice(extra);
        let p = path.to_str().unwrap();
        args.extend(["--output", p]);
        predict(&args);
        let plan: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let par = &plan["parallelism"];
        assert_eq!(par["precision"], precision);
        // Delayed, Megatron-LM's default, is omitted.
        assert_eq!(
            par["fp8_recipe"].as_str().unwrap_or("delayed"),
            recipe,
            "{par}"
        );
        let (code, out, err) = pplan(&["emit", "--plan", p, "--target", "megatron"]);
        assert_eq!(code, 0, "{err}");
        for f in flags {
            assert!(out.contains(f), "{extra:?}: missing {f}\n{out}");
        }
        if recipe != "delayed" || precision != "fp8" {
            assert!(!out.contains("--fp8-amax-history-len"), "{out}");
        }
        let back = parse_megatron_args(&out, "megatron.sh").unwrap();
        assert_eq!(
            (back.precision.as_str(), back.fp8_recipe.as_str()),
            (precision, recipe)
        );
    }
}

/// Megatron-LM's own rules on reading the flags: its defaults (recipe delayed with a format,
/// nothing without one), and what it refuses or pplan cannot cost.
#[test]
fn megatron_recipe_flags_read_as_megatron_lm_takes_them() {
    let base = "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 \
                --max-position-embeddings 128 --micro-batch-size 1 --global-batch-size 8 \
                --vocab-size 1024";
    let read = |extra: &str| parse_megatron_args(&format!("{base} {extra}"), "args.sh");
    let got = |extra: &str| {
        let p = read(extra).unwrap();
        (p.precision, p.fp8_recipe)
    };
    let pair = |p: &str, r: &str| (p.to_string(), r.to_string());
    assert_eq!(got(""), pair("bf16", "delayed"));
    assert_eq!(got("--fp8-format e4m3"), pair("fp8", "delayed"));
    assert_eq!(
        got("--fp8-format hybrid --fp8-recipe tensorwise"),
        pair("fp8", "tensorwise")
    );
    assert_eq!(
        got("--fp8-format e4m3 --fp8-recipe blockwise"),
        pair("fp8", "blockwise")
    );
    assert_eq!(
        got("--fp8-format e4m3 --fp8-recipe mxfp8"),
        pair("mxfp8", "delayed")
    );
    // A recipe alone enables nothing in Megatron-LM.
    assert_eq!(got("--fp8-recipe tensorwise"), pair("bf16", "delayed"));
    assert_eq!(got("--fp4-format e2m1"), pair("nvfp4", "delayed"));
    assert_eq!(
        got("--fp4-format e2m1 --fp4-recipe nvfp4"),
        pair("nvfp4", "delayed")
    );
    for (extra, flag) in [
        ("--fp8-format hybrid --fp8-recipe custom", "--fp8-recipe"),
        ("--fp8-format hybrid --fp8-recipe perblock", "--fp8-recipe"),
        ("--fp8-format e5m2", "--fp8-format"),
        ("--fp8-format hybrid --fp4-format e2m1", "--fp8-format"),
        ("--fp4-format e2m1 --fp4-recipe custom", "--fp4-recipe"),
        ("--fp4-format mxfp4", "--fp4-format"),
    ] {
        let e = read(extra).unwrap_err().to_string();
        assert!(e.contains(flag), "{extra}: {e}");
    }
}

/// The table of docs/cost-model.md "FP8 recipes" is what `pplan predict` gives for the command
/// it quotes, row by row (step time to the millisecond, model TFLOP/s to a tenth).
#[test]
fn the_documented_recipe_figures_are_predicted() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/cost-model.md"))
        .unwrap();
    let section = doc
        .split("## FP8 recipes")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("the FP8 recipes section");
    for (gpu, hw, recipe, flags) in [
        ("H100", "h100-80gb", "bf16", &["--precision", "bf16"][..]),
        ("H100", "h100-80gb", "delayed", &["--fp8-recipe", "delayed"]),
        (
            "H100",
            "h100-80gb",
            "tensorwise",
            &["--fp8-recipe", "tensorwise"],
        ),
        (
            "H100",
            "h100-80gb",
            "blockwise",
            &["--fp8-recipe", "blockwise"],
        ),
        ("B200", "b200", "delayed", &["--fp8-recipe", "delayed"]),
        (
            "B200",
            "b200",
            "tensorwise",
            &["--fp8-recipe", "tensorwise"],
        ),
        ("B200", "b200", "blockwise", &["--fp8-recipe", "blockwise"]),
        ("B200", "b200", "mxfp8", &["--fp8-recipe", "mxfp8"]),
        ("B200", "b200", "nvfp4", &["--precision", "nvfp4"]),
    ] {
        let mut args = with(&LLAMA3_70B_64, &["--hardware", hw, "--zero", "1"]);
        args.extend_from_slice(flags);
        let v = predict(&args);
        let tflops = v["model_tflops_per_gpu"].as_f64().unwrap();
        let tflops = format!("{tflops:.1}");
        // Thousands separated as the page writes them.
        let tflops = match tflops.split_once('.') {
            Some((int, frac)) if int.len() > 3 => {
                format!("{},{}.{frac}", &int[..int.len() - 3], &int[int.len() - 3..])
            }
            _ => tflops,
        };
        let row = format!("| {gpu} | {recipe} | {:.3} | {tflops} |", step(&v));
        assert!(
            section.contains(&row),
            "docs/cost-model.md lacks the row {row}"
        );
    }
}

/// A plan file's recipe must fit its precision.
#[test]
fn a_plan_whose_recipe_contradicts_its_precision_is_refused() {
    let path = tmp("plan-recipe.json");
    let mut args = with(&ONE_H100, &["--fp8-recipe", "blockwise", "--output"]);
    let p = path.to_str().unwrap().to_string();
    args.push(&p);
    predict(&args);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("\"fp8_recipe\": \"blockwise\""), "{text}");
    let plan = pplan::plan::plan_file::Plan::from_json(&text, "plan.json").unwrap();
    assert_eq!(plan.parallelism.fp8_recipe, "blockwise");
    for (from, to, what) in [
        (
            "\"precision\": \"fp8\"",
            "\"precision\": \"bf16\"",
            "needs parallelism.precision fp8",
        ),
        (
            "\"fp8_recipe\": \"blockwise\"",
            "\"fp8_recipe\": \"mxfp8\"",
            "valid: delayed, tensorwise, blockwise",
        ),
    ] {
        let bad = text.replace(from, to);
        assert_ne!(bad, text);
        let e = pplan::plan::plan_file::Plan::from_json(&bad, "plan.json")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("parallelism.fp8_recipe") && e.contains(what),
            "{e}"
        );
    }
}

/// NVFP4 (`NVFP4BlockScaling` with its Hadamard transform, Transformer Engine v2.10): every
/// activation and gradient cast reads its BF16 input three times (amax, row-wise cast,
/// column-wise transform and cast) and writes two 4-bit copies with an E4M3 scale per 16
/// elements, 7.125 bytes an element, the norms' outputs included (they write BF16 first), in
/// 4 kernels a cast, 4 casts each way; with sequence parallelism the amax all-reduces of
/// current scaling. Counted here from Llama 3 8B's shapes at 2,048 tokens on one B200.
#[test]
fn nvfp4_casts_make_three_passes_over_every_tensor() {
    let m = {
        let mut m = Model::preset("llama3-8b").unwrap();
        m.seq_len = 2048;
        m
    };
    let b200 = Hardware::bundled("b200").unwrap();
    let cm = |tp: u64, sp: bool| CostModel {
        model: &m,
        hw: &b200,
        layout: Layout {
            sequence_parallel: sp,
            ..Layout::tensor_parallel(tp)
        },
        stack: Stack {
            precision: pplan::inputs::hardware::Precision::Nvfp4,
            ..Stack::megatron_core()
        },
    };
    let (s, h, q, kv, f) = (2048.0, 4096.0, 32.0 * 128.0, 8.0 * 128.0, 14336.0);
    let per = 3.0 * 2.0 + 2.0 * (0.5 + 1.0 / 16.0);
    assert_eq!(per, 7.125);
    let forward = s * (q + f) + 2.0 * s * h;
    let backward = s * ((q + 2.0 * kv) + h + 2.0 * f + h);
    let (bf, bb) = cm(1, false).low_precision_cast_bytes();
    assert!(
        (bf - per * forward).abs() < 1e-6 * bf,
        "{bf} {}",
        per * forward
    );
    assert!(
        (bb - per * backward).abs() < 1e-6 * bb,
        "{bb} {}",
        per * backward
    );
    assert_eq!(cm(1, false).cast_kernels(), (16.0, 16.0));
    assert_eq!(cm(1, false).amax_reduction_s(), (0.0, 0.0));
    // t = 4 with sequence parallelism: the amax of QKV's and MLP-in's inputs and of the
    // projection's and MLP-out's output gradients reduced over the tensor-parallel group.
    let tp = cm(4, true);
    assert_eq!(tp.cast_kernels(), (18.0, 18.0));
    let (rf, rb) = tp.amax_reduction_s();
    assert!(rf > 0.0 && rf == rb);
}
