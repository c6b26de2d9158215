//! `pplan search` given only what a Megatron-Bridge table row states (model, GPUs, global
//! batch, sequence, precision, hardware) has the row's own layout among its candidates, split
//! as Megatron-Core splits it: DeepSeek-V3's 61 layers at PP 4 x VP 4 (a layout string: 16
//! stages of 3 or 4 layers), Llama 3.1 405B's 126 at PP 8 x VP 8 and Qwen3-235B's 94 at PP 8
//! x VP 4 (the embedding and the loss counted as layers). Rows from
//! `data/runs/megatron-bridge-2025-26.json` (m002, m039, m096, m265).

use pplan::cost::Stack;
use pplan::inputs::hardware::{Hardware, Precision};
use pplan::inputs::model::Model;
use pplan::plan::predict::{predict, PipelineSplit, Split};
use pplan::plan::search::{candidates, search, Pins, SearchRequest};
use pplan::schedule::generators::ScheduleName;

struct Row {
    id: &'static str,
    model: &'static str,
    hardware: &'static str,
    gpus: u64,
    global_batch: u64,
    seq_len: u64,
    precision: &'static str,
    /// (t, p, v, cp, ep, b)
    layout: (u64, u64, u64, u64, u64, u64),
}

const ROWS: [Row; 4] = [
    Row {
        id: "m002",
        model: "deepseek-v3",
        hardware: "gb200-nvl72",
        gpus: 256,
        global_batch: 4096,
        seq_len: 4096,
        precision: "mxfp8",
        layout: (1, 4, 4, 1, 64, 1),
    },
    Row {
        id: "m265",
        model: "deepseek-v3",
        hardware: "h100-80gb",
        gpus: 1024,
        global_batch: 8192,
        seq_len: 4096,
        precision: "fp8",
        layout: (2, 8, 4, 1, 64, 1),
    },
    Row {
        id: "m039",
        model: "llama3-405b",
        hardware: "h100-80gb",
        gpus: 1024,
        global_batch: 1536,
        seq_len: 8192,
        precision: "fp8",
        layout: (8, 8, 8, 2, 1, 1),
    },
    Row {
        id: "m096",
        model: "qwen3-235b-a22b",
        hardware: "h100-80gb",
        gpus: 256,
        global_batch: 8192,
        seq_len: 4096,
        precision: "fp8",
        layout: (2, 8, 4, 1, 32, 1),
    },
];

fn inputs(row: &Row) -> (Model, Hardware) {
    let mut m = Model::preset(row.model).unwrap();
    m.seq_len = row.seq_len;
    (m, Hardware::bundled(row.hardware).unwrap())
}

fn request<'a>(row: &Row, m: &'a Model, hw: &'a Hardware) -> SearchRequest<'a> {
    let mut req = SearchRequest::new(m, hw, row.gpus, row.global_batch);
    req.stack = Stack::megatron_core();
    req.stack.precision = row.precision.parse::<Precision>().unwrap();
    req
}

#[test]
fn each_rows_own_layout_is_a_candidate_split_as_megatron_core_splits_it() {
    for row in &ROWS {
        let (m, hw) = inputs(row);
        let req = request(row, &m, &hw);
        let (t, p, v, cp, ep, b) = row.layout;
        let all = candidates(&req).unwrap();
        let mine: Vec<_> = all
            .iter()
            .filter(|c| {
                (c.tp, c.pp, c.chunks, c.cp, c.ep, c.micro_batch) == (t, p, v, cp, ep, b)
                    && c.schedule == ScheduleName::Interleaved1F1B
            })
            .collect();
        assert!(
            !mine.is_empty(),
            "{}: t={t} p={p} v={v} cp={cp} ep={ep} b={b} interleaved is not among the {} candidates",
            row.id,
            all.len()
        );
        let layers = m.num_layers as u64;
        for c in &mine {
            // 126 + 2 and 94 + 2 divide into p x v stages with the embedding and the loss
            // counted; 61 (+ 1 or 2) does not, and a layout string splits it.
            let want = if (layers + 2) % (p * v) == 0 && layers % (p * v) != 0 {
                Split::Megatron(PipelineSplit::EMBEDDING_AND_LOSS)
            } else {
                Split::Even
            };
            assert_eq!(c.split, want, "{}", row.id);
            // predict accepts it: the structure holds (memory is predict's to report).
            let pred =
                predict(&c.request(&req)).unwrap_or_else(|e| panic!("{}: {c:?}: {e}", row.id));
            assert_eq!(pred.stage_layers.len() as u64, p * v);
            assert_eq!(
                pred.stage_layers.iter().map(|&x| x as u64).sum::<u64>(),
                layers
            );
            let (lo, hi) = (
                pred.stage_layers.iter().min().unwrap(),
                pred.stage_layers.iter().max().unwrap(),
            );
            assert!(hi - lo <= 1, "{}: {:?}", row.id, pred.stage_layers);
        }
    }
}

/// With the row's layout pinned, the search ranks it: a structural refusal would leave no
/// result, and every reason left is memory.
#[test]
fn pinned_row_layouts_are_searched_not_refused() {
    for row in &ROWS {
        let (m, hw) = inputs(row);
        let mut req = request(row, &m, &hw);
        let (t, p, v, cp, ep, b) = row.layout;
        req.pins = Pins {
            tp: Some(t),
            pp: Some(p),
            chunks: Some(v),
            cp: Some(cp),
            ep: Some(ep),
            micro_batch: Some(b),
            schedule: Some(ScheduleName::Interleaved1F1B),
            ..Pins::default()
        };
        match search(&req, None) {
            Ok(o) => {
                assert!(!o.results.is_empty(), "{}", row.id);
                for r in &o.rejected {
                    assert!(r.reason.code().starts_with("memory"), "{}: {:?}", row.id, r);
                }
            }
            Err(e) => {
                let e = e.to_string();
                assert!(
                    !e.contains("too_many_stages") && !e.contains("layers_not_divisible"),
                    "{}: {e}",
                    row.id
                );
                assert!(e.contains("[memory"), "{}: {e}", row.id);
            }
        }
    }
}
