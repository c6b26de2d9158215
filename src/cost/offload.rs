//! Activation offloading to host memory: Megatron-Core `--cpu-offloading-num-layers N`, which
//! runs Transformer Engine's `get_cpu_offload_context(num_layers=N, model_layers=L)` with its
//! default scheduling (`DefaultOffloadSynchronizer`, transformer_engine/pytorch/cpu_offload.py;
//! docs/features/other_optimizations/cpu_offloading, TransformerEngine at its mirrored HEAD):
//!
//! - the first N of the L layers are offloaded: each layer's saved tensors are copied to
//!   pinned host memory on one copy stream, starting as the layer saves them;
//! - layer i's copy must be done before layer L - N + i's forward starts (so at most L - N
//!   layers' activations are on the GPU at once), and compute waits for it if it is not;
//! - in the backward, layer i's reload starts before layer L - 1 - N + i's backward and must be
//!   done before layer i's backward starts, again on one stream.
//!
//! The activations held at the forward's end drop by the N offloaded layers' (TE: "peak memory
//! usage of saving activations is (num_layers - num_offloaded_layers) * T"). The time is what
//! the compute stream waits for copies, from the two rules above with every layer's forward
//! (backward) taking the same time and every copy `bytes / host link rate`
//! ([`crate::inputs::hardware::Node::host_link_bytes_per_s`]). The copies' own HBM traffic is
//! left out (TE's note: it competes with memory-bound kernels, not with GEMMs).

use super::Recompute;

/// Megatron-Core's rules for `--cpu-offloading-num-layers` (TransformerConfig.__post_init__ at
/// d98e8a64: fewer layers than the model's, no pipeline parallelism, no recomputation), and a
/// host link the profile states. `Err` names the flag, what is wrong and what would run.
pub fn check(
    n: u32,
    model_layers: u64,
    pp: u64,
    recompute: Recompute,
    host_link: Option<f64>,
    hardware: &str,
) -> Result<(), String> {
    if n == 0 {
        return Ok(());
    }
    if u64::from(n) >= model_layers {
        return Err(format!(
            "--cpu-offloading-num-layers {n}: must be fewer than the model's {model_layers} layers (Megatron-Core: 'CPU offloading can be done only for layers less than {model_layers}'); valid: 1 to {}",
            model_layers.saturating_sub(1)
        ));
    }
    if pp > 1 {
        return Err(format!(
            "--cpu-offloading-num-layers {n} with --pp {pp}: Megatron-Core has no pipeline parallelism with CPU offloading; valid: --pp 1, or --cpu-offloading-num-layers 0"
        ));
    }
    if recompute != Recompute::None {
        return Err(format!(
            "--cpu-offloading-num-layers {n} with --recompute {recompute}: Megatron-Core's CPU offloading does not work with activation recomputation; valid: --recompute none, or --cpu-offloading-num-layers 0"
        ));
    }
    if host_link.is_none() {
        return Err(format!(
            "--cpu-offloading-num-layers {n}: the hardware profile {hardware} has no node.host_link_bytes_per_s (the GPU's link to host memory) to time the copies; valid: add it to the profile, or --cpu-offloading-num-layers 0"
        ));
    }
    Ok(())
}

/// Seconds the compute stream waits for copies over one micro-batch's forward and backward
/// (forward, backward) when the first `n` of `layers` layers are offloaded, each layer taking
/// `forward_s` and `backward_s` and each copy `copy_s`.
pub fn stall_s(n: u64, layers: u64, forward_s: f64, backward_s: f64, copy_s: f64) -> (f64, f64) {
    if n == 0 || layers == 0 {
        return (0.0, 0.0);
    }
    let n = n.min(layers - 1);
    let (mut t, mut copies_end) = (0.0f64, 0.0f64);
    let mut done = vec![0.0f64; n as usize];
    // Forward: layer j starts once layer j - (L - N)'s copy is done; an offloaded layer's copy
    // starts with the layer (or when the stream is free).
    for j in 0..layers {
        if let Some(i) = j.checked_sub(layers - n) {
            t = t.max(done[i as usize]);
        }
        if j < n {
            copies_end = copies_end.max(t) + copy_s;
            done[j as usize] = copies_end;
        }
        t += forward_s;
    }
    let forward = t - layers as f64 * forward_s;
    let (mut t, mut copies_end) = (0.0f64, 0.0f64);
    // Backward, layer L-1 first: before layer j, the reload of layer j - (L - 1 - N) starts;
    // an offloaded layer waits for its own reload.
    for j in (0..layers).rev() {
        if let Some(i) = j.checked_sub(layers - 1 - n).filter(|&i| i < n) {
            copies_end = copies_end.max(t) + copy_s;
            done[i as usize] = copies_end;
        }
        if j < n {
            t = t.max(done[j as usize]);
        }
        t += backward_s;
    }
    (forward, t - layers as f64 * backward_s)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// TE's Figure 3: 2 of 5 layers offloaded, copies shorter than a layer: no wait.
    #[test]
    fn copies_shorter_than_the_window_are_hidden() {
        assert_eq!(stall_s(2, 5, 1.0, 2.0, 0.9), (0.0, 0.0));
        // A copy twice a layer's forward still fits: layer i's has L - N = 3 layers.
        assert_eq!(stall_s(2, 5, 1.0, 2.0, 2.0), (0.0, 0.0));
    }

    /// TE's Figure 4 and its note: N = L - 1 leaves one layer's activations on the GPU, so
    /// compute and transfers cannot overlap beyond the layer that saves them.
    #[test]
    fn offloading_all_but_one_layer_waits_for_every_copy() {
        // Forward: layer i+1 waits for copy i, which started with layer i: c - f each.
        let (f, b) = stall_s(4, 5, 1.0, 1.0, 3.0);
        assert!((f - 4.0 * 2.0).abs() < 1e-12, "{f}");
        // Backward: each offloaded layer's reload starts just before it: c each.
        assert!((b - 4.0 * 3.0).abs() < 1e-12, "{b}");
    }

    /// A slow link: the copy stream falls behind and the waits add up.
    #[test]
    fn a_slow_link_exposes_the_copies_beyond_the_compute() {
        // 40 of 80 layers, copies 3x a forward: the 40 copies take 120 layer-forwards, the
        // last must end before layer 79 starts (79 forwards in): 41 waited.
        let (f, _) = stall_s(40, 80, 1.0, 2.0, 3.0);
        assert!((f - 41.0).abs() < 1e-9, "{f}");
    }

    #[test]
    fn megatron_core_rules_are_refused_by_name() {
        let ok = |n, l, pp, r| check(n, l, pp, r, Some(64e9), "h100-80gb");
        assert!(ok(40, 80, 1, Recompute::None).is_ok());
        assert!(ok(80, 80, 1, Recompute::None)
            .unwrap_err()
            .contains("valid: 1 to 79"));
        assert!(ok(4, 80, 2, Recompute::None)
            .unwrap_err()
            .contains("--pp 1"));
        assert!(ok(4, 80, 1, Recompute::Full)
            .unwrap_err()
            .contains("--recompute none"));
        assert!(check(4, 80, 1, Recompute::None, None, "x")
            .unwrap_err()
            .contains("node.host_link_bytes_per_s"));
    }
}
