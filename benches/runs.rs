//! How long `pplan validate --runs data/runs/*.json` takes: every bundled run read (files,
//! model configs, flags) and predicted, with the report written, against one `pplan predict`
//! of the 1T model on 3072 GPUs (the `predict` bench's large case) in the same run. The issue's
//! bar is 5 s on 2 cores for the whole set.
//!
//! `cargo bench --bench runs`

use pplan::runs::file::RunsFile;
use pplan::runs::validate::{load_rows, markdown, predict_rows, GroupBy};

fn main() {
    divan::main();
}

fn files() -> Vec<RunsFile> {
    RunsFile::load_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/data/runs").as_ref()).unwrap()
}

/// Everything `pplan validate --runs data/runs/*.json` does but print.
#[divan::bench(sample_count = 10)]
fn validate_every_bundled_run() -> usize {
    let files = files();
    let rows = load_rows(&files);
    let results = predict_rows(&rows);
    markdown(&files, &results, GroupBy::Source).len()
}

/// The baseline: one prediction of the 1T model on 3072 GPUs (b = 1, v = 2).
#[divan::bench(sample_count = 10)]
fn predict_gpt_1t_3072_gpus_baseline(bencher: divan::Bencher) {
    use pplan::inputs::{Hardware, Model};
    use pplan::plan::predict::{predict, PredictRequest};
    let hw = Hardware::bundled("a100-80gb").unwrap();
    let m = Model::preset("gpt-1t").unwrap();
    let mut r = PredictRequest::new(&m, &hw);
    (r.gpus, r.tp, r.pp, r.global_batch, r.micro_batch, r.chunks) = (3072, 8, 64, 3072, 1, 2);
    bencher.bench(|| predict(divan::black_box(&r)).unwrap());
}
