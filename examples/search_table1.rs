//! `pplan search` on every row of Narayanan et al. 2021 Table 1
//! (`data/runs/megatron-2021-table1-a100.json`: a100-80gb, the row's model, GPU count, global
//! batch and sequence length): the paper's (t, p, d), pplan's best
//! configuration, and the rank of the paper's layout (its best micro-batch, schedule, chunks,
//! recomputation, SP and ZeRO-1 setting) in pplan's ranking.
//!
//! `cargo run --release --example search_table1` prints the Markdown table in docs/validation.md.

use pplan::plan::search::{search, Pins, SearchRequest};
use pplan::runs::file::RunsFile;
use pplan::runs::validate::load_rows;

fn main() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/data/runs/megatron-2021-table1-a100.json"
    );
    let file = RunsFile::load(std::path::Path::new(path)).expect("the bundled runs file");
    println!("| row | model | GPUs | B | paper t,p,d | paper layout's best (pplan) | TFLOP/s | pplan's best | TFLOP/s | speed-up | rank of paper's layout |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for loaded in load_rows(&[file]) {
        let prepared = loaded.prepared.expect("a row pplan reads");
        let (model, hw, flags) = (&prepared.model, &prepared.hardware, &prepared.flags);
        let (rt, rp, rd) = (flags.tp, flags.pp, flags.dp.expect("the row's --dp"));
        let mut req = SearchRequest::new(model, hw, prepared.row.gpus, prepared.row.global_batch);
        let best = search(&req, None).expect("search");
        let b = &best.results[0].prediction;
        // The paper's layout with everything else free.
        let mut pinned = req.clone();
        pinned.top = 1;
        pinned.pins = Pins {
            tp: Some(rt),
            pp: Some(rp),
            dp: Some(rd),
            ..Pins::default()
        };
        let paper = search(&pinned, None).expect("paper's layout");
        let pp = &paper.results[0].prediction;
        // Its rank: grow K until the paper's layout appears in the top K.
        let mut rank = None;
        req.top = 10;
        while rank.is_none() {
            let out = search(&req, None).expect("search");
            rank = out
                .results
                .iter()
                .position(|r| {
                    let x = &r.prediction;
                    (x.tp, x.pp, x.dp) == (rt, rp, rd)
                })
                .map(|i| i + 1);
            if (out.results.len() as u64) < out.feasible.min(req.top as u64) {
                break;
            }
            req.top *= 4;
        }
        let describe = |p: &pplan::plan::predict::Prediction| {
            format!(
                "t={} p={} d={} b={} {} v={} {} SP {} ZeRO-1 {}",
                p.tp,
                p.pp,
                p.dp,
                p.micro_batch,
                p.schedule,
                p.chunks,
                p.recompute,
                if p.sequence_parallel { "on" } else { "off" },
                if p.zero1 { "on" } else { "off" }
            )
        };
        println!(
            "| {} | {} | {} | {} | {},{},{} | {} | {:.1} | {} | {:.1} | {:.2}x | {} |",
            prepared.row.id,
            model.name,
            prepared.row.gpus,
            prepared.row.global_batch,
            rt,
            rp,
            rd,
            describe(pp),
            pp.model_tflops_per_gpu,
            describe(b),
            b.model_tflops_per_gpu,
            pp.step_time_s / b.step_time_s,
            rank.map_or("-".to_string(), |r| r.to_string())
        );
    }
}
