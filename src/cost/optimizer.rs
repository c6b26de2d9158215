//! Adam's state per parameter: the master copy of the 16-bit weights and the two moments, in
//! the number formats the optimizer keeps them (docs/cost-model.md, "Memory per GPU").
//!
//! - Plain mixed-precision Adam (Rajbhandari et al. 2020, ZeRO, Sec. 3.1): fp32 master
//!   weights, momentum and variance, 12 bytes.
//! - Megatron-Core's `--use-precision-aware-optimizer` (Transformer Engine's `FusedAdam`,
//!   megatron/core/optimizer/__init__.py): the moments in `--exp-avg-dtype` /
//!   `--exp-avg-sq-dtype`; the master weights in `--main-params-dtype`, and with fp32 master
//!   weights of BF16 parameters only their low 16 bits (`store_param_remainders`, set by
//!   Megatron-Core from TE 2.1: the high 16 bits are the BF16 weight itself), 2 bytes.
//! - NeMo's Apex `distributed_fused_adam` (NeMo `megatron_base_model.setup_optimization`):
//!   fp32 state with BF16 parameters keeps the remainders likewise (10 bytes); `optim.dtype:
//!   bf16` keeps no master copy at all and BF16 moments (4 bytes).

use std::fmt;
use std::str::FromStr;

/// The number format of one of Adam's moments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateDtype {
    Fp32,
    Fp16,
    Bf16,
    /// FP8 with a per-tensor scale (TE `FusedAdam`'s uint8 state).
    Fp8,
}

impl StateDtype {
    pub const NAMES: &'static str = "fp32, fp16, bf16, fp8";

    pub fn bytes(self) -> u64 {
        match self {
            StateDtype::Fp32 => 4,
            StateDtype::Fp16 | StateDtype::Bf16 => 2,
            StateDtype::Fp8 => 1,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            StateDtype::Fp32 => "fp32",
            StateDtype::Fp16 => "fp16",
            StateDtype::Bf16 => "bf16",
            StateDtype::Fp8 => "fp8",
        }
    }
}

impl FromStr for StateDtype {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "fp32" => Ok(StateDtype::Fp32),
            "fp16" => Ok(StateDtype::Fp16),
            "bf16" => Ok(StateDtype::Bf16),
            "fp8" => Ok(StateDtype::Fp8),
            other => Err(format!("unknown dtype '{other}' (valid: {})", Self::NAMES)),
        }
    }
}

/// How the optimizer keeps the master copy of the 16-bit weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MasterWeights {
    /// A whole fp32 copy, 4 bytes.
    Fp32,
    /// fp32 master weights of BF16 parameters stored as their low 16 bits, 2 bytes.
    Remainders,
    /// An fp16 copy (`--main-params-dtype fp16`), 2 bytes.
    Fp16,
    /// None: the 16-bit parameters are updated in place (Apex `store_params=False`).
    None,
}

impl MasterWeights {
    pub fn bytes(self) -> u64 {
        match self {
            MasterWeights::Fp32 => 4,
            MasterWeights::Remainders | MasterWeights::Fp16 => 2,
            MasterWeights::None => 0,
        }
    }

    /// Megatron-Core's `--main-params-dtype` for it (`none`: no Megatron-Core equivalent).
    pub fn main_params_dtype(self) -> &'static str {
        match self {
            MasterWeights::Fp32 | MasterWeights::Remainders => "fp32",
            MasterWeights::Fp16 => "fp16",
            MasterWeights::None => "none",
        }
    }
}

/// Adam's state per parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptimizerState {
    pub master: MasterWeights,
    pub exp_avg: StateDtype,
    pub exp_avg_sq: StateDtype,
}

impl Default for OptimizerState {
    fn default() -> Self {
        OptimizerState::FP32
    }
}

impl OptimizerState {
    /// Plain mixed-precision Adam: 12 bytes per parameter.
    pub const FP32: OptimizerState = OptimizerState {
        master: MasterWeights::Fp32,
        exp_avg: StateDtype::Fp32,
        exp_avg_sq: StateDtype::Fp32,
    };

    pub fn bytes_per_param(&self) -> u64 {
        self.master.bytes() + self.exp_avg.bytes() + self.exp_avg_sq.bytes()
    }

    /// Whether this needs Megatron-Core's `--use-precision-aware-optimizer`.
    pub fn precision_aware(&self) -> bool {
        *self != OptimizerState::FP32
    }

    /// The state Megatron-Core keeps for these flags (`main_params` is `--main-params-dtype`:
    /// fp32 or fp16; plan files also take `none`). Without the precision-aware optimizer every
    /// dtype must be fp32, as Megatron-LM's argument check requires.
    pub fn from_megatron(
        precision_aware: bool,
        main_params: &str,
        exp_avg: &str,
        exp_avg_sq: &str,
    ) -> Result<OptimizerState, OptimizerStateError> {
        let dtype = |flag: &'static str, v: &str| {
            v.parse::<StateDtype>()
                .map_err(|reason| OptimizerStateError { flag, reason })
        };
        let exp_avg = dtype("exp-avg-dtype", exp_avg)?;
        let exp_avg_sq = dtype("exp-avg-sq-dtype", exp_avg_sq)?;
        let master = match main_params {
            "fp32" if precision_aware => MasterWeights::Remainders,
            "fp32" => MasterWeights::Fp32,
            "fp16" => MasterWeights::Fp16,
            "none" => MasterWeights::None,
            other => {
                return Err(OptimizerStateError {
                    flag: "main-params-dtype",
                    reason: format!(
                        "unknown dtype '{other}' (valid: fp32, fp16, or none: no master copy, \
                         as NeMo's Apex optimizer keeps with optim.dtype bf16)"
                    ),
                })
            }
        };
        let state = OptimizerState {
            master,
            exp_avg,
            exp_avg_sq,
        };
        if !precision_aware {
            for (flag, v) in [
                ("main-params-dtype", main_params),
                ("exp-avg-dtype", exp_avg.as_str()),
                ("exp-avg-sq-dtype", exp_avg_sq.as_str()),
            ] {
                if v != "fp32" {
                    return Err(OptimizerStateError {
                        flag,
                        reason: format!(
                            "{v} needs --use-precision-aware-optimizer on (Megatron-Core \
                             keeps other formats only in Transformer Engine's FusedAdam); \
                             valid without it: fp32"
                        ),
                    });
                }
            }
        }
        Ok(state)
    }
}

/// A bad optimizer-state setting: the flag or field (without dashes) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OptimizerStateError {
    pub flag: &'static str,
    pub reason: String,
}

impl fmt::Display for OptimizerStateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.flag, self.reason)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_per_parameter() {
        assert_eq!(OptimizerState::FP32.bytes_per_param(), 12);
        let on = |m, a, b| OptimizerState::from_megatron(true, m, a, b).unwrap();
        // Megatron-Core's precision-aware defaults: fp32 moments, fp32 master weights kept as
        // the 16-bit remainders of the BF16 weights.
        assert_eq!(on("fp32", "fp32", "fp32").bytes_per_param(), 10);
        assert_eq!(on("fp32", "bf16", "bf16").bytes_per_param(), 6);
        assert_eq!(on("fp16", "fp8", "fp16").bytes_per_param(), 5);
        // NeMo/Apex optim.dtype bf16: no master copy, BF16 moments.
        assert_eq!(on("none", "bf16", "bf16").bytes_per_param(), 4);
        let off = OptimizerState::from_megatron(false, "fp32", "fp32", "fp32").unwrap();
        assert_eq!(off, OptimizerState::FP32);
        assert!(!off.precision_aware() && on("fp32", "fp32", "fp32").precision_aware());
        let e = OptimizerState::from_megatron(false, "fp32", "bf16", "fp32").unwrap_err();
        assert_eq!(e.flag, "exp-avg-dtype");
        assert!(
            e.to_string().contains("--use-precision-aware-optimizer on"),
            "{e}"
        );
        let e = OptimizerState::from_megatron(true, "bf16", "fp32", "fp32").unwrap_err();
        assert!(e.to_string().contains("valid: fp32, fp16, or none"), "{e}");
        let e = OptimizerState::from_megatron(true, "fp32", "int4", "fp32").unwrap_err();
        assert!(
            e.to_string().contains("valid: fp32, fp16, bf16, fp8"),
            "{e}"
        );
    }
}
