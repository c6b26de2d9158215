//! How long the default `pplan search --gpus 3072` takes (the Megatron-LM paper's 1T model on
//! a100-80gb, B = 3072, with the CLI's default `--stack megatron-core`: flash attention, so
//! context parallelism is enumerated too), against one `pplan predict` of the paper's own
//! configuration in the same run (t = 8, p = 64, d = 6, b = 1, interleaved v = 2) as the
//! baseline. `search_3072_gpus_megatron_2021` is the same search with `--stack megatron-2021`
//! (unfused attention, no context parallelism), the default before the stack became today's.
//!
//! `cargo bench --bench search`. divan's throughput column for `search_default_3072_gpus` is
//! candidates evaluated per second (every enumerated candidate is checked; the memory-feasible
//! ones are ordered by a proven lower bound and simulated best first). The counts are printed
//! once on stderr so the rates of each stage can be derived.
//!
//! `search_llama3_405b_16384_gpus_seq8192` is the beyond-3D case: `pplan search --gpus 16384
//! --model llama3-405b --hardware h100-80gb --seq-len 8192`, which also enumerates context
//! parallelism and the ZeRO stages 0-3.
//!
//! `search_llama3_405b_8192_gb200_seq131072_mxfp8` is the long-context Blackwell case: `pplan
//! search --gpus 8192 --model llama3-405b --hardware gb200-nvl72 --seq-len 131072 --precision
//! mxfp8` (context parallelism inside the 72-GPU NVLink domain).
//!
//! `search_deepseek_v3_2048_h800` is `pplan search --gpus 2048 --model deepseek-v3 --hardware
//! h800` (the bundled defaults otherwise: B = 3072), the mixture-of-experts case whose search
//! also enumerates ep and etp; its counts are printed the same way and its time is quoted as a
//! ratio to the same baseline.

use pplan::cost::Stack;
use pplan::inputs::hardware::Hardware;
use pplan::inputs::model::Model;
use pplan::plan::predict::{predict, PredictRequest};
use pplan::plan::search::{search, SearchRequest};

/// A search request as the CLI makes it by default (`--stack megatron-core`).
fn cli_default<'a>(m: &'a Model, hw: &'a Hardware, gpus: u64, batch: u64) -> SearchRequest<'a> {
    let mut r = SearchRequest::new(m, hw, gpus, batch);
    r.stack = Stack::megatron_core();
    r
}

fn main() {
    let hw = Hardware::bundled("a100-80gb").unwrap();
    let m = Model::preset("gpt-1t").unwrap();
    let o = search(&cli_default(&m, &hw, 3072, 3072), None).unwrap();
    eprintln!(
        "default search: {} layouts, {} candidates evaluated, {} rejected by memory, {} feasible, {} simulated, {} pruned by the bound, {} schedules summarised",
        o.layouts, o.evaluated, o.memory_rejected, o.feasible, o.simulated, o.pruned, o.schedules_summarised
    );
    let (m, hw, req) = llama3_405b_request();
    let o = search(&req(&m, &hw), None).unwrap();
    eprintln!(
        "llama3-405b on 16384 h100-80gb, seq 8192, flash: {} layouts, {} candidates evaluated, {} feasible, {} simulated, {} pruned by the bound",
        o.layouts, o.evaluated, o.feasible, o.simulated, o.pruned
    );
    let h800 = Hardware::bundled("h800").unwrap();
    let v3 = Model::preset("deepseek-v3").unwrap();
    let o = search(&cli_default(&v3, &h800, 2048, 3072), None).unwrap();
    eprintln!(
        "deepseek-v3 search: {} layouts, {} candidates evaluated, {} rejected by memory, {} feasible, {} simulated, {} pruned by the bound, {} schedules summarised; best fits: {}",
        o.layouts, o.evaluated, o.memory_rejected, o.feasible, o.simulated, o.pruned, o.schedules_summarised,
        o.results.first().is_some_and(|r| r.prediction.fits)
    );
    divan::main();
}

type RequestFor = for<'a> fn(&'a Model, &'a Hardware) -> SearchRequest<'a>;

fn llama3_405b_request() -> (Model, Hardware, RequestFor) {
    let hw = Hardware::bundled("h100-80gb").unwrap();
    let mut m = Model::preset("llama3-405b").unwrap();
    m.seq_len = 8192;
    fn req<'a>(m: &'a Model, hw: &'a Hardware) -> SearchRequest<'a> {
        cli_default(m, hw, 16384, 3072)
    }
    (m, hw, req)
}

/// Times `req`, counting the candidates it evaluates as divan's items.
fn time_search(bencher: divan::Bencher, req: &SearchRequest) {
    let evaluated = search(req, None).unwrap().evaluated;
    bencher
        .counter(divan::counter::ItemsCount::new(evaluated as usize))
        .bench(|| search(divan::black_box(req), None).unwrap());
}

#[divan::bench(sample_count = 10, sample_size = 1)]
fn search_llama3_405b_16384_gpus_seq8192(bencher: divan::Bencher) {
    let (m, hw, req) = llama3_405b_request();
    let req = req(&m, &hw);
    time_search(bencher, &req);
}

#[divan::bench(sample_count = 10, sample_size = 1)]
fn search_llama3_405b_8192_gb200_seq131072_mxfp8(bencher: divan::Bencher) {
    let hw = Hardware::bundled("gb200-nvl72").unwrap();
    let mut m = Model::preset("llama3-405b").unwrap();
    m.seq_len = 131072;
    let mut req = cli_default(&m, &hw, 8192, 3072);
    req.stack.precision = pplan::inputs::hardware::Precision::Mxfp8;
    time_search(bencher, &req);
}

#[divan::bench(sample_count = 10, sample_size = 1)]
fn search_deepseek_v3_2048_h800(bencher: divan::Bencher) {
    let hw = Hardware::bundled("h800").unwrap();
    let m = Model::preset("deepseek-v3").unwrap();
    let req = cli_default(&m, &hw, 2048, 3072);
    time_search(bencher, &req);
}

#[divan::bench(sample_count = 10, sample_size = 1)]
fn search_default_3072_gpus(bencher: divan::Bencher) {
    let hw = Hardware::bundled("a100-80gb").unwrap();
    let m = Model::preset("gpt-1t").unwrap();
    let req = cli_default(&m, &hw, 3072, 3072);
    time_search(bencher, &req);
}

#[divan::bench(sample_count = 10, sample_size = 1)]
fn search_3072_gpus_megatron_2021(bencher: divan::Bencher) {
    let hw = Hardware::bundled("a100-80gb").unwrap();
    let m = Model::preset("gpt-1t").unwrap();
    let req = SearchRequest::new(&m, &hw, 3072, 3072);
    time_search(bencher, &req);
}

#[divan::bench(sample_count = 20)]
fn predict_gpt_1t_paper_config_baseline(bencher: divan::Bencher) {
    let hw = Hardware::bundled("a100-80gb").unwrap();
    let m = Model::preset("gpt-1t").unwrap();
    let mut r = PredictRequest::new(&m, &hw);
    r.gpus = 3072;
    r.tp = 8;
    r.pp = 64;
    r.global_batch = 3072;
    r.micro_batch = 1;
    r.chunks = 2;
    bencher.bench(|| predict(divan::black_box(&r)).unwrap());
}
