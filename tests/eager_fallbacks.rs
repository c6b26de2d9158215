//! Where Megatron-Core falls back to eager PyTorch for a model's own features (`cost::eager`),
//! against hand counts: YaRN's rotary embedding, which Transformer Engine cannot fuse when its
//! attention scale is not 1 (GPT-OSS: 0.1 ln 32 + 1), and GPT-OSS's clamped gated activation,
//! whose two clamps and concatenation run before the fused one unless Transformer Engine's op
//! fuser runs the experts. Then GPT-OSS's published Megatron-Bridge runs, which take both.
//! No timed assertions.

mod common;
use pplan::cost::eager::{yarn_concentration, CLAMPED_GLU_KERNELS, UNFUSED_ROPE_KERNELS};
use pplan::cost::kernel_bytes::{CLAMPED_GLU_BYTES, UNFUSED_ROPE_BYTES};
use pplan::cost::{CostModel, Layout, Recompute, Stack};
use pplan::inputs::arch::RopeScaling;
use pplan::inputs::{Hardware, Model};

/// GPT-OSS's YaRN: factor 32 from 4,096 tokens, no mscale terms.
fn gpt_oss_yarn() -> RopeScaling {
    RopeScaling {
        rope_type: "yarn".into(),
        factor: 32.0,
        original_max_position_embeddings: Some(4096),
        mscale: None,
        mscale_all_dim: None,
    }
}

/// [`common::small_moe`] with GPT-OSS's facts: YaRN and the activation clamped to 7.
fn gpt_oss_like() -> Model {
    let mut m = common::small_moe();
    m.arch.rope_scaling = Some(gpt_oss_yarn());
    m.arch.activation_func_clamp_value = Some(7.0);
    m
}

/// EP 4 of 8 ranks, no tensor parallelism, balanced routing, no host time.
fn cm<'a>(m: &'a Model, hw: &'a Hardware, recompute: Recompute, stack: Stack) -> CostModel<'a> {
    CostModel {
        model: m,
        hw,
        layout: Layout {
            dp: 8,
            ep: 4,
            recompute,
            ..Layout::tensor_parallel(1)
        },
        stack: Stack {
            moe_imbalance: 1.0,
            moe_layer_host_s: 0.0,
            ..stack
        },
    }
}

#[test]
fn yarns_attention_scale_is_megatron_cores() {
    // GPT-OSS: 0.1 ln 32 + 1.
    assert!((yarn_concentration(&gpt_oss_yarn()) - 1.346574).abs() < 1e-6);
    // DeepSeek-V3: mscale 1.0 over mscale_all_dim 1.0.
    let dsv3 = RopeScaling {
        factor: 40.0,
        mscale: Some(1.0),
        mscale_all_dim: Some(1.0),
        ..gpt_oss_yarn()
    };
    assert_eq!(yarn_concentration(&dsv3), 1.0);
    // No extension, no scale.
    let none = RopeScaling {
        factor: 1.0,
        ..gpt_oss_yarn()
    };
    assert_eq!(yarn_concentration(&none), 1.0);
}

#[test]
fn yarns_rotary_embedding_runs_eagerly_on_queries_and_keys() {
    let hw = Hardware::bundled("h100-80gb").unwrap();
    let yarn = gpt_oss_like();
    let plain = common::small_moe();
    let (y, p) = (
        cm(&yarn, &hw, Recompute::None, Stack::megatron_core()),
        cm(&plain, &hw, Recompute::None, Stack::megatron_core()),
    );
    assert!(y.unfused_rope() && !p.unfused_rope());
    // 1,024 tokens x (8 query + 8 key heads) x 128 dimensions.
    let qk = 1024.0 * 16.0 * 128.0;
    assert_eq!(
        y.unfused_rope_bytes(),
        (UNFUSED_ROPE_BYTES.0 * qk, UNFUSED_ROPE_BYTES.1 * qk)
    );
    assert_eq!(UNFUSED_ROPE_BYTES, (24.0, 20.0));
    assert_eq!(p.unfused_rope_bytes(), (0.0, 0.0));
    // The dense part's traffic grows by exactly those bytes; its kernels by q's and k's.
    let (dy, dp) = (y.moe_dense_part_model(), p.moe_dense_part_model());
    let (ly, lp) = (CostModel { model: &dy, ..y }, CostModel { model: &dp, ..p });
    let (my, mp) = (ly.layer_memory_bytes(), lp.layer_memory_bytes());
    assert_eq!(
        my.other_forward_bytes - mp.other_forward_bytes,
        UNFUSED_ROPE_BYTES.0 * qk
    );
    assert_eq!(
        my.other_backward_bytes - mp.other_backward_bytes,
        UNFUSED_ROPE_BYTES.1 * qk
    );
    let (ky, kp) = (ly.layer_kernels(), lp.layer_kernels());
    assert_eq!(ky.forward - kp.forward, 2.0 * UNFUSED_ROPE_KERNELS.0);
    assert_eq!(
        ky.backward_input - kp.backward_input,
        2.0 * UNFUSED_ROPE_KERNELS.1
    );
    // torchtitan's rotary embedding is eager anyway (its own bytes); latent attention's
    // rotary part has its own path.
    let tt = cm(&yarn, &hw, Recompute::None, Stack::torchtitan());
    assert!(!tt.unfused_rope());
}

#[test]
fn the_clamped_activation_costs_its_eager_passes_unless_the_op_fuser_runs_it() {
    let hw = Hardware::bundled("h100-80gb").unwrap();
    let m = gpt_oss_like();
    // Megatron-Core's stack with Transformer Engine's op fuser running the experts.
    let fuser = || Stack {
        te_op_fuser: true,
        ..Stack::megatron_core()
    };
    let eager = cm(&m, &hw, Recompute::None, Stack::megatron_core());
    let fused = cm(&m, &hw, Recompute::None, fuser());
    assert!(eager.moe_eager_clamp() && !fused.moe_eager_clamp());
    // 1,024 tokens x top-2 over EP 4: 2,048 rows of the first GEMM's gated output, 2 x 512.
    let elements = 2048.0 * 1024.0;
    assert_eq!(
        eager.moe_clamp_bytes(),
        (
            CLAMPED_GLU_BYTES.0 * elements,
            CLAMPED_GLU_BYTES.1 * elements
        )
    );
    assert_eq!(CLAMPED_GLU_BYTES, (8.0, 15.0));
    assert_eq!(fused.moe_clamp_bytes(), (0.0, 0.0));
    assert_eq!(eager.moe_clamp_kernels(), CLAMPED_GLU_KERNELS);
    // Kept for the backward: the clamps' input beside the fused activation's (2 bytes each).
    assert_eq!(eager.moe_clamp_saved_bytes(), 2.0 * elements);
    assert_eq!(fused.moe_clamp_saved_bytes(), 0.0);

    // In the MoE layer: the bytes at the HBM rate (the rotary embedding's are in both), the
    // kept bytes in its activations.
    let hbm = hw.hbm_bytes_per_s();
    let (le, lf) = (eager.moe_layer(), fused.moe_layer());
    let df = le.forward.memory_s - lf.forward.memory_s;
    let db = le.backward_input.memory_s - lf.backward_input.memory_s;
    assert!((df * hbm / (CLAMPED_GLU_BYTES.0 * elements) - 1.0).abs() < 1e-9);
    assert!((db * hbm / (CLAMPED_GLU_BYTES.1 * elements) - 1.0).abs() < 1e-9);
    assert_eq!(
        eager.moe_layer_activation_bytes(1 << 30) - fused.moe_layer_activation_bytes(1 << 30),
        2 * 2048 * 1024
    );

    // With the `moe_act` module recomputed the checkpoint keeps its input only, and the
    // backward runs the clamps again: their forward's bytes and kernels once more.
    let act = cm(&m, &hw, Recompute::NormAct, Stack::megatron_core());
    let act_fused = cm(&m, &hw, Recompute::NormAct, fuser());
    assert_eq!(act.moe_clamp_saved_bytes(), 0.0);
    let db =
        act.moe_layer().backward_input.memory_s - act_fused.moe_layer().backward_input.memory_s;
    let again = (CLAMPED_GLU_BYTES.1 + CLAMPED_GLU_BYTES.0) * elements;
    assert!((db * hbm / again - 1.0).abs() < 1e-9, "{db}");
    let (ka, kf) = (act.moe_kernels(2.0), act_fused.moe_kernels(2.0));
    assert_eq!(
        ka.backward_input - kf.backward_input,
        CLAMPED_GLU_KERNELS.1 + CLAMPED_GLU_KERNELS.0
    );
}

/// GPT-OSS 120B's published Megatron-Bridge runs (`data/runs/megatron-bridge-2025-26.json`):
/// every one states YaRN and the clamp (Megatron-Bridge's `GPTOSSProvider120B`); the BF16 rows
/// without the op fuser pay both; the op fuser's rows the rotary embedding only.
#[test]
fn gpt_oss_runs_take_yarn_and_the_clamp() {
    use pplan::runs::file::{Entry, RunsFile};
    use pplan::runs::predict::prepare;
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("data/runs");
    let f = RunsFile::load(&dir.join("megatron-bridge-2025-26.json")).unwrap();
    let mut seen = (0, 0);
    for e in &f.entries {
        let Entry::Ok(r) = e else { continue };
        let p = prepare(r, &dir).unwrap();
        if p.model.arch.activation_func_clamp_value.is_none() {
            continue;
        }
        let req = p.flags.request(&p.model, &p.hardware, None).unwrap();
        let c = req.cost_model(req.dp.unwrap_or(1));
        assert!(c.unfused_rope(), "{}", r.id);
        assert_eq!(c.moe_eager_clamp(), !c.stack.te_op_fuser, "{}", r.id);
        seen.0 += 1;
        seen.1 += usize::from(c.moe_eager_clamp());
    }
    assert_eq!(seen, (18, 15));
}
