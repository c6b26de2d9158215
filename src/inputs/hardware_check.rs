//! A hardware profile checked against what its numbers mean: every field in its physical range
//! (docs/inputs.md, "Hardware profiles"), fractions in (0, 1], counts whole, the topology one
//! pplan models. Split from `hardware` to keep files short; errors are `HardwareError::Invalid`
//! naming the field and the file.

use super::hardware::{Hardware, HardwareError};

/// Each numeric field's physical range: (path, value, low, high, the range in words). Low ends
/// admit the CPU executor's profiles (`tests/data/measured/cpu-exec/hw.json`: 7.3e10 FLOP/s,
/// 1.9e10 B/s); high ends are ten times the largest bundled figure (B300's 15 PFLOP/s FP4,
/// 8 TB/s HBM, GB300 NVL72's 1.8 TB/s NVLink per direction) rounded up.
type Range = (&'static str, fn(&Hardware) -> f64, f64, f64, &'static str);
const RANGES: &[Range] = &[
    (
        "gpu.peak_flops_per_s",
        |h| h.gpu.peak_flops_per_s,
        1e9,
        1e17,
        "1e9 to 1e17 FLOP/s",
    ),
    (
        "gpu.peak_fp8_flops_per_s",
        |h| h.gpu.peak_fp8_flops_per_s,
        1e9,
        1e17,
        "0 (none) or 1e9 to 1e17 FLOP/s",
    ),
    (
        "gpu.peak_fp4_flops_per_s",
        |h| h.gpu.peak_fp4_flops_per_s,
        1e9,
        1e17,
        "0 (none) or 1e9 to 1e17 FLOP/s",
    ),
    (
        "gpu.memory_bytes",
        |h| h.gpu.memory_bytes as f64,
        (1u64 << 30) as f64,
        (1u64 << 44) as f64,
        "1 GiB to 16 TiB",
    ),
    (
        "gpu.hbm_bandwidth_bytes_per_s",
        |h| h.gpu.hbm_bandwidth_bytes_per_s,
        1e8,
        1e14,
        "1e8 to 1e14 bytes/s",
    ),
    (
        "gpu.hbm_efficiency",
        |h| h.gpu.hbm_efficiency,
        0.01,
        1.0,
        "0.01 to 1",
    ),
    (
        "gpu.gemm_efficiency_max",
        |h| h.gpu.gemm_efficiency_max,
        0.01,
        1.0,
        "0.01 to 1",
    ),
    (
        "gpu.gemm_half_dim",
        |h| h.gpu.gemm_half_dim,
        0.0,
        1e6,
        "0 to 1e6 elements",
    ),
    (
        "node.nvlink_bandwidth_bytes_per_s",
        |h| h.node.nvlink_bandwidth_bytes_per_s,
        1e6,
        1e14,
        "1e6 to 1e14 bytes/s",
    ),
    (
        "node.nvlink_efficiency",
        |h| h.node.nvlink_efficiency,
        0.01,
        1.0,
        "0.01 to 1",
    ),
    (
        "node.nvlink_latency_s",
        |h| h.node.nvlink_latency_s,
        0.0,
        1.0,
        "0 to 1 s",
    ),
    (
        "node.nic_bandwidth_bytes_per_s",
        |h| h.node.nic_bandwidth_bytes_per_s,
        1e6,
        1e14,
        "1e6 to 1e14 bytes/s",
    ),
    (
        "node.nic_efficiency",
        |h| h.node.nic_efficiency,
        0.01,
        1.0,
        "0.01 to 1",
    ),
    (
        "node.nic_latency_s",
        |h| h.node.nic_latency_s,
        0.0,
        1.0,
        "0 to 1 s",
    ),
    (
        "node.gpus_per_node",
        |h| f64::from(h.node.gpus_per_node),
        1.0,
        1024.0,
        "1 to 1024",
    ),
    (
        "node.nics_per_node",
        |h| f64::from(h.node.nics_per_node),
        1.0,
        1024.0,
        "1 to 1024",
    ),
    (
        "network.levels",
        |h| f64::from(h.network.levels),
        1.0,
        8.0,
        "1 to 8",
    ),
    (
        "network.nodes_per_leaf_switch",
        |h| f64::from(h.network.nodes_per_leaf_switch),
        1.0,
        100_000.0,
        "1 to 100,000",
    ),
    (
        "network.oversubscription",
        |h| h.network.oversubscription,
        1.0,
        64.0,
        "1 (non-blocking) to 64",
    ),
];

impl Hardware {
    pub(crate) fn check(&self, origin: &str) -> Result<(), HardwareError> {
        let invalid = |field: &'static str, reason: String| HardwareError::Invalid {
            name: self.name.clone(),
            origin: origin.to_string(),
            field,
            reason,
        };
        // The first given value among `fields` that is not finite and `valid`, named with
        // `what` a valid one is.
        let given =
            |fields: &[(&'static str, Option<f64>)], valid: &dyn Fn(f64) -> bool, what: &str| {
                for &(field, v) in fields {
                    match v {
                        Some(v) if !(v.is_finite() && valid(v)) => {
                            return Err(invalid(field, format!("must be {what} (got {v})")));
                        }
                        _ => {}
                    }
                }
                Ok(())
            };
        let positive = [
            ("gpu.peak_flops_per_s", self.gpu.peak_flops_per_s),
            (
                "gpu.hbm_bandwidth_bytes_per_s",
                self.gpu.hbm_bandwidth_bytes_per_s,
            ),
            ("gpu.gemm_half_dim", self.gpu.gemm_half_dim + 1.0),
            (
                "node.nvlink_bandwidth_bytes_per_s",
                self.node.nvlink_bandwidth_bytes_per_s,
            ),
            (
                "node.nic_bandwidth_bytes_per_s",
                self.node.nic_bandwidth_bytes_per_s,
            ),
            ("network.oversubscription", self.network.oversubscription),
            ("gpu.memory_bytes", self.gpu.memory_bytes as f64),
        ];
        for (field, v) in positive {
            if !(v.is_finite() && v > 0.0) {
                return Err(invalid(
                    field,
                    format!("must be a positive number (got {v})"),
                ));
            }
        }
        let fractions = [
            ("gpu.hbm_efficiency", self.gpu.hbm_efficiency),
            ("gpu.gemm_efficiency_max", self.gpu.gemm_efficiency_max),
            ("node.nvlink_efficiency", self.node.nvlink_efficiency),
            ("node.nic_efficiency", self.node.nic_efficiency),
        ];
        let optional = [
            ("gpu.gemm_training_factor", self.gpu.gemm_training_factor),
            (
                "gpu.cross_entropy_hbm_efficiency",
                self.gpu.cross_entropy_hbm_efficiency,
            ),
            (
                "gpu.attention_efficiency_forward",
                self.gpu.attention_efficiency_forward,
            ),
            (
                "gpu.attention_efficiency_backward",
                self.gpu.attention_efficiency_backward,
            ),
            (
                "gpu.attention_fa2_efficiency_forward",
                self.gpu.attention_fa2_efficiency_forward,
            ),
            (
                "gpu.attention_fa2_efficiency_backward",
                self.gpu.attention_fa2_efficiency_backward,
            ),
            (
                "gpu.attention_triton_efficiency_forward",
                self.gpu.attention_triton_efficiency_forward,
            ),
            (
                "gpu.attention_triton_efficiency_backward",
                self.gpu.attention_triton_efficiency_backward,
            ),
            (
                "gpu.attention_noncausal_efficiency_forward",
                self.gpu.attention_noncausal_efficiency_forward,
            ),
            (
                "gpu.attention_noncausal_efficiency_backward",
                self.gpu.attention_noncausal_efficiency_backward,
            ),
        ];
        for (field, v) in fractions
            .into_iter()
            .chain(optional.into_iter().filter_map(|(f, v)| Some((f, v?))))
        {
            if !(v.is_finite() && v > 0.0 && v <= 1.0) {
                return Err(invalid(field, format!("must be in (0, 1] (got {v})")));
            }
        }
        given(
            &[
                (
                    "gpu.attention_half_seq_forward",
                    self.gpu.attention_half_seq_forward,
                ),
                (
                    "gpu.attention_half_seq_backward",
                    self.gpu.attention_half_seq_backward,
                ),
                (
                    "gpu.attention_fa2_half_seq_forward",
                    self.gpu.attention_fa2_half_seq_forward,
                ),
                (
                    "gpu.attention_fa2_half_seq_backward",
                    self.gpu.attention_fa2_half_seq_backward,
                ),
                (
                    "gpu.attention_triton_half_seq_forward",
                    self.gpu.attention_triton_half_seq_forward,
                ),
                (
                    "gpu.attention_triton_half_seq_backward",
                    self.gpu.attention_triton_half_seq_backward,
                ),
                ("gpu.attention_half_heads", self.gpu.attention_half_heads),
                ("gpu.attention_half_work", self.gpu.attention_half_work),
                (
                    "gpu.attention_noncausal_half_seq_forward",
                    self.gpu.attention_noncausal_half_seq_forward,
                ),
                (
                    "gpu.attention_noncausal_half_seq_backward",
                    self.gpu.attention_noncausal_half_seq_backward,
                ),
            ],
            &|v| v >= 0.0,
            "a number of tokens or heads, 0 or more",
        )?;
        given(
            &[
                (
                    "gpu.attention_floor_head_dim_forward",
                    self.gpu.attention_floor_head_dim_forward,
                ),
                (
                    "gpu.attention_floor_head_dim_backward",
                    self.gpu.attention_floor_head_dim_backward,
                ),
            ],
            &|v| (1.0..=1024.0).contains(&v),
            "a head dimension from 1 to 1024",
        )?;
        if self.gpu.attention_half_heads.is_some() && self.gpu.attention_half_work.is_some() {
            return Err(invalid(
                "gpu.attention_half_work",
                "give either it (heads x tokens) or gpu.attention_half_heads (heads), not both"
                    .to_string(),
            ));
        }
        given(
            &[(
                "gpu.sustained_clock_fraction",
                self.gpu.sustained_clock_fraction,
            )],
            &|v| v > 0.0 && v <= 1.0,
            "a fraction in (0, 1]",
        )?;
        given(
            &[("gpu.power_limit_w", self.gpu.power_limit_w)],
            &|v| (10.0..=5000.0).contains(&v),
            "from 10 to 5000 W",
        )?;
        given(
            &[
                ("gpu.kernel_launch_s", self.gpu.kernel_launch_s),
                ("gpu.kernel_gap_s", self.gpu.kernel_gap_s),
                ("gpu.graph_kernel_gap_s", self.gpu.graph_kernel_gap_s),
                ("gpu.gemm_latency_s", self.gpu.gemm_latency_s),
            ],
            &|v| (0.0..1.0).contains(&v),
            "a number of seconds from 0 to 1",
        )?;
        given(
            &[(
                "node.host_link_bytes_per_s",
                self.node.host_link_bytes_per_s,
            )],
            &|v| (1e6..=1e14).contains(&v),
            "from 1e6 to 1e14 bytes/s",
        )?;
        given(
            &[
                (
                    "gpu.fp8_split_accumulator_slowdown",
                    self.gpu.fp8_split_accumulator_slowdown,
                ),
                (
                    "gpu.fp8_block_scaling_slowdown",
                    self.gpu.fp8_block_scaling_slowdown,
                ),
            ],
            &|v| v >= 1.0,
            "a number >= 1",
        )?;
        given(
            &[
                ("node.nvlink_latency_s", Some(self.node.nvlink_latency_s)),
                ("node.nic_latency_s", Some(self.node.nic_latency_s)),
            ],
            &|v| v >= 0.0,
            ">= 0",
        )?;
        for (field, v, what) in [
            (
                "gpu.peak_fp8_flops_per_s",
                self.gpu.peak_fp8_flops_per_s,
                "FP8",
            ),
            (
                "gpu.peak_fp4_flops_per_s",
                self.gpu.peak_fp4_flops_per_s,
                "FP4",
            ),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(invalid(
                    field,
                    format!("must be a positive number, or 0 for no {what} tensor cores (got {v})"),
                ));
            }
        }
        if self.network.oversubscription < 1.0 {
            return Err(invalid(
                "network.oversubscription",
                format!(
                    "{} is below 1: it is the leaf's downlink over uplink bandwidth, 1 for a \
                     non-blocking fabric, 2 for 2:1 (valid: 1 to 64)",
                    self.network.oversubscription
                ),
            ));
        }
        // Physical ranges: a profile's numbers describe a machine that exists. The bounds are
        // wide (a CPU run's profile at the low end, ten times today's largest GPU and links at
        // the top, docs/inputs.md "Ranges") so that a typo of a few powers of ten, or a fitted
        // term gone astray, is refused rather than printed as a plausible MFU of 0.000.
        for (field, v, lo, hi, what) in RANGES
            .iter()
            .map(|&(f, get, lo, hi, what)| (f, get(self), lo, hi, what))
        {
            if v.is_finite() && v == 0.0 && field.starts_with("gpu.peak_fp") {
                continue; // No such tensor cores.
            }
            if !(v.is_finite() && v >= lo && v <= hi) {
                return Err(invalid(field, format!("{v} is out of range: valid {what}")));
            }
        }
        if self.node.gpus_per_node == 0 || self.node.nics_per_node == 0 {
            return Err(invalid(
                "node.gpus_per_node/nics_per_node",
                "must be at least 1".to_string(),
            ));
        }
        if let Some(domain) = self.node.nvlink_domain_gpus {
            let gpn = self.node.gpus_per_node;
            if domain == 0 || domain % gpn != 0 {
                return Err(invalid(
                    "node.nvlink_domain_gpus",
                    format!(
                        "must be a whole number of nodes: a multiple of node.gpus_per_node ({gpn}) (got {domain})"
                    ),
                ));
            }
        }
        if self.network.nodes_per_leaf_switch == 0 {
            return Err(invalid(
                "network.nodes_per_leaf_switch",
                "must be at least 1".to_string(),
            ));
        }
        if self.network.topology != "fat-tree" {
            return Err(invalid(
                "network.topology",
                format!(
                    "'{}' is not modelled (valid: fat-tree)",
                    self.network.topology
                ),
            ));
        }
        Ok(())
    }
}
