//! The search against Narayanan et al. 2021 Table 1 (`data/runs/megatron-2021-table1-a100.json`):
//! for each row (model, GPU count, global batch, sequence length), the best configuration
//! `pplan search` finds must predict at least the throughput pplan predicts for the paper's own
//! (t, p, d) (the row's flags: its best micro-batch and chunk count, `--micro-batch auto
//! --chunks auto`). The paper's choice is inside the search space, so a failure means the
//! search missed or mis-pruned it.

use pplan::plan::search::{search, SearchRequest};
use pplan::runs::file::RunsFile;
use pplan::runs::validate::load_rows;

fn check_rows(max_gpus: u64) {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/data/runs/megatron-2021-table1-a100.json"
    );
    let file = RunsFile::load(std::path::Path::new(path)).unwrap();
    let mut checked = 0;
    for l in load_rows(&[file]) {
        let row = l.prepared.unwrap();
        if row.row.gpus > max_gpus {
            continue;
        }
        let paper = row.predict().unwrap().prediction;
        let req = SearchRequest::new(
            &row.model,
            &row.hardware,
            row.row.gpus,
            row.row.global_batch,
        );
        let found = search(&req, None).unwrap();
        let best = &found.results[0].prediction;
        assert!(best.fits);
        assert!(
            best.step_time_s <= paper.step_time_s,
            "{}: search's best {} s (t={} p={} d={} {} v={}) slower than the paper's layout {} s",
            row.row.id,
            best.step_time_s,
            best.tp,
            best.pp,
            best.dp,
            best.schedule,
            best.chunks,
            paper.step_time_s
        );
        assert!(best.model_tflops_per_gpu >= paper.model_tflops_per_gpu);
        checked += 1;
    }
    assert!(checked > 0);
}

/// The smaller rows (up to 512 GPUs) in the regular suite.
#[test]
fn search_beats_or_matches_the_papers_layout_up_to_512_gpus() {
    check_rows(512);
}

/// Every row, 32 to 3072 GPUs: `cargo test --release --test search_megatron -- --ignored`.
#[test]
#[ignore]
fn search_beats_or_matches_the_papers_layout_all_rows() {
    check_rows(u64::MAX);
}
