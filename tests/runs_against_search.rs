//! `pplan validate --runs --against-search`: each row's own layout beside an unpinned
//! search's best. On three Megatron-Bridge rows (tests/data/runs/bridge-against-search.json,
//! copied from data/runs/megatron-bridge-2025-26.json): the structure of the JSON and the
//! table, the row's own figures equal `validate --runs`'s, the search's best equals
//! `pplan search` run by hand with the row's flags less its layout, and the excluded row is
//! shown but not counted. The whole table of docs/search.md is checked by
//! `docs_search_table_matches_the_command` (ignored: a search per row, minutes on 2 cores).

mod common;

use common::{json, pplan};

const FILE: &str = "tests/data/runs/bridge-against-search.json";

fn row<'a>(v: &'a serde_json::Value, id: &str) -> &'a serde_json::Value {
    v["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == id)
        .unwrap_or_else(|| panic!("no row {id}"))
}

#[test]
fn own_layout_is_predicted_as_validate_does_and_the_claim_is_the_ratio() {
    let (code, out, err) = pplan(&[
        "validate",
        "--runs",
        FILE,
        "--against-search",
        "--format",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v = json(&out);
    assert_eq!(v["schema_version"], 1);
    let (vcode, vout, verr) = pplan(&["validate", "--runs", FILE, "--format", "json"]);
    assert_eq!(vcode, 0, "{verr}");
    let validated = json(&vout);
    let ids: Vec<&str> = v["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["m090", "m068", "m248"], "rows in file order");
    for id in ["m090", "m068"] {
        let (c, w) = (row(&v, id), row(&validated, id));
        // The own layout is predicted exactly as validate --runs predicts it.
        assert_eq!(c["own_layout"], w["layout"], "{id}");
        assert_eq!(c["own_step_time_s"], w["step_time_s"], "{id}");
        assert_eq!(
            c["own_tokens_per_s_per_gpu"], w["tokens_per_s_per_gpu"],
            "{id}"
        );
        assert_eq!(c["own_fits"], w["fits"], "{id}");
        assert_eq!(c["measured_tokens_per_s_per_gpu"], w["measured"], "{id}");
        assert!(c["problem"].is_null(), "{id}: {}", c["problem"]);
        // The claim is the ratio of the two predictions.
        let (own, best) = (
            c["own_tokens_per_s_per_gpu"].as_f64().unwrap(),
            c["search_tokens_per_s_per_gpu"].as_f64().unwrap(),
        );
        let claims = c["claims"].as_f64().unwrap();
        assert!((claims - (best / own - 1.0)).abs() < 1e-12, "{id}");
        // The search's best is its best: at least as fast as the row's own layout where that
        // layout fits, and it is ranked against the feasible candidates.
        if c["own_fits"] == true {
            assert!(
                claims >= -1e-12,
                "{id}: the search found nothing as fast as the row"
            );
        }
        let at_most = c["own_rank_at_most"].as_u64().unwrap();
        assert!(at_most >= 1 && at_most <= c["search_feasible"].as_u64().unwrap() + 1);
        if let Some(rank) = c["own_rank"].as_u64() {
            assert!(rank <= at_most, "{id}");
        }
        assert_eq!(
            c["own_in_space"], true,
            "{id}: a recipe layout the search enumerates"
        );
        assert!(c["differences"].is_array());
    }
    // The excluded row is shown, not counted.
    let m248 = row(&v, "m248");
    assert_eq!(m248["excluded"], true);
    assert!(m248["claims"].is_null());
    assert_eq!(v["count"], 2);
    assert_eq!(v["problems"], 0);
    let claims: Vec<f64> = ["m090", "m068"]
        .iter()
        .map(|id| row(&v, id)["claims"].as_f64().unwrap())
        .collect();
    let median = (claims[0] + claims[1]) / 2.0;
    assert!((v["median"].as_f64().unwrap() - median).abs() < 1e-12);
}

/// The search each row is compared with is `pplan search` with the row's model, GPUs, batch,
/// sequence and hardware and its args less the layout flags.
#[test]
fn the_rows_search_is_pplan_search_without_the_layout_flags() {
    let (code, out, err) = pplan(&[
        "validate",
        "--runs",
        FILE,
        "--against-search",
        "--format",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v = json(&out);
    let file: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(FILE))
            .unwrap(),
    )
    .unwrap();
    let r = file["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == "m090")
        .unwrap();
    let layout = [
        "--tp",
        "--pp",
        "--dp",
        "--cp",
        "--ep",
        "--etp",
        "--micro-batch",
        "--schedule",
        "--chunks",
        "--recompute",
        "--sequence-parallel",
        "--zero",
        "--pipeline-layout",
    ];
    let mut args: Vec<String> = vec![
        "search".into(),
        "--model".into(),
        r["model"].as_str().unwrap().into(),
        "--hardware".into(),
        r["hardware"].as_str().unwrap().into(),
        "--gpus".into(),
        r["gpus"].to_string(),
        "--global-batch".into(),
        r["global_batch"].to_string(),
        "--seq-len".into(),
        r["seq_len"].to_string(),
        "--top".into(),
        "1".into(),
        "--format".into(),
        "json".into(),
    ];
    let row_args: Vec<&str> = r["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    let mut i = 0;
    while i < row_args.len() {
        if layout.contains(&row_args[i]) {
            i += 2;
        } else {
            args.push(row_args[i].into());
            i += 1;
        }
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, out, err) = pplan(&args);
    assert_eq!(code, 0, "{err}");
    let s = json(&out);
    let best = &s["results"][0];
    let c = row(&v, "m090");
    assert_eq!(c["search_step_time_s"], best["step_time_s"]);
    assert_eq!(
        c["search_tokens_per_s_per_gpu"],
        best["tokens_per_s_per_gpu"]
    );
    assert_eq!(c["search_recompute"], best["recompute"]);
    assert_eq!(c["search_feasible"], s["feasible"]);
    assert_eq!(c["search_evaluated"], s["evaluated"]);
}

#[test]
fn the_table_has_a_row_per_run_and_the_summary() {
    let (code, out, err) = pplan(&["validate", "--runs", FILE, "--against-search"]);
    assert_eq!(code, 0, "{err}");
    let rows: Vec<&str> = out.lines().filter(|l| l.starts_with("| m")).collect();
    assert_eq!(rows.len(), 3, "{out}");
    assert!(rows[2].contains("excluded"), "{}", rows[2]);
    assert!(out.contains("Not counted: m248:"), "{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("search claims over 2 rows: median ")),
        "{out}"
    );
    // Deterministic: the same bytes again.
    let (_, again, _) = pplan(&["validate", "--runs", FILE, "--against-search"]);
    assert_eq!(out, again);
}

#[test]
fn against_search_needs_runs() {
    let (code, _, err) = pplan(&["validate", "--against-search"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--runs"), "{err}");
}

/// The rows of docs/search.md's table for the fixture's rows (copied unchanged from the
/// Bridge file) are what the command prints for them now: a cheap check, in CI, that the
/// page's table is not stale; the whole table is checked by the ignored test below.
#[test]
fn docs_search_table_rows_of_the_fixture_are_current() {
    let (code, out, err) = pplan(&["validate", "--runs", FILE, "--against-search"]);
    assert_eq!(code, 0, "{err}");
    let doc = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/search.md"),
    )
    .unwrap();
    for id in ["m090", "m068", "m248"] {
        let prefix = format!("| {id} |");
        let now = out.lines().find(|l| l.starts_with(&prefix)).unwrap();
        let page = doc
            .lines()
            .find(|l| l.starts_with(&prefix))
            .unwrap_or_else(|| panic!("docs/search.md has no row {id}"));
        assert_eq!(
            page, now,
            "docs/search.md's table is stale: run scripts/refresh_search_table.py"
        );
    }
}

/// docs/search.md's table is the command's output, byte for byte:
/// `cargo test --release --test runs_against_search -- --ignored` (a search per row of
/// both Bridge files: minutes on 2 cores). `scripts/refresh_search_table.py` rewrites it.
#[test]
#[ignore]
fn docs_search_table_matches_the_command() {
    let (code, out, err) = pplan(&[
        "validate",
        "--runs",
        "data/runs/megatron-bridge-2025-26.json",
        "data/runs/megatron-bridge-gb300.json",
        "--against-search",
    ]);
    assert_eq!(code, 0, "{err}");
    let doc = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/search.md"),
    )
    .unwrap();
    let begin = "<!-- against-search: begin -->\n";
    let end = "<!-- against-search: end -->";
    let start = doc.find(begin).expect("the begin marker") + begin.len();
    let stop = doc[start..].find(end).expect("the end marker") + start;
    assert_eq!(
        doc[start..stop].trim(),
        out.trim(),
        "docs/search.md's table is stale: run scripts/refresh_search_table.py"
    );
}
