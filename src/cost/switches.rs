//! The training-stack switches that a prediction and a plan file record beside the older
//! ones (docs/report.md): each as `pplan predict`'s flag names it, the stack-dependent ones
//! only where they differ from the defaults of the preset the stack came from, the others
//! only where they differ from the flag's default. `Stack::recorded_switches` and
//! `RecordedSwitches::apply` are inverses, so a plan predicted again with them runs on the
//! same stack. No IO.

use super::stack::{Stack, DEFAULT_MOE_IMBALANCE};
use serde::Serialize;

/// What `predict --format json` and a plan's `parallelism` add for the switches below; every
/// field is omitted at its default (`None`: the preset's), so outputs without them keep
/// their bytes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RecordedSwitches {
    /// `--overlap-p2p-comm` (the preset's default: on with megatron-core and torchtitan).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overlap_p2p_comm: Option<bool>,
    /// `--gradient-accumulation-fusion` (the preset's default: on with megatron-core).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gradient_accumulation_fusion: Option<bool>,
    /// `--grad-reduce-dtype`, `bf16` or `fp32` (the preset's default: fp32 with torchtitan).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grad_reduce_dtype: Option<String>,
    /// `--fsdp-copies` (the preset's default: on with torchtitan).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fsdp_copies: Option<bool>,
    /// `--moe-layer-host-ms` (the preset's default: 8.85 with megatron-core, else 0).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub moe_layer_host_ms: Option<f64>,
    /// `--reshard-after-forward` (default on, omitted).
    #[serde(skip_serializing_if = "is_true")]
    pub reshard_after_forward: bool,
    /// `--moe-imbalance` (default 1.25, omitted).
    #[serde(skip_serializing_if = "is_default_moe_imbalance")]
    pub moe_imbalance: f64,
    /// `--moe-comm-overlap` (default off, omitted).
    #[serde(skip_serializing_if = "is_false")]
    pub moe_comm_overlap: bool,
    /// `--no-scatter-gather` (default false, omitted).
    #[serde(skip_serializing_if = "is_false")]
    pub no_scatter_gather: bool,
}

fn is_true(b: &bool) -> bool {
    *b
}
fn is_false(b: &bool) -> bool {
    !*b
}
/// Whether `x` is `--moe-imbalance`'s default.
pub fn is_default_moe_imbalance(x: &f64) -> bool {
    *x == DEFAULT_MOE_IMBALANCE
}

/// `--grad-reduce-dtype`'s name of a reduction's bytes per gradient.
pub fn grad_reduce_dtype(bytes_per_param: f64) -> &'static str {
    if bytes_per_param >= 4.0 {
        "fp32"
    } else {
        "bf16"
    }
}

/// A host time in seconds as `--moe-layer-host-ms` gives it: milliseconds rounded to the
/// picosecond, so the value typed (`5`, `2.5`) is the value written and read back, and
/// `ms * 1e-3` gives the same seconds again.
pub fn layer_host_ms(seconds: f64) -> f64 {
    (seconds * 1e12).round() / 1e9
}

impl Stack {
    /// This stack's [`RecordedSwitches`], the stack-dependent ones against the preset
    /// [`Stack::preset_name`] names.
    pub fn recorded_switches(&self) -> RecordedSwitches {
        let preset = Stack::preset(self.preset_name()).unwrap_or_default();
        let differs = |a: bool, b: bool| (a != b).then_some(a);
        RecordedSwitches {
            overlap_p2p_comm: differs(!self.blocking_p2p, !preset.blocking_p2p),
            gradient_accumulation_fusion: differs(
                self.grad_accumulation_fusion,
                preset.grad_accumulation_fusion,
            ),
            grad_reduce_dtype: (self.grad_reduce_bytes_per_param
                != preset.grad_reduce_bytes_per_param)
                .then(|| grad_reduce_dtype(self.grad_reduce_bytes_per_param).to_string()),
            fsdp_copies: differs(self.fsdp2, preset.fsdp2),
            moe_layer_host_ms: (self.moe_layer_host_s != preset.moe_layer_host_s)
                .then(|| layer_host_ms(self.moe_layer_host_s)),
            reshard_after_forward: self.reshard_after_forward,
            moe_imbalance: self.moe_imbalance,
            moe_comm_overlap: self.moe_comm_overlap,
            no_scatter_gather: !self.scatter_gather,
        }
    }
}

impl RecordedSwitches {
    /// `stack` (its preset with the other recorded fields applied) with these switches.
    pub fn apply(&self, stack: Stack) -> Stack {
        Stack {
            blocking_p2p: self.overlap_p2p_comm.map_or(stack.blocking_p2p, |on| !on),
            grad_accumulation_fusion: self
                .gradient_accumulation_fusion
                .unwrap_or(stack.grad_accumulation_fusion),
            grad_reduce_bytes_per_param: match self.grad_reduce_dtype.as_deref() {
                Some("fp32") => 4.0,
                Some(_) => 2.0,
                None => stack.grad_reduce_bytes_per_param,
            },
            fsdp2: self.fsdp_copies.unwrap_or(stack.fsdp2),
            moe_layer_host_s: self
                .moe_layer_host_ms
                .map_or(stack.moe_layer_host_s, |ms| ms * 1e-3),
            reshard_after_forward: self.reshard_after_forward,
            moe_imbalance: self.moe_imbalance,
            moe_comm_overlap: self.moe_comm_overlap,
            scatter_gather: !self.no_scatter_gather,
            ..stack
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_preset_records_nothing_and_a_changed_switch_comes_back() {
        for name in Stack::PRESET_NAMES {
            let preset = Stack::preset(name).unwrap();
            let r = preset.recorded_switches();
            assert_eq!(r.apply(preset), preset, "{name}");
            let text = serde_json::to_string(&r).unwrap();
            assert_eq!(text, "{}", "{name}");
            let changed = Stack {
                blocking_p2p: !preset.blocking_p2p,
                grad_accumulation_fusion: !preset.grad_accumulation_fusion,
                grad_reduce_bytes_per_param: 6.0 - preset.grad_reduce_bytes_per_param,
                fsdp2: !preset.fsdp2,
                moe_layer_host_s: 2.5e-3,
                moe_imbalance: 2.0,
                ..preset
            };
            let r = changed.recorded_switches();
            assert_eq!(changed.preset_name(), name);
            assert_eq!(r.apply(preset), changed, "{name}");
        }
    }
}
