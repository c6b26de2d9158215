//! Hardware profiles: what one GPU, one node and the network between nodes can do.
//!
//! A profile is JSON (`hardware/*.json`); the bundled ones are compiled into the binary and
//! selected by name, any other is read from a path. Every field's unit is in its name and its
//! source (datasheet, measurement, or FITTED) is in the profile's `sources` map; `fitted` lists
//! the constants fitted to data. One profile serves every run on that hardware: nothing in it is
//! specific to a model or a run. This module reads files only in [`Hardware::load`]; the cost
//! model itself does no IO.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gpu {
    pub name: String,
    /// Dense 16-bit (BF16/FP16) tensor-core peak.
    pub peak_flops_per_s: f64,
    pub memory_bytes: u64,
    pub hbm_bandwidth_bytes_per_s: f64,
    /// Fraction of `hbm_bandwidth_bytes_per_s` that memory-bound kernels achieve.
    pub hbm_efficiency: f64,
    /// Asymptotic fraction of `peak_flops_per_s` reached by large GEMMs.
    pub gemm_efficiency_max: f64,
    /// GEMM dimension (elements) at which that dimension alone halves the efficiency.
    pub gemm_half_dim: f64,
    /// Fraction of `peak_flops_per_s` the fused (flash) attention kernel reaches forward and
    /// backward, causal, head dimension 128, at training sequence lengths (needed only for
    /// `--attention flash`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention_efficiency_forward: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention_efficiency_backward: Option<f64>,
}

/// One node: GPUs on a switched intra-node fabric (NVLink/NVSwitch) and the node's NICs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Node {
    pub gpus_per_node: u32,
    /// Per GPU, per direction.
    pub nvlink_bandwidth_bytes_per_s: f64,
    pub nvlink_efficiency: f64,
    pub nvlink_latency_s: f64,
    pub nics_per_node: u32,
    /// Per NIC, per direction.
    pub nic_bandwidth_bytes_per_s: f64,
    pub nic_efficiency: f64,
    pub nic_latency_s: f64,
}

/// The network between nodes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Network {
    /// Only `fat-tree` is modelled.
    pub topology: String,
    pub levels: u32,
    /// Nodes under one leaf switch (per rail); flows that stay under one leaf never see the
    /// oversubscription.
    pub nodes_per_leaf_switch: u32,
    /// Downlink over uplink bandwidth at the leaf (1.0 = non-blocking).
    pub oversubscription: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hardware {
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub gpu: Gpu,
    pub node: Node,
    pub network: Network,
    /// Field path -> where its value comes from, with its unit.
    #[serde(default)]
    pub sources: BTreeMap<String, String>,
    /// Field paths whose values were fitted to data.
    #[serde(default)]
    pub fitted: Vec<String>,
}

/// The bundled profiles: (name, JSON text).
pub const BUNDLED: [(&str, &str); 3] = [
    ("a100-80gb", include_str!("../../hardware/a100-80gb.json")),
    ("h100-80gb", include_str!("../../hardware/h100-80gb.json")),
    ("h200", include_str!("../../hardware/h200.json")),
];

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HardwareError {
    #[error("--hardware: unknown profile '{name}' (valid: {}, or a path to a JSON profile)", valid_names().join(", "))]
    Unknown { name: String },
    #[error("--hardware: cannot read '{path}': {reason}")]
    Read { path: String, reason: String },
    #[error("--hardware: '{path}' is not a valid hardware profile: {reason}")]
    Parse { path: String, reason: String },
    #[error("--hardware: profile '{name}': field {field} {reason}")]
    Invalid {
        name: String,
        field: &'static str,
        reason: String,
    },
}

pub fn valid_names() -> Vec<&'static str> {
    BUNDLED.iter().map(|(n, _)| *n).collect()
}

impl Hardware {
    /// The fused attention kernel's (forward, backward) efficiency; `None` when the profile
    /// has not measured it.
    pub fn attention_efficiencies(&self) -> Option<(f64, f64)> {
        Some((
            self.gpu.attention_efficiency_forward?,
            self.gpu.attention_efficiency_backward?,
        ))
    }

    /// The fused attention kernel's (forward, backward) efficiency, the GEMM ceiling when the
    /// profile has none (callers check [`Hardware::attention_efficiencies`] first).
    pub fn attention_efficiency(&self) -> (f64, f64) {
        self.attention_efficiencies()
            .unwrap_or((self.gpu.gemm_efficiency_max, self.gpu.gemm_efficiency_max))
    }

    /// A bundled profile by name.
    pub fn bundled(name: &str) -> Result<Hardware, HardwareError> {
        let (_, text) =
            BUNDLED
                .iter()
                .find(|(n, _)| *n == name)
                .ok_or_else(|| HardwareError::Unknown {
                    name: name.to_string(),
                })?;
        Hardware::from_json(text, name)
    }

    /// Parse and check a profile; `origin` names it in errors.
    pub fn from_json(text: &str, origin: &str) -> Result<Hardware, HardwareError> {
        let hw: Hardware = serde_json::from_str(text).map_err(|e| HardwareError::Parse {
            path: origin.to_string(),
            reason: e.to_string(),
        })?;
        hw.check()?;
        Ok(hw)
    }

    /// A bundled name, or else a path to a JSON profile.
    pub fn load(name_or_path: &str) -> Result<Hardware, HardwareError> {
        if BUNDLED.iter().any(|(n, _)| *n == name_or_path) {
            return Hardware::bundled(name_or_path);
        }
        let looks_like_path = name_or_path.contains('/') || name_or_path.ends_with(".json");
        match std::fs::read_to_string(name_or_path) {
            Ok(text) => Hardware::from_json(&text, name_or_path),
            Err(_) if !looks_like_path => Err(HardwareError::Unknown {
                name: name_or_path.to_string(),
            }),
            Err(e) => Err(HardwareError::Read {
                path: name_or_path.to_string(),
                reason: e.to_string(),
            }),
        }
    }

    fn check(&self) -> Result<(), HardwareError> {
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
                return Err(self.invalid(field, format!("must be a positive number (got {v})")));
            }
        }
        let fractions = [
            ("gpu.hbm_efficiency", self.gpu.hbm_efficiency),
            ("gpu.gemm_efficiency_max", self.gpu.gemm_efficiency_max),
            ("node.nvlink_efficiency", self.node.nvlink_efficiency),
            ("node.nic_efficiency", self.node.nic_efficiency),
        ];
        let optional = [
            (
                "gpu.attention_efficiency_forward",
                self.gpu.attention_efficiency_forward,
            ),
            (
                "gpu.attention_efficiency_backward",
                self.gpu.attention_efficiency_backward,
            ),
        ];
        for (field, v) in fractions
            .into_iter()
            .chain(optional.into_iter().filter_map(|(f, v)| Some((f, v?))))
        {
            if !(v.is_finite() && v > 0.0 && v <= 1.0) {
                return Err(self.invalid(field, format!("must be in (0, 1] (got {v})")));
            }
        }
        for (field, v) in [
            ("node.nvlink_latency_s", self.node.nvlink_latency_s),
            ("node.nic_latency_s", self.node.nic_latency_s),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(self.invalid(field, format!("must be >= 0 (got {v})")));
            }
        }
        if self.node.gpus_per_node == 0 || self.node.nics_per_node == 0 {
            return Err(self.invalid(
                "node.gpus_per_node/nics_per_node",
                "must be at least 1".to_string(),
            ));
        }
        if self.network.nodes_per_leaf_switch == 0 {
            return Err(self.invalid(
                "network.nodes_per_leaf_switch",
                "must be at least 1".to_string(),
            ));
        }
        if self.network.topology != "fat-tree" {
            return Err(self.invalid(
                "network.topology",
                format!(
                    "'{}' is not modelled (valid: fat-tree)",
                    self.network.topology
                ),
            ));
        }
        Ok(())
    }

    fn invalid(&self, field: &'static str, reason: String) -> HardwareError {
        HardwareError::Invalid {
            name: self.name.clone(),
            field,
            reason,
        }
    }

    /// Achieved intra-node bandwidth per GPU per direction.
    pub fn nvlink_bytes_per_s(&self) -> f64 {
        self.node.nvlink_bandwidth_bytes_per_s * self.node.nvlink_efficiency
    }

    /// Achieved inter-node bandwidth per GPU per direction when every GPU of the node sends at
    /// once (the node's NICs are shared evenly), through a leaf whose uplinks are
    /// oversubscribed when the flow leaves the leaf switch.
    pub fn nic_bytes_per_s_per_gpu(&self, leaves_leaf_switch: bool) -> f64 {
        let node_bw = self.node.nics_per_node as f64
            * self.node.nic_bandwidth_bytes_per_s
            * self.node.nic_efficiency;
        let per_gpu = node_bw / self.node.gpus_per_node as f64;
        let per_nic = self.node.nic_bandwidth_bytes_per_s * self.node.nic_efficiency;
        let bw = per_gpu.min(per_nic);
        if leaves_leaf_switch {
            bw / self.network.oversubscription.max(1.0)
        } else {
            bw
        }
    }

    /// Achieved HBM bandwidth.
    pub fn hbm_bytes_per_s(&self) -> f64 {
        self.gpu.hbm_bandwidth_bytes_per_s * self.gpu.hbm_efficiency
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bundled_profiles_parse_and_document_every_field() {
        for name in valid_names() {
            let hw = Hardware::bundled(name).unwrap();
            assert_eq!(hw.name, name);
            for field in [
                "gpu.peak_flops_per_s",
                "gpu.memory_bytes",
                "gpu.hbm_bandwidth_bytes_per_s",
                "gpu.hbm_efficiency",
                "gpu.gemm_efficiency_max",
                "gpu.gemm_half_dim",
                "node.gpus_per_node",
                "node.nvlink_bandwidth_bytes_per_s",
                "node.nvlink_efficiency",
                "node.nics_per_node",
                "node.nic_bandwidth_bytes_per_s",
                "node.nic_efficiency",
                "network.oversubscription",
            ] {
                assert!(
                    hw.sources.contains_key(field),
                    "{name}: {field} has no source"
                );
            }
            for f in &hw.fitted {
                assert!(hw.sources[f].contains("FITTED"), "{name}: {f}");
            }
        }
    }

    #[test]
    fn unknown_name_lists_valid_ones() {
        let e = Hardware::load("tpu-v9").unwrap_err().to_string();
        assert!(e.contains("--hardware") && e.contains("a100-80gb"), "{e}");
    }

    #[test]
    fn a100_physical_numbers() {
        let hw = Hardware::bundled("a100-80gb").unwrap();
        assert_eq!(hw.gpu.peak_flops_per_s, 312e12);
        assert_eq!(hw.gpu.hbm_bandwidth_bytes_per_s, 2039e9);
        assert_eq!(hw.node.nvlink_bandwidth_bytes_per_s * 2.0, 600e9);
        assert_eq!(hw.node.nic_bandwidth_bytes_per_s * 8.0, 200e9);
    }
}
