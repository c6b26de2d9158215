//! Write a layer profile computed from the cost model, so the bundled example profiles are
//! reproducible:
//!
//! ```text
//! cargo run --example make_profile -- gpt-1t a100-80gb 8 > examples/profiles/gpt-1t-a100-t8.json
//! ```
//!
//! Arguments: model (bundled name or file), hardware (bundled name or file), tensor-parallel
//! size t; optional micro-batch size (default 1). One pipeline device of the profile is a
//! tensor-parallel group of t GPUs: times, weights and activations are per rank, and
//! `output_bytes` is what one rank sends to the next stage with Megatron-LM's scatter/gather
//! (2 b s h / t bytes). Layers: the input embedding, every transformer layer, and the output
//! layer (final norm, logits, cross-entropy) with its tied embedding copy; full recompute.

use pplan::cost::memory::{self, ActDims};
use pplan::cost::{BlockCost, CostModel, Layout, Recompute, Stack};
use pplan::inputs::hardware::Hardware;
use pplan::inputs::model::Model;
use pplan::inputs::profile::{LayerProfile, ProfiledLayer};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 3 {
        eprintln!("usage: make_profile MODEL HARDWARE TP [MICRO_BATCH]");
        std::process::exit(2);
    }
    let fail = |m: String| -> ! {
        eprintln!("error: {m}");
        std::process::exit(2)
    };
    let model = Model::load(&args[0]).unwrap_or_else(|e| fail(e.to_string()));
    let hw = Hardware::load(&args[1]).unwrap_or_else(|e| fail(e.to_string()));
    let tp: u64 = args[2]
        .parse()
        .unwrap_or_else(|_| fail(format!("TP '{}' is not a whole number", args[2])));
    let b: u64 = match args.get(3) {
        Some(s) => s
            .parse()
            .unwrap_or_else(|_| fail(format!("MICRO_BATCH '{s}' is not a whole number"))),
        None => 1,
    };
    let recompute = Recompute::Full;
    let cm = CostModel {
        model: &model,
        hw: &hw,
        layout: Layout {
            tp,
            pp: 1,
            dp: 1,
            cp: 1,
            dp_replicate: 1,
            micro_batch: b,
            chunks: 1,
            sequence_parallel: false,
            recompute,
            ep: 1,
            etp: 1,
        },
        stack: Stack::default(),
    };
    let dims = ActDims::new(&model, b, tp);
    let (s, h) = (model.seq_len, model.hidden_size);
    let p2p_bytes = 2 * b * s * h / tp;
    let ms = |c: BlockCost| {
        (
            c.forward.total_s() * 1e3,
            (c.backward_input.total_s() + c.backward_weight.total_s()) * 1e3,
        )
    };
    let layer = |name: String, c: BlockCost, params: u64, act: u64, out: u64| {
        let (f, bw) = ms(c);
        ProfiledLayer {
            name,
            forward_ms: f,
            backward_ms: bw,
            backward_input_ms: None,
            backward_weight_ms: None,
            weight_bytes: memory::WEIGHT_BYTES_PER_PARAM * params.div_ceil(tp),
            activation_bytes: act,
            output_bytes: out,
        }
    };
    let emb_params = model.vocab_size * h + model.seq_len * h;
    let mut layers = vec![layer(
        "embedding".into(),
        cm.embedding(),
        emb_params,
        memory::embedding_activation_bytes(dims, false),
        p2p_bytes,
    )];
    for i in 0..model.num_layers {
        layers.push(layer(
            format!("layer{i}"),
            cm.layer(),
            model.params_per_layer(),
            memory::layer_activation_bytes(dims, recompute, false),
            p2p_bytes,
        ));
    }
    layers.push(layer(
        "output".into(),
        cm.output_layer(),
        model.vocab_size * h,
        memory::output_activation_bytes(
            dims,
            model.vocab_size,
            cm.stack.cross_entropy_fusion.saved_bytes_per_logit(),
        ),
        0,
    ));
    let profile = LayerProfile {
        source: Some(format!(
            "pplan cost model: {} on {}, t={tp}, micro-batch {b}, full recompute, per tensor-parallel rank (examples/make_profile.rs)",
            args[0], args[1]
        )),
        micro_batch: Some(b),
        layers,
    };
    print!("{}", profile.to_json());
}
