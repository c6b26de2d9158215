//! Simulator costs from a layer profile (`--profile FILE`): the stages cut at given layer
//! boundaries, each stage's F, I, W times and bytes summed from its layers, and the transfers
//! between stages over the hardware's links.

use crate::cost::p2p_link_s;
use crate::inputs::hardware::Hardware;
use crate::inputs::profile::{sum_layers, LayerProfile};
use crate::sim::{Costs, StageCost};

/// Simulator costs for stages cut at `boundaries` (first layer of each stage, checked with
/// [`check_boundaries`](crate::inputs::profile::check_boundaries)), stage `s` on device `device_of(s)` of `devices`: per stage the sums of
/// its layers' F, I, W times (B = I + W) and activation bytes; a third of the activations is
/// held until W (as `predict` assumes); static memory is the weights of a device's stages. With
/// `hardware`, the transfer after stage s carries its last layer's `output_bytes` over NVLink
/// (devices in one NVLink domain, `nvlink_domain_gpus` consecutive devices per domain: a node,
/// or an NVL72 rack) or the NICs ([`crate::cost::p2p_link_s`]); without, transfers take no time.
pub fn stage_costs(
    profile: &LayerProfile,
    boundaries: &[u32],
    devices: u32,
    device_of: impl Fn(u32) -> u32,
    hardware: Option<&Hardware>,
) -> Costs {
    let ns = |ms: f64| (ms * 1e6).round().min(1e18) as u64;
    let n = profile.layers.len();
    let mut stages = Vec::with_capacity(boundaries.len());
    let mut static_bytes = vec![0u64; devices as usize];
    let mut out_bytes = Vec::with_capacity(boundaries.len());
    for (s, &first) in boundaries.iter().enumerate() {
        // Clamped so that unchecked boundaries give empty stages, never a panic.
        let first = (first as usize).min(n);
        let end = boundaries
            .get(s + 1)
            .map_or(n, |&b| b as usize)
            .clamp(first, n);
        let sum = sum_layers(&profile.layers[first..end]);
        let (i, w) = (ns(sum.backward_input_ms), ns(sum.backward_weight_ms));
        stages.push(StageCost {
            forward_ns: ns(sum.forward_ms),
            backward_ns: i + w,
            backward_input_ns: i,
            backward_weight_ns: w,
            activation_bytes: sum.activation_bytes,
            weight_grad_bytes: sum.activation_bytes / 3,
        });
        if let Some(b) = static_bytes.get_mut(device_of(s as u32) as usize) {
            *b = b.saturating_add(sum.weight_bytes);
        }
        out_bytes.push(sum.output_bytes);
    }
    let send: Vec<u64> = (0..boundaries.len().saturating_sub(1))
        .map(|s| match hardware {
            None => 0,
            Some(hw) => {
                let domain = hw.nvlink_domain_gpus().max(1);
                let same_domain = device_of(s as u32) / domain == device_of(s as u32 + 1) / domain;
                let secs = p2p_link_s(hw, out_bytes[s] as f64, same_domain);
                (secs * 1e9).round().min(1e18) as u64
            }
        })
        .collect();
    Costs {
        stages,
        send_forward_ns: send.clone(),
        send_backward_ns: send,
        static_bytes,
        ..Costs::default()
    }
}
