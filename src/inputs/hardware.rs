//! Hardware profiles: what one GPU, one node and the network between nodes can do.
//!
//! A profile is JSON (`hardware/*.json`); the bundled ones are compiled into the binary and
//! selected by name, any other is read from a path. Every field's unit is in its name and its
//! source (datasheet, measurement, or FITTED) is in the profile's `sources` map; `fitted` lists
//! the constants fitted to data. One profile serves every run on that hardware: nothing in it is
//! specific to a model or a run. This module reads files only in [`Hardware::load`]; the cost
//! model itself does no IO.
//!
//! Fields added after the first profiles (`gpu.peak_fp8_flops_per_s`, `gpu.peak_fp4_flops_per_s`,
//! `node.nvlink_domain_gpus`) are optional in JSON, so older user profiles keep loading: an absent
//! peak means the GPU has no tensor cores for that precision, an absent domain means the NVLink
//! fabric ends at the node.

use serde::{Deserialize, Deserializer, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

/// One GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gpu {
    pub name: String,
    /// Dense (no 2:4 sparsity) BF16/FP16 tensor-core peak. The cost model's GEMM times are
    /// fractions of it; the FP8 and FP4 peaks are separate fields, and
    /// [`Hardware::peak_flops_per_s_for`] picks one by [`Precision`].
    pub peak_flops_per_s: f64,
    /// Dense FP8 tensor-core peak (E4M3/E5M2; also MXFP8 where the GPU has block-scaled tensor
    /// cores). 0 or absent: no FP8 tensor cores (A100).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub peak_fp8_flops_per_s: f64,
    /// Dense FP4 tensor-core peak (NVFP4). 0 or absent: no FP4 tensor cores (A100, Hopper).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub peak_fp4_flops_per_s: f64,
    pub memory_bytes: u64,
    pub hbm_bandwidth_bytes_per_s: f64,
    /// Fraction of `hbm_bandwidth_bytes_per_s` that memory-bound kernels achieve.
    pub hbm_efficiency: f64,
    /// Fraction of `hbm_bandwidth_bytes_per_s` that the unfused vocabulary-parallel
    /// cross-entropy's PyTorch kernels achieve (fp32 row reductions over the vocabulary shard
    /// and the in-place steps between them). Absent: `hbm_efficiency`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cross_entropy_hbm_efficiency: Option<f64>,
    /// Asymptotic fraction of `peak_flops_per_s` reached by large GEMMs (the kernel alone).
    pub gemm_efficiency_max: f64,
    /// GEMM dimension (elements) at which that dimension alone halves the efficiency.
    pub gemm_half_dim: f64,
    /// Fraction of the kernel's GEMM rate a training step keeps (what end-to-end runs lose on
    /// their GEMMs beyond the isolated kernel: SMs and HBM shared with overlapped
    /// communication kernels, host gaps). Absent: 1 (the ceiling is already end-to-end).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gemm_training_factor: Option<f64>,
    /// Fraction of `peak_flops_per_s` the fused (flash) attention kernel reaches forward and
    /// backward, causal, head dimension 128, at training sequence lengths (needed only for
    /// `--attention flash`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention_efficiency_forward: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention_efficiency_backward: Option<f64>,
    /// How the attention kernel's efficiency falls with less work per kernel: the forward
    /// (backward) efficiency is `attention_efficiency_forward · s/(s + s0) · F` for `s` query
    /// tokens per sequence on the rank, with `s0` = `attention_half_seq_forward`
    /// (`_backward`) and the fill term `F` = `H s/(H s + n0)`, `H` = micro-batch × query heads
    /// per rank, `n0` = `attention_half_work` (the kernel's blocks are (batch, head, query
    /// tile) triples: too few leave SMs idle), or, in profiles that give
    /// `attention_half_heads` (`h0`) instead, `H/(H + h0)`. Absent: no fall-off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention_half_seq_forward: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention_half_seq_backward: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention_half_heads: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention_half_work: Option<f64>,
    /// FlashAttention-2's kernels (PyTorch SDPA's flash backend; `--attention-kernel fa2`):
    /// the same law as the fused kernel's above, `attention_fa2_efficiency_forward · s/(s +
    /// s0) · H s/(H s + n0)`, with `s0` = `attention_fa2_half_seq_forward` (`_backward`) and
    /// the fused kernel's `n0`; used for the non-causal ring blocks too. Absent: the profile
    /// has no FlashAttention-2 rates (`--attention-kernel fa2` is refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention_fa2_efficiency_forward: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention_fa2_efficiency_backward: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention_fa2_half_seq_forward: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention_fa2_half_seq_backward: Option<f64>,
    /// FlashAttention's Triton kernel of 2022 (`--attention-kernel triton`): FlashAttention-2's
    /// law form, `attention_triton_efficiency_forward · s/(s + s0) · H s/(H s + n0)` with `s0`
    /// = `attention_triton_half_seq_forward` (`_backward`; absent: no fall-off) and the fused
    /// kernel's `n0`. Absent rates: the profile has none for it (`--attention-kernel triton`
    /// is refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention_triton_efficiency_forward: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention_triton_efficiency_backward: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention_triton_half_seq_forward: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention_triton_half_seq_backward: Option<f64>,
    /// The head dimension below which the fused (cuDNN) attention kernel's work per score, not
    /// its matrix multiplications, bounds it, forward (backward): a score costs the two GEMMs
    /// `4 d` FLOPs forward but one exponential and the softmax's bookkeeping whatever `d` is,
    /// so at `d` below this floor `d0` the kernel runs at `d / d0` of its rate at `d0`. The
    /// efficiency laws above are fitted at head dimension [`ATTENTION_LAW_HEAD_DIM`]; the
    /// kernel's rate at `d` is theirs times `min(1, d/d0) / min(1, 128/d0)`
    /// ([`Hardware::attention_head_dim_factor`]). Absent: no floor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention_floor_head_dim_forward: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention_floor_head_dim_backward: Option<f64>,
    /// The non-causal attention blocks of a context-parallel ring's later steps (every query
    /// tile over all the keys in hand, no short loops): their (forward, backward) efficiency
    /// is `attention_noncausal_efficiency_forward · s/(s + s0)` for the rank's `s` query tokens
    /// per sequence, `s0` = `attention_noncausal_half_seq_forward` (`_backward`); no fill term
    /// (none fits the measurements). Absent: those blocks run at the causal law.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention_noncausal_efficiency_forward: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention_noncausal_efficiency_backward: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention_noncausal_half_seq_forward: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention_noncausal_half_seq_backward: Option<f64>,
    /// How much longer an FP8 GEMM takes with the split (periodically FP32-promoted)
    /// accumulator than with the fast one, on GPUs that have both (Hopper). Transformer Engine
    /// runs the input- and weight-gradient GEMMs with it. Absent: 1 (no such mode, Blackwell).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fp8_split_accumulator_slowdown: Option<f64>,
    /// How much longer an FP8 GEMM with per-block scales (1x128 tiles of the activations and
    /// gradients, 128x128 blocks of the weights, cuBLASLt's `VEC128_32F` and `BLK128x128_32F`
    /// scale modes: Transformer Engine's `Float8BlockScaling` on Hopper) takes than the same
    /// GEMM with per-tensor scales and the fast accumulator: the scales applied to each K
    /// block's partial sums in the main loop. Absent: `fp8_split_accumulator_slowdown`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fp8_block_scaling_slowdown: Option<f64>,
    /// Whether the tensor cores take FP8 operands in every layout (Blackwell), not only TN
    /// (Hopper): Transformer Engine then keeps one FP8 copy of a per-tensor-scaled tensor
    /// where it keeps the cast and its transpose on Hopper (`is_non_tn_fp8_gemm_supported`:
    /// compute capability 10.x and 13+). Absent: false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fp8_any_layout: bool,
    /// Host (CPU and driver) time to launch one kernel, seconds: a layer's kernels cannot
    /// run faster than they are launched (`cost::launch`). Absent: [`DEFAULT_KERNEL_LAUNCH_S`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_launch_s: Option<f64>,
    /// GPU time between two kernels queued back to back, seconds (the front end's dispatch
    /// of the next kernel): a part's kernels take their own time plus this once each
    /// (`cost::launch`). Absent: 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_gap_s: Option<f64>,
    /// GPU time between two kernels replayed from one CUDA graph, seconds: what a graph
    /// leaves of [`Gpu::kernel_gap_s`] for the kernels it captures. Absent: `kernel_gap_s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graph_kernel_gap_s: Option<f64>,
    /// What a GEMM too small to keep the tensor cores busy takes beyond streaming its operands
    /// and output through HBM once, seconds: the kernel's prologue (the first tiles' loads)
    /// and epilogue, which no other tile overlaps. With it no GEMM takes less than
    /// `bytes / hbm + this` (`cost::compute::gemm_time_in_s`); small-row expert GEMMs are
    /// where it binds. Absent: no such floor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gemm_latency_s: Option<f64>,
    /// The GPU's power limit, watts, where it is set below the part's rated power (Meta's
    /// Grand Teton H100s run at 500 W of 700): informational beside
    /// [`Gpu::sustained_clock_fraction`], which carries what it does to the time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_limit_w: Option<f64>,
    /// The SM clock a training step sustains on this GPU over the one the profile's compute
    /// laws were measured at (the GEMM ceiling and the attention laws: the rated power limit),
    /// a fraction in (0, 1]: a lower power limit lowers the sustained clock, and every GEMM
    /// and attention kernel runs at this fraction of its rate (`cost::compute::gemm_time_in_s`,
    /// `CostModel::attention_s_per_flop`); memory-bound kernels keep the HBM rate. Absent: 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sustained_clock_fraction: Option<f64>,
}

/// The median `cudaLaunchKernel` call, 4.0 us over 5,240 launches, in a PyTorch (Kineto)
/// profile of a 16-rank training job on A100-SXM4-80GB published as test data of
/// facebookresearch/HolisticTraceAnalysis (`tests/data/negative_queue_length_values_check/
/// rank0.json.gz` at f4d0062; docs/cost-model.md, "Kernel launches"). A host-side cost,
/// taken for every GPU.
pub const DEFAULT_KERNEL_LAUNCH_S: f64 = 4.0e-6;

/// The head dimension of the kernel timings every profile's attention laws are fitted to
/// (cuDNN's and FlashAttention's published and measured points are at 128).
pub const ATTENTION_LAW_HEAD_DIM: f64 = 128.0;

/// One node: GPUs on a switched NVLink/NVSwitch fabric and the node's NICs. A node is what
/// holds the NICs (a DGX/HGX box, or one 4-GPU compute tray of a GB200/GB300 NVL72 rack);
/// the NVLink fabric may span several nodes (`nvlink_domain_gpus`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Node {
    pub gpus_per_node: u32,
    /// GPUs that share one NVLink/NVSwitch fabric: `gpus_per_node` for DGX/HGX boxes, 72 for a
    /// GB200/GB300 NVL72 rack (18 trays of 4). A whole number of nodes. Absent: one node
    /// ([`Hardware::nvlink_domain_gpus`] gives the effective value).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "whole_count"
    )]
    pub nvlink_domain_gpus: Option<u32>,
    /// Per GPU, per direction.
    pub nvlink_bandwidth_bytes_per_s: f64,
    pub nvlink_efficiency: f64,
    pub nvlink_latency_s: f64,
    pub nics_per_node: u32,
    /// Per NIC, per direction.
    pub nic_bandwidth_bytes_per_s: f64,
    pub nic_efficiency: f64,
    pub nic_latency_s: f64,
    /// Per GPU, per direction: the link between a GPU and its host's memory (PCIe, or
    /// NVLink-C2C on Grace superchips), over which activations are offloaded
    /// (`--cpu-offloading-num-layers`). Absent: offloading is refused on this profile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_link_bytes_per_s: Option<f64>,
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

fn is_zero(v: &f64) -> bool {
    *v == 0.0
}

/// `node.nvlink_domain_gpus` as a whole number >= 1, with an error that names the field (serde's
/// own message for a bad `u32` names only the type).
fn whole_count<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    let v: Option<serde_json::Value> = Option::deserialize(d)?;
    let Some(v) = v else { return Ok(None) };
    match v.as_u64() {
        Some(n) if n >= 1 && n <= u32::MAX as u64 => Ok(Some(n as u32)),
        _ => Err(serde::de::Error::custom(format!(
            "node.nvlink_domain_gpus must be a whole number of GPUs >= 1 (got {v})"
        ))),
    }
}

/// Tensor-core number format of the GEMMs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Precision {
    /// BF16 (or FP16): `gpu.peak_flops_per_s`.
    #[default]
    Bf16,
    /// FP8 with per-tensor scales (E4M3/E5M2, Hopper and later): `gpu.peak_fp8_flops_per_s`.
    Fp8,
    /// FP8 with a shared exponent per 32 elements (OCP MX): block-scaled tensor cores,
    /// Blackwell and later, at the FP8 peak.
    Mxfp8,
    /// NVIDIA's FP4 with an FP8 scale per 16 elements: `gpu.peak_fp4_flops_per_s`.
    Nvfp4,
}

impl Precision {
    /// Bytes of one GEMM operand element in this precision (the block scales left out).
    pub fn operand_bytes(self) -> f64 {
        match self {
            Precision::Bf16 => 2.0,
            Precision::Fp8 | Precision::Mxfp8 => 1.0,
            Precision::Nvfp4 => 0.5,
        }
    }

    pub const ALL: [Precision; 4] = [
        Precision::Bf16,
        Precision::Fp8,
        Precision::Mxfp8,
        Precision::Nvfp4,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Precision::Bf16 => "bf16",
            Precision::Fp8 => "fp8",
            Precision::Mxfp8 => "mxfp8",
            Precision::Nvfp4 => "nvfp4",
        }
    }

    /// The tensor cores a GPU needs for this precision, as an error message names them.
    fn tensor_cores(self) -> &'static str {
        match self {
            Precision::Bf16 => "BF16",
            Precision::Fp8 => "FP8",
            Precision::Mxfp8 => "block-scaled (MXFP8)",
            Precision::Nvfp4 => "FP4",
        }
    }
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Precision {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Precision::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| format!("unknown precision '{s}' (valid: bf16, fp8, mxfp8, nvfp4)"))
    }
}

/// The bundled profiles: (name, JSON text).
pub const BUNDLED: [(&str, &str); 9] = [
    ("a100-80gb", include_str!("../../hardware/a100-80gb.json")),
    ("h100-80gb", include_str!("../../hardware/h100-80gb.json")),
    (
        "h100-96gb-500w",
        include_str!("../../hardware/h100-96gb-500w.json"),
    ),
    ("h200", include_str!("../../hardware/h200.json")),
    ("h800", include_str!("../../hardware/h800.json")),
    ("b200", include_str!("../../hardware/b200.json")),
    ("b300", include_str!("../../hardware/b300.json")),
    (
        "gb200-nvl72",
        include_str!("../../hardware/gb200-nvl72.json"),
    ),
    (
        "gb300-nvl72",
        include_str!("../../hardware/gb300-nvl72.json"),
    ),
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
    /// `origin` is the bundled name or the file the profile was read from.
    #[error(
        "--hardware: {}: field {field} {reason}",
        profile_and_file(name, origin)
    )]
    Invalid {
        name: String,
        origin: String,
        field: &'static str,
        reason: String,
    },
    /// The GPU has no tensor cores for `precision`; `valid` lists those it has.
    #[error("{name} has no {} tensor cores; valid: {}", precision.tensor_cores(), join(valid))]
    Unsupported {
        name: String,
        precision: Precision,
        valid: Vec<Precision>,
    },
}

/// A bundled profile by its name; a file by its path (the `--hardware` value the user gave),
/// not by the `name` inside it, which is often a bundled profile's that the file was copied from.
fn profile_and_file(name: &str, origin: &str) -> String {
    if name == origin {
        format!("profile '{name}'")
    } else {
        format!("'{origin}'")
    }
}

fn join(ps: &[Precision]) -> String {
    let v: Vec<&str> = ps.iter().map(|p| p.as_str()).collect();
    v.join(", ")
}

/// An attention law's fall-off term `x/(x + half)`; 1 where the profile gives no `half`.
fn fall_off(x: f64, half: Option<f64>) -> f64 {
    half.map_or(1.0, |h| x / (x + h))
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

    /// [`Gpu::sustained_clock_fraction`], 1 when absent.
    pub fn sustained_clock_fraction(&self) -> f64 {
        self.gpu.sustained_clock_fraction.unwrap_or(1.0)
    }

    /// [`Gpu::gemm_training_factor`], 1 when absent.
    pub fn gemm_training_factor(&self) -> f64 {
        self.gpu.gemm_training_factor.unwrap_or(1.0)
    }

    /// The fused attention kernel's (forward, backward) efficiency for `seq` query tokens per
    /// sequence and `heads` = micro-batch × query heads on one rank ([`Gpu::attention_half_seq_forward`]):
    /// [`Hardware::attention_efficiency`] times the fall-off terms the profile has.
    pub fn attention_efficiency_at(&self, seq: f64, heads: f64) -> (f64, f64) {
        let (ef, eb) = self.attention_efficiency();
        let h = self.attention_fill(seq, heads);
        (
            ef * fall_off(seq, self.gpu.attention_half_seq_forward) * h,
            eb * fall_off(seq, self.gpu.attention_half_seq_backward) * h,
        )
    }

    /// How much longer the fused (cuDNN) attention kernel takes per FLOP at effective head
    /// dimension `d` (the mean of the query-key and value head dimensions: a score's GEMM
    /// FLOPs are `2 d_qk + 2 d_v`) than at the [`ATTENTION_LAW_HEAD_DIM`] its laws are fitted
    /// at, (forward, backward): `max(1, d0/d) / max(1, d0/128)` with `d0` the profile's
    /// floor ([`Gpu::attention_floor_head_dim_forward`]) for `d` below 128; 1 without a floor
    /// and from 128 up, where the published kernels are not faster per FLOP by the floor's
    /// measure (H100's cuDNN at head dimension 256 is 14-38 % slower than at 128, GB200's at
    /// 192/128 within a few per cent of it): other limits than the floor set their rate.
    pub fn attention_head_dim_factor(&self, d: f64) -> (f64, f64) {
        let factor = |floor: Option<f64>| match floor {
            Some(d0) if d > 0.0 && d < ATTENTION_LAW_HEAD_DIM => {
                (d0 / d).max(1.0) / (d0 / ATTENTION_LAW_HEAD_DIM).max(1.0)
            }
            _ => 1.0,
        };
        (
            factor(self.gpu.attention_floor_head_dim_forward),
            factor(self.gpu.attention_floor_head_dim_backward),
        )
    }

    /// The fill term of the attention laws: `H s/(H s + n0)` ([`Gpu::attention_half_work`]),
    /// or `H/(H + h0)` in profiles that give [`Gpu::attention_half_heads`] instead.
    fn attention_fill(&self, seq: f64, heads: f64) -> f64 {
        match self.gpu.attention_half_work {
            Some(n0) => fall_off(heads * seq, Some(n0)),
            None => fall_off(heads, self.gpu.attention_half_heads),
        }
    }

    /// The Triton FlashAttention kernel's (forward, backward) efficiency for `seq` query tokens
    /// per sequence and `heads` = micro-batch × query heads on one rank
    /// ([`Gpu::attention_triton_efficiency_forward`]); `None` when the profile has no rates
    /// for it.
    pub fn attention_triton_efficiency_at(&self, seq: f64, heads: f64) -> Option<(f64, f64)> {
        let g = &self.gpu;
        self.flash_law_at(
            seq,
            heads,
            (
                g.attention_triton_efficiency_forward,
                g.attention_triton_efficiency_backward,
            ),
            (
                g.attention_triton_half_seq_forward,
                g.attention_triton_half_seq_backward,
            ),
        )
    }

    /// FlashAttention-2's (forward, backward) efficiency for `seq` query tokens per sequence
    /// and `heads` = micro-batch × query heads on one rank ([`Gpu::attention_fa2_efficiency_forward`]);
    /// `None` when the profile has no FlashAttention-2 rates.
    pub fn attention_fa2_efficiency_at(&self, seq: f64, heads: f64) -> Option<(f64, f64)> {
        let g = &self.gpu;
        self.flash_law_at(
            seq,
            heads,
            (
                g.attention_fa2_efficiency_forward,
                g.attention_fa2_efficiency_backward,
            ),
            (
                g.attention_fa2_half_seq_forward,
                g.attention_fa2_half_seq_backward,
            ),
        )
    }

    /// A FlashAttention kernel's law, (forward, backward): `A · s/(s + s0) · F` with the
    /// asymptotes `a`, the half lengths `s0` (absent: no fall-off) and the fused law's fill
    /// term `F`; `None` where either asymptote is absent.
    fn flash_law_at(
        &self,
        seq: f64,
        heads: f64,
        a: (Option<f64>, Option<f64>),
        s0: (Option<f64>, Option<f64>),
    ) -> Option<(f64, f64)> {
        let fill = self.attention_fill(seq, heads);
        Some((
            a.0? * fall_off(seq, s0.0) * fill,
            a.1? * fall_off(seq, s0.1) * fill,
        ))
    }

    /// The (forward, backward) efficiency of a context-parallel ring's non-causal attention
    /// blocks for `seq` query tokens per sequence on the rank
    /// ([`Gpu::attention_noncausal_efficiency_forward`]); `None` when the profile has not
    /// measured them.
    pub fn attention_noncausal_efficiency_at(&self, seq: f64) -> Option<(f64, f64)> {
        Some((
            self.gpu.attention_noncausal_efficiency_forward?
                * fall_off(seq, self.gpu.attention_noncausal_half_seq_forward),
            self.gpu.attention_noncausal_efficiency_backward?
                * fall_off(seq, self.gpu.attention_noncausal_half_seq_backward),
        ))
    }

    /// GPU time between two kernels queued back to back ([`Gpu::kernel_gap_s`], else 0).
    pub fn kernel_gap_s(&self) -> f64 {
        self.gpu.kernel_gap_s.unwrap_or(0.0)
    }

    /// GPU time between two kernels replayed from a CUDA graph ([`Gpu::graph_kernel_gap_s`],
    /// else [`Hardware::kernel_gap_s`]).
    pub fn graph_kernel_gap_s(&self) -> f64 {
        self.gpu
            .graph_kernel_gap_s
            .unwrap_or_else(|| self.kernel_gap_s())
    }

    /// Host time to launch one kernel ([`Gpu::kernel_launch_s`], else the default).
    pub fn kernel_launch_s(&self) -> f64 {
        self.gpu.kernel_launch_s.unwrap_or(DEFAULT_KERNEL_LAUNCH_S)
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
        let text = super::json_strict::prepare(text).map_err(|reason| HardwareError::Parse {
            path: origin.to_string(),
            reason,
        })?;
        let hw: Hardware = serde_json::from_str(text).map_err(|e| HardwareError::Parse {
            path: origin.to_string(),
            reason: crate::inputs::json_path::describe(text, &e),
        })?;
        hw.check(origin)?;
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

    /// GPUs on one NVLink fabric: `node.nvlink_domain_gpus`, or the node when absent.
    pub fn nvlink_domain_gpus(&self) -> u32 {
        self.node
            .nvlink_domain_gpus
            .unwrap_or(self.node.gpus_per_node)
    }

    /// Dense tensor-core peak for GEMMs in `precision`: BF16 `gpu.peak_flops_per_s`, FP8 and
    /// MXFP8 `gpu.peak_fp8_flops_per_s`, NVFP4 `gpu.peak_fp4_flops_per_s`. An error when the GPU
    /// lacks those tensor cores, listing the precisions it has.
    ///
    /// MXFP8 needs block-scaled (microscaling) tensor cores. They came with FP4 (Blackwell's
    /// fifth-generation tensor cores); Hopper runs FP8 with per-tensor scales only. So a GPU
    /// counts as having MXFP8 when it has both an FP8 and an FP4 peak.
    pub fn peak_flops_per_s_for(&self, precision: Precision) -> Result<f64, HardwareError> {
        let g = &self.gpu;
        let peak = match precision {
            Precision::Bf16 => g.peak_flops_per_s,
            Precision::Fp8 => g.peak_fp8_flops_per_s,
            Precision::Mxfp8 if g.peak_fp4_flops_per_s > 0.0 => g.peak_fp8_flops_per_s,
            Precision::Mxfp8 => 0.0,
            Precision::Nvfp4 => g.peak_fp4_flops_per_s,
        };
        if peak > 0.0 {
            Ok(peak)
        } else {
            Err(HardwareError::Unsupported {
                name: self.name.clone(),
                precision,
                valid: self.precisions(),
            })
        }
    }

    /// The precisions this GPU has tensor cores for, in [`Precision::ALL`] order.
    pub fn precisions(&self) -> Vec<Precision> {
        let g = &self.gpu;
        Precision::ALL
            .into_iter()
            .filter(|p| match p {
                Precision::Bf16 => g.peak_flops_per_s > 0.0,
                Precision::Fp8 => g.peak_fp8_flops_per_s > 0.0,
                Precision::Mxfp8 => g.peak_fp8_flops_per_s > 0.0 && g.peak_fp4_flops_per_s > 0.0,
                Precision::Nvfp4 => g.peak_fp4_flops_per_s > 0.0,
            })
            .collect()
    }

    /// Achieved intra-node bandwidth per GPU per direction.
    pub fn nvlink_bytes_per_s(&self) -> f64 {
        self.node.nvlink_bandwidth_bytes_per_s * self.node.nvlink_efficiency
    }

    /// Achieved inter-node bandwidth per GPU per direction when every GPU of the node sends at
    /// once (the node's NICs are shared evenly; on an NVL72 rack the node is the 4-GPU tray that
    /// holds the NICs, whatever the NVLink domain), through a leaf whose uplinks are
    /// oversubscribed when the flow leaves the leaf switch.
    pub fn nic_bytes_per_s_per_gpu(&self, leaves_leaf_switch: bool) -> f64 {
        let node_bw = self.node.nics_per_node as f64
            * self.node.nic_bandwidth_bytes_per_s
            * self.node.nic_efficiency;
        let per_gpu = node_bw / self.node.gpus_per_node as f64;
        let per_nic = self.node.nic_bandwidth_bytes_per_s * self.node.nic_efficiency;
        let bw = per_gpu.min(per_nic);
        if leaves_leaf_switch {
            // At least 1: checked when the profile is read.
            bw / self.network.oversubscription
        } else {
            bw
        }
    }

    /// Achieved HBM bandwidth.
    pub fn hbm_bytes_per_s(&self) -> f64 {
        self.gpu.hbm_bandwidth_bytes_per_s * self.gpu.hbm_efficiency
    }

    /// HBM bytes per second of the unfused cross-entropy's kernels
    /// ([`Gpu::cross_entropy_hbm_efficiency`], else [`Hardware::hbm_bytes_per_s`]).
    pub fn cross_entropy_hbm_bytes_per_s(&self) -> f64 {
        self.gpu.hbm_bandwidth_bytes_per_s
            * self
                .gpu
                .cross_entropy_hbm_efficiency
                .unwrap_or(self.gpu.hbm_efficiency)
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

    /// The attention law's fill term counts the kernel's blocks, heads x query tokens: a
    /// 32k-token kernel with 4 heads fills the GPU as a 8k-token one with 16 heads does, and
    /// only the per-block loop term tells them apart. The heads-only form (`h0`) stays for
    /// profiles that give it; giving both is refused, naming both fields.
    #[test]
    fn attention_fill_counts_heads_times_tokens() {
        let h100 = Hardware::bundled("h100-80gb").unwrap();
        let g = &h100.gpu;
        let (a, b) = (
            h100.attention_efficiency_at(32768.0, 4.0),
            h100.attention_efficiency_at(8192.0, 16.0),
        );
        let n0 = g.attention_half_work.unwrap();
        let fill = 131072.0 / (131072.0 + n0);
        let s0 = g.attention_half_seq_forward.unwrap();
        let want = g.attention_efficiency_forward.unwrap() * 32768.0 / (32768.0 + s0) * fill;
        assert!((a.0 - want).abs() < 1e-12, "{a:?}");
        assert!(a.0 / b.0 - (32768.0 / (32768.0 + s0)) / (8192.0 / (8192.0 + s0)) < 1e-12);
        // The heads-only form: 4 heads are 4 / (4 + h0) at any length.
        let mut old = h100.clone();
        (old.gpu.attention_half_work, old.gpu.attention_half_heads) = (None, Some(6.0));
        let (x, y) = (
            old.attention_efficiency_at(32768.0, 4.0),
            old.attention_efficiency_at(2048.0, 4.0),
        );
        assert!((x.0 / y.0 - (32768.0 / (32768.0 + s0)) / (2048.0 / (2048.0 + s0))).abs() < 1e-12);
        let both = serde_json::to_string(&Hardware {
            gpu: Gpu {
                attention_half_heads: Some(6.0),
                ..h100.gpu.clone()
            },
            ..h100.clone()
        })
        .unwrap();
        let e = Hardware::from_json(&both, "both.json")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("both.json")
                && e.contains("gpu.attention_half_work")
                && e.contains("gpu.attention_half_heads"),
            "{e}"
        );
    }

    #[test]
    fn unknown_name_lists_valid_ones() {
        let e = Hardware::load("tpu-v9").unwrap_err().to_string();
        assert!(e.contains("--hardware") && e.contains("a100-80gb"), "{e}");
    }

    /// `a100-80gb` with `edit` applied to its JSON text.
    fn a100_with(edit: impl Fn(&mut serde_json::Value)) -> String {
        let mut v: serde_json::Value = serde_json::from_str(BUNDLED[0].1).unwrap();
        edit(&mut v);
        v.to_string()
    }

    #[test]
    fn precision_names_round_trip() {
        for p in Precision::ALL {
            assert_eq!(p.as_str().parse::<Precision>(), Ok(p));
            assert_eq!(p.to_string(), p.as_str());
        }
        let e = "fp6".parse::<Precision>().unwrap_err();
        assert!(e.contains("bf16, fp8, mxfp8, nvfp4"), "{e}");
    }

    #[test]
    fn peaks_by_precision_and_what_is_missing() {
        let a100 = Hardware::bundled("a100-80gb").unwrap();
        assert_eq!(a100.peak_flops_per_s_for(Precision::Bf16), Ok(312e12));
        assert_eq!(a100.precisions(), vec![Precision::Bf16]);
        let e = a100.peak_flops_per_s_for(Precision::Fp8).unwrap_err();
        assert_eq!(
            e.to_string(),
            "a100-80gb has no FP8 tensor cores; valid: bf16"
        );
        let h100 = Hardware::bundled("h100-80gb").unwrap();
        assert_eq!(h100.peak_flops_per_s_for(Precision::Fp8), Ok(1978.9e12));
        let e = h100.peak_flops_per_s_for(Precision::Nvfp4).unwrap_err();
        assert_eq!(
            e.to_string(),
            "h100-80gb has no FP4 tensor cores; valid: bf16, fp8"
        );
        assert!(matches!(
            h100.peak_flops_per_s_for(Precision::Mxfp8),
            Err(HardwareError::Unsupported {
                precision: Precision::Mxfp8,
                ..
            })
        ));
        // A GPU with FP4 has block-scaled tensor cores: MXFP8 at the FP8 peak.
        let mut b = h100.clone();
        b.gpu.peak_fp4_flops_per_s = 4.0 * b.gpu.peak_fp8_flops_per_s;
        assert_eq!(b.peak_flops_per_s_for(Precision::Mxfp8), Ok(1978.9e12));
        assert_eq!(b.precisions(), Precision::ALL.to_vec());
    }

    #[test]
    fn new_fields_are_optional_and_not_written_when_absent() {
        let a100 = Hardware::bundled("a100-80gb").unwrap();
        assert_eq!(a100.node.nvlink_domain_gpus, None);
        assert_eq!(a100.nvlink_domain_gpus(), 8);
        let json = serde_json::to_string(&a100).unwrap();
        for field in ["peak_fp8", "peak_fp4", "nvlink_domain"] {
            assert!(!json.contains(field), "{json}");
        }
        assert_eq!(Hardware::from_json(&json, "copy.json").unwrap(), a100);
    }

    #[test]
    fn bad_new_fields_name_the_field_and_the_file() {
        let cases: [(&str, serde_json::Value, &str); 6] = [
            ("node", serde_json::json!(12), "node.nvlink_domain_gpus"),
            ("node", serde_json::json!(0), "node.nvlink_domain_gpus"),
            ("node", serde_json::json!(-8), "node.nvlink_domain_gpus"),
            ("node", serde_json::json!(7.5), "node.nvlink_domain_gpus"),
            ("gpu", serde_json::json!(-1.0), "gpu.peak_fp8_flops_per_s"),
            ("gpu", serde_json::json!(-1e15), "gpu.peak_fp4_flops_per_s"),
        ];
        for (part, value, field) in cases {
            let key = field.split('.').nth(1).unwrap();
            let text = a100_with(|v| v[part][key] = value.clone());
            let e = Hardware::from_json(&text, "my-cluster.json")
                .unwrap_err()
                .to_string();
            assert!(
                e.contains(field) && e.contains("my-cluster.json") && e.starts_with("--hardware"),
                "{field} = {value}: {e}"
            );
        }
        let text = a100_with(|v| v["node"]["nvlink_domain_gpus"] = serde_json::json!(12));
        let e = Hardware::from_json(&text, "my-cluster.json")
            .unwrap_err()
            .to_string();
        assert!(e.contains("multiple of node.gpus_per_node (8)"), "{e}");
        // A whole number of nodes is fine.
        let text = a100_with(|v| v["node"]["nvlink_domain_gpus"] = serde_json::json!(16));
        assert_eq!(
            Hardware::from_json(&text, "x.json")
                .unwrap()
                .nvlink_domain_gpus(),
            16
        );
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
