//! The plan file as the hub (issue 44), run as a user runs it: `search --output` then
//! `predict --plan` / `simulate --plan` give the search's step time without a flag retyped,
//! flags typed on top override the plan (and say so), `search --gantt` draws the best, and
//! `pplan report` writes one self-contained page (its sections, inline SVG, no network
//! resource, bounded size, byte-identical twice). No timed assertions: the speed is measured
//! by `benches/predict.rs` (docs/report.md).

mod common;
use common::{json, pplan};
use std::path::PathBuf;

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pplan-report-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn ok(args: &[&str]) -> (String, String) {
    let (code, out, err) = pplan(args);
    assert_eq!(code, 0, "{args:?}: exit {code}, stderr {err}");
    (out, err)
}

/// `search ARGS --output PLAN --format json`: the search's JSON and the plan's path.
fn search(name: &str, args: &[&str]) -> (serde_json::Value, PathBuf) {
    let plan = tmp(&format!("{name}.plan.json"));
    let (out, _) = ok(&[
        &["search"][..],
        args,
        &["--output", plan.to_str().unwrap(), "--format", "json"],
    ]
    .concat());
    (json(&out), plan)
}

const SMALL: [&str; 8] = [
    "--gpus",
    "32",
    "--model",
    "gpt-1.7b",
    "--global-batch",
    "128",
    "--pp",
    "4",
];

/// The search's best, predicted again from its plan alone, has the same step time (exactly),
/// and simulate replays the same step (in milliseconds); over plans that exercise the
/// plan's flags: interleaving, DualPipeV, a Megatron-Core split rule (a layout), torchtitan,
/// stack switches off their preset's defaults, and a MoE plan with recipe switches.
#[test]
fn predict_and_simulate_plan_give_the_search_step_time() {
    let cases: Vec<(&str, Vec<&str>)> = vec![
        ("plain", SMALL.to_vec()),
        (
            "interleaved",
            [
                &SMALL[..6],
                &[
                    "--pp",
                    "4",
                    "--chunks",
                    "2",
                    "--schedule",
                    "interleaved-1f1b",
                ],
            ]
            .concat(),
        ),
        (
            "dualpipev",
            [&SMALL[..], &["--schedule", "dualpipev"]].concat(),
        ),
        (
            "split-rule",
            [&SMALL[..], &["--decoder-first-pipeline-num-layers", "3"]].concat(),
        ),
        (
            "torchtitan",
            [&SMALL[..], &["--stack", "torchtitan"]].concat(),
        ),
        // Switches the plan records only off their stack's defaults (tests/plan_switches.rs).
        (
            "switches",
            [
                &SMALL[..],
                &[
                    "--overlap-p2p-comm",
                    "off",
                    "--gradient-accumulation-fusion",
                    "off",
                    "--grad-reduce-dtype",
                    "fp32",
                ],
            ]
            .concat(),
        ),
        (
            "moe",
            vec![
                "--gpus",
                "64",
                "--model",
                "mixtral-8x7b",
                "--hardware",
                "h100-80gb",
                "--global-batch",
                "256",
                "--pp",
                "4",
                "--moe-dispatcher",
                "deepep",
                "--fp8-recipe",
                "tensorwise",
            ],
        ),
    ];
    for (name, args) in cases {
        let (s, plan) = search(name, &args);
        let best = &s["results"][0];
        let (out, err) = ok(&[
            "predict",
            "--plan",
            plan.to_str().unwrap(),
            "--format",
            "json",
        ]);
        assert!(!err.contains("overrides"), "{name}: {err}");
        let p = json(&out);
        for key in [
            "step_time_s",
            "peak_memory_bytes",
            "mfu",
            "tp",
            "pp",
            "dp",
            "micro_batch",
            "schedule",
            "chunks",
            "stage_layers",
        ] {
            assert_eq!(p[key], best[key], "{name}: {key}");
        }
        let (out, _) = ok(&[
            "simulate",
            "--plan",
            plan.to_str().unwrap(),
            "--format",
            "json",
        ]);
        let makespan_ms = json(&out)["makespan"].as_f64().unwrap();
        let step_ms = best["step_time_s"].as_f64().unwrap() * 1e3;
        assert!(
            (makespan_ms - step_ms).abs() <= 1e-6 * step_ms,
            "{name}: simulate --plan {makespan_ms} ms against the search's {step_ms} ms"
        );
    }
}

/// A flag typed on top replaces the plan's value, and stderr says so; one that changes the
/// stages drops the plan's layout with it.
#[test]
fn flags_on_top_override_the_plan_and_say_so() {
    let (_, plan) = search(
        "override",
        &[&SMALL[..], &["--decoder-first-pipeline-num-layers", "3"]].concat(),
    );
    let (out, err) = ok(&[
        "predict",
        "--plan",
        plan.to_str().unwrap(),
        "--micro-batch",
        "2",
        "--pp",
        "2",
        "--format",
        "json",
    ]);
    assert!(
        err.contains("pplan: --micro-batch 2 overrides the plan's micro_batch 1"),
        "{err}"
    );
    assert!(err.contains("--pp 2 overrides the plan's pp 4"), "{err}");
    assert!(
        err.contains("--pp 2 replaces the plan's stages (--pipeline-layout"),
        "{err}"
    );
    let p = json(&out);
    assert_eq!(p["micro_batch"], 2);
    assert_eq!(p["pp"], 2);
    assert_eq!(p["gpus"], 32, "the plan's GPU count stays");
}

/// `search --gantt --trace` draws the best configuration as `predict --plan` does.
#[test]
fn search_draws_its_best_plan() {
    let svg = tmp("search-best.svg");
    let trace = tmp("search-best.trace.json");
    let (_, plan) = search(
        "draw",
        &[
            &SMALL[..],
            &[
                "--gantt",
                svg.to_str().unwrap(),
                "--trace",
                trace.to_str().unwrap(),
            ],
        ]
        .concat(),
    );
    let svg2 = tmp("predict-best.svg");
    let trace2 = tmp("predict-best.trace.json");
    ok(&[
        "predict",
        "--plan",
        plan.to_str().unwrap(),
        "--gantt",
        svg2.to_str().unwrap(),
        "--trace",
        trace2.to_str().unwrap(),
    ]);
    assert_eq!(
        std::fs::read(&svg).unwrap(),
        std::fs::read(&svg2).unwrap(),
        "search --gantt and predict --plan --gantt draw the same chart"
    );
    assert_eq!(
        std::fs::read(&trace).unwrap(),
        std::fs::read(&trace2).unwrap()
    );
}

/// Every `<tag attr="...">` resource a page would load from elsewhere.
fn network_loads(html: &str) -> Vec<String> {
    let lower = html.to_ascii_lowercase();
    [
        "src=\"http",
        "href=\"http",
        "src='http",
        "href='http",
        "@import",
        "url(http",
        "src=\"//",
        "href=\"//",
    ]
    .iter()
    .filter(|n| lower.contains(*n))
    .map(|n| n.to_string())
    .collect()
}

/// The report of a bundled plan (the CPU executor's measured ZB-H1 run, with its measured
/// trace) and of a searched plan with its search results: one file with every section,
/// inline SVG, nothing loaded from the network, byte-identical when rendered twice.
#[test]
fn report_is_one_self_contained_page() {
    let dir = "tests/data/measured/cpu-exec";
    let page = tmp("bundled.html");
    let plan = format!("{dir}/zb-h1.plan.json");
    let measured = format!("{dir}/zb-h1.measured.json");
    let args = [
        "report",
        "--plan",
        &plan,
        "--measured",
        &measured,
        "--tokens",
        "1B",
        "--gpu-hour-price",
        "2",
        "--output",
        page.to_str().unwrap(),
    ];
    ok(&args);
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>"));
    for section in [
        "id=\"summary\"",
        "id=\"gantt\"",
        "id=\"memory\"",
        "id=\"commands\"",
        "id=\"measured\"",
        "MEGATRON_ARGS=(",
        "training days",
        "Action by action",
        "tiny-gpt-cpu",
    ] {
        assert!(html.contains(section), "the page lacks {section}");
    }
    // The Gantt chart, the memory bars and the measured overlay, inline.
    assert!(html.matches("<svg").count() >= 3, "inline SVG charts");
    assert!(html.contains("<style>") && html.contains("<script>"));
    assert!(
        network_loads(&html).is_empty(),
        "{:?}",
        network_loads(&html)
    );
    assert!(html.len() < 2_000_000, "{} bytes", html.len());
    // Deterministic: the same inputs give the same bytes.
    let again = tmp("bundled-again.html");
    let mut args2 = args;
    let last = args2.len() - 1;
    args2[last] = again.to_str().unwrap();
    ok(&args2);
    assert_eq!(html.as_bytes(), std::fs::read(&again).unwrap().as_slice());

    // A searched plan with the search's alternatives.
    let (s, plan) = search("report", &SMALL);
    let results = tmp("report.search.json");
    std::fs::write(&results, s.to_string()).unwrap();
    let page = tmp("searched.html");
    ok(&[
        "report",
        "--plan",
        plan.to_str().unwrap(),
        "--search",
        results.to_str().unwrap(),
        "--output",
        page.to_str().unwrap(),
    ]);
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("id=\"alternatives\""));
    assert!(html.contains("step time ("), "why each alternative lost");
    assert!(html.contains("class=\"best\""), "the plan's own row marked");
    assert!(network_loads(&html).is_empty());
    assert!(html.len() < 2_000_000, "{} bytes", html.len());
}

/// A model name with markup is escaped everywhere it appears (autoescaping and plotters' SVG
/// text), never written as a tag.
#[test]
fn report_escapes_user_text() {
    let src = "tests/data/measured/cpu-exec/1f1b.plan.json";
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(src).unwrap()).unwrap();
    v["model"]["name"] = "<script>alert(1)</script>&".into();
    let plan = tmp("escape.plan.json");
    std::fs::write(&plan, v.to_string()).unwrap();
    let page = tmp("escape.html");
    ok(&[
        "report",
        "--plan",
        plan.to_str().unwrap(),
        "--output",
        page.to_str().unwrap(),
    ]);
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(!html.contains("<script>alert"), "unescaped model name");
    assert!(html.contains("&lt;script&gt;alert(1)&lt;"));
    assert_eq!(html.matches("<script>").count(), 1, "only the zoom script");
}
