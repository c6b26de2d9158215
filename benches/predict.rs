//! How long one `pplan predict` takes: the 1T model of Narayanan et al. 2021 on 3072 GPUs
//! (t = 8, p = 64, d = 6, B = 3072), interleaved with v = 2, b = 1 (512 micro-batches, 131072
//! simulated actions), against a small baseline (GPT 1.7B on 32 GPUs) in the same run.
//!
//! `pplan report`'s page of the 1T plan is timed beside it (`report_gpt_1t_3072_gpus`).
//!
//! `cargo bench --bench predict`

use pplan::inputs::hardware::Hardware;
use pplan::inputs::model::Model;
use pplan::plan::predict::{predict, PredictRequest};

fn main() {
    divan::main();
}

fn request<'a>(m: &'a Model, hw: &'a Hardware, big: bool) -> PredictRequest<'a> {
    let mut r = PredictRequest::new(m, hw);
    if big {
        r.gpus = 3072;
        r.tp = 8;
        r.pp = 64;
        r.global_batch = 3072;
        r.micro_batch = 1;
        r.chunks = 2;
    } else {
        r.gpus = 32;
        r.global_batch = 512;
        r.micro_batch = 16;
    }
    r
}

#[divan::bench]
fn predict_gpt_1t_3072_gpus(bencher: divan::Bencher) {
    let hw = Hardware::bundled("a100-80gb").unwrap();
    let m = Model::preset("gpt-1t").unwrap();
    let r = request(&m, &hw, true);
    bencher.bench(|| predict(divan::black_box(&r)).unwrap());
}

#[divan::bench]
fn predict_gpt_1_7b_32_gpus_baseline(bencher: divan::Bencher) {
    let hw = Hardware::bundled("a100-80gb").unwrap();
    let m = Model::preset("gpt-1.7b").unwrap();
    let r = request(&m, &hw, false);
    bencher.bench(|| predict(divan::black_box(&r)).unwrap());
}

/// `pplan report`'s page for the 1T plan above (its prediction with the timeline recorded,
/// the Gantt chart's bounded view, the memory bars, the emitted commands, the template),
/// beside `predict_gpt_1t_3072_gpus` in the same run: their ratio is what the page adds to
/// a prediction (docs/report.md).
#[divan::bench]
fn report_gpt_1t_3072_gpus(bencher: divan::Bencher) {
    use pplan::report::html::{render, ReportInput};
    let hw = Hardware::bundled("a100-80gb").unwrap();
    let m = Model::preset("gpt-1t").unwrap();
    let mut r = request(&m, &hw, true);
    r.record_timeline = true;
    let pred = predict(&r).unwrap();
    let schedule = pplan::schedule::generators::generate(
        pplan::schedule::generators::ScheduleName::Interleaved1F1B,
        pplan::schedule::generators::GenParams::new(64, 512).chunks(2),
    )
    .unwrap();
    let plan = pplan::plan::plan_file::plan_from_prediction(&m, "a100-80gb", &pred, &schedule);
    bencher.bench(|| {
        let pred = predict(divan::black_box(&r)).unwrap();
        render(&ReportInput {
            plan_file: "best.json",
            plan: &plan,
            prediction: &pred,
            run: None,
            search: None,
            measured: None,
        })
        .unwrap()
    });
}
