//! FP8 recipes: how Transformer Engine scales the FP8 tensors of the linear layers, as
//! Megatron-LM's `--fp8-recipe` names them (`megatron/core/enums.py` `Fp8Recipe`, mapped to
//! Transformer Engine's recipes by `megatron/core/fp8_utils.py` `get_fp8_recipe`, Megatron-LM
//! d98e8a64). What each recipe costs is in [`super::low_precision`] and docs/cost-model.md,
//! "FP8 recipes". Imports `inputs` only.

use crate::inputs::hardware::{Hardware, Precision};
use std::fmt;
use std::str::FromStr;

/// An FP8 recipe (`--fp8-recipe`). It is consulted where the stack's precision is `fp8`
/// (per-tensor or per-block scales on FP8 tensor cores); `mxfp8` is `Precision::Mxfp8`'s own
/// recipe, which the flags set together with that precision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Fp8Recipe {
    /// Transformer Engine's `DelayedScaling`: each tensor's scale comes from the amax history
    /// of earlier iterations, so the cast reads its BF16 input once (cast, amax and transpose
    /// in one kernel) and the norms write FP8 directly. Megatron-LM's default recipe, and what
    /// pplan's `--precision fp8` has always costed.
    #[default]
    Delayed,
    /// `Float8CurrentScaling`: the scale from the tensor's own amax, computed by a pass of its
    /// own before the cast.
    Tensorwise,
    /// `Float8BlockScaling` (DeepSeek-V3's): one FP32 scale per 1x128 tile of activations and
    /// gradients and per 128x128 block of weights; every GEMM with the split accumulator.
    Blockwise,
    /// `MXFP8BlockScaling`: Blackwell's block-scaled tensor cores (`Precision::Mxfp8`).
    Mxfp8,
}

impl Fp8Recipe {
    /// Every recipe pplan costs, in Megatron-LM's order of mention.
    pub const ALL: [Fp8Recipe; 4] = [
        Fp8Recipe::Delayed,
        Fp8Recipe::Tensorwise,
        Fp8Recipe::Blockwise,
        Fp8Recipe::Mxfp8,
    ];

    /// Whether Megatron-Bridge's mixed-precision recipe for it keeps the weights in FP8 and
    /// gathers them so (`fp8_param_gather=True` in `bf16_with_fp8_delayed_scaling_mixed`,
    /// `bf16_with_fp8_current_scaling_mixed` and `bf16_with_mxfp8_mixed`; False in
    /// `bf16_with_fp8_subchannel_scaling_mixed`, the block-scaled one;
    /// src/megatron/bridge/training/mixed_precision.py at 067f987): `--fp8-param-gather`'s
    /// default with `--stack megatron-core`.
    pub fn gathers_params_in_fp8(self) -> bool {
        self != Fp8Recipe::Blockwise
    }

    /// The name `--fp8-recipe` (pplan's and Megatron-LM's) gives it.
    pub fn as_str(self) -> &'static str {
        match self {
            Fp8Recipe::Delayed => "delayed",
            Fp8Recipe::Tensorwise => "tensorwise",
            Fp8Recipe::Blockwise => "blockwise",
            Fp8Recipe::Mxfp8 => "mxfp8",
        }
    }

    /// The precision the linear layers run in with this recipe: FP8 tensor cores with
    /// per-tensor or per-block scales (`fp8`), or the block-scaled ones (`mxfp8`).
    pub fn precision(self) -> Precision {
        match self {
            Fp8Recipe::Mxfp8 => Precision::Mxfp8,
            _ => Precision::Fp8,
        }
    }

    /// Whether `hw` runs this recipe. Delayed and current scaling need FP8 tensor cores
    /// (Transformer Engine `check_fp8_support`: compute capability 8.9+); block scaling needs
    /// them too (`check_fp8_block_scaling_support`: 9.0+ with CUDA 12.9): Hopper's cuBLASLt
    /// takes the 128-element scales natively, Blackwell's runs them as MXFP8; MXFP8 needs the
    /// block-scaled tensor cores (`check_mxfp8_support`: 10.0+), which pplan's profiles have
    /// where they have an FP4 peak ([`Hardware::precisions`]).
    pub fn runs_on(self, hw: &Hardware) -> bool {
        hw.precisions().contains(&self.precision())
    }

    /// The recipes `hw` runs, in [`Fp8Recipe::ALL`] order.
    pub fn valid_on(hw: &Hardware) -> Vec<Fp8Recipe> {
        Fp8Recipe::ALL
            .into_iter()
            .filter(|r| r.runs_on(hw))
            .collect()
    }

    /// Whether the GEMMs take the operands' scales per block on tensor cores that apply them
    /// (Blackwell): block scaling on a GPU with block-scaled tensor cores runs as MXFP8
    /// (Transformer Engine `gemm.cpp`: "Emulate the FP8 block scaling recipe with MXFP8 on
    /// Blackwell and newer as it is not natively supported by cublasLt"), with no split
    /// accumulator to pay.
    pub fn emulated_as_mxfp8(self, hw: &Hardware) -> bool {
        self == Fp8Recipe::Blockwise && Fp8Recipe::Mxfp8.runs_on(hw)
    }
}

impl fmt::Display for Fp8Recipe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Fp8Recipe {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "custom" {
            return Err(format!(
                "'custom' (a user's quantizer factory, --fp8-quantizer-factory) has no cost pplan can derive; valid: {}",
                names(&Fp8Recipe::ALL)
            ));
        }
        Fp8Recipe::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| format!("unknown recipe '{s}' (valid: {})", names(&Fp8Recipe::ALL)))
    }
}

/// The recipe a prediction or a plan file records for `precision` run with `recipe`: an FP8
/// recipe other than Megatron-LM's default, delayed. None for delayed FP8 (what `fp8` alone
/// has always meant) and for the other precisions, whose recipe the precision names.
pub fn recorded(precision: Precision, recipe: Fp8Recipe) -> Option<Fp8Recipe> {
    (precision == Precision::Fp8 && recipe != Fp8Recipe::Delayed && recipe != Fp8Recipe::Mxfp8)
        .then_some(recipe)
}

/// `delayed, tensorwise, ...`: recipe names joined for a message.
pub fn names(recipes: &[Fp8Recipe]) -> String {
    let v: Vec<&str> = recipes.iter().map(|r| r.as_str()).collect();
    v.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_custom_is_refused() {
        for r in Fp8Recipe::ALL {
            assert_eq!(r.as_str().parse::<Fp8Recipe>(), Ok(r));
        }
        let e = "custom".parse::<Fp8Recipe>().unwrap_err();
        assert!(e.contains("delayed, tensorwise, blockwise, mxfp8"), "{e}");
        assert!("per-tensor".parse::<Fp8Recipe>().is_err());
    }

    #[test]
    fn which_gpus_run_which_recipe() {
        let h100 = Hardware::bundled("h100-80gb").unwrap();
        let b200 = Hardware::bundled("b200").unwrap();
        let a100 = Hardware::bundled("a100-80gb").unwrap();
        assert_eq!(
            Fp8Recipe::valid_on(&h100),
            vec![
                Fp8Recipe::Delayed,
                Fp8Recipe::Tensorwise,
                Fp8Recipe::Blockwise
            ]
        );
        assert_eq!(Fp8Recipe::valid_on(&b200), Fp8Recipe::ALL.to_vec());
        assert!(Fp8Recipe::valid_on(&a100).is_empty());
        assert!(!Fp8Recipe::Blockwise.emulated_as_mxfp8(&h100));
        assert!(Fp8Recipe::Blockwise.emulated_as_mxfp8(&b200));
        assert_eq!(Fp8Recipe::Mxfp8.precision(), Precision::Mxfp8);
        assert_eq!(Fp8Recipe::Blockwise.precision(), Precision::Fp8);
    }
}
