//! The search against Narayanan et al. 2021 Table 1: for each row (model, GPU count, global
//! batch, sequence length), the best configuration `pplan search` finds must predict at least
//! the throughput pplan predicts for the paper's own (t, p, d) (with its best micro-batch and
//! chunk count, `validation::validate_megatron`'s choice). The paper's choice is inside the
//! search space, so a failure means the search missed or mis-pruned it.

use pplan::inputs::hardware::Hardware;
use pplan::plan::predict::{best_micro_batch_and_chunks, PredictRequest};
use pplan::plan::search::{search, SearchRequest};
use pplan::report::validation::{megatron_rows, row_model};

fn check_rows(max_gpus: u64) {
    let hw = Hardware::bundled("a100-80gb").unwrap();
    let mut checked = 0;
    for row in megatron_rows()
        .into_iter()
        .filter(|r| r.gpus_total <= max_gpus)
    {
        let model = row_model(&row).unwrap();
        let mut paper = PredictRequest::new(&model, &hw);
        paper.gpus = row.gpus_total;
        paper.tp = row.t;
        paper.pp = row.p;
        paper.dp = Some(row.d);
        paper.global_batch = row.global_batch;
        let paper = best_micro_batch_and_chunks(&paper, None, None)
            .unwrap()
            .unwrap();
        let req = SearchRequest::new(&model, &hw, row.gpus_total, row.global_batch);
        let found = search(&req, None).unwrap();
        let best = &found.results[0].prediction;
        assert!(best.fits);
        assert!(
            best.step_time_s <= paper.step_time_s,
            "{}: search's best {} s (t={} p={} d={} {} v={}) slower than the paper's layout {} s",
            row.id,
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
