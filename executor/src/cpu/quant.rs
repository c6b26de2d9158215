//! The FP8 recipes the CPU backend emulates: which operand of a GEMM is rounded to which FP8
//! format with which scales ([`super::fp8`] does the rounding). A GEMM then runs in f32 on the
//! rounded operands, as an FP8 tensor core multiplies FP8 inputs and accumulates in higher
//! precision.
//!
//! | recipe (`--fp8-recipe`) | activations | weights | gradients |
//! |---|---|---|---|
//! | `tensorwise` | E4M3, one scale per tensor from its amax (current scaling) | E4M3, per tensor | E5M2, per tensor (Transformer Engine's `hybrid` format) |
//! | `blockwise` | E4M3, a scale per 1x128 block | E4M3, a scale per 128x128 block | E4M3, per 1x128 block (DeepSeek-V3's recipe) |
//!
//! Scales are `max / amax` of the tensor or block ([`super::fp8::scale_for`]). Megatron-LM's
//! `delayed` recipe (scales from an amax history) and the MX/NV FP4 formats are not emulated;
//! the backend refuses such plans by name.

use super::fp8::{fake_quant_blocks, fake_quant_tensor, Fp8Format};
use std::borrow::Cow;

/// An FP8 recipe the CPU backend runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fp8Recipe {
    Tensorwise,
    Blockwise,
}

impl Fp8Recipe {
    /// The recipe of a plan's `parallelism.precision` and `fp8_recipe`: None for BF16/f32, an
    /// error naming the field for what the backend does not emulate.
    pub fn from_plan(precision: &str, recipe: &str) -> Result<Option<Fp8Recipe>, String> {
        Self::parse(
            precision,
            recipe,
            [
                "plan: field `parallelism.precision`",
                "plan: field `parallelism.fp8_recipe`",
            ],
        )
    }

    /// The same for settings the caller names `names` (precision, recipe): plan fields or
    /// command-line flags.
    pub fn parse(
        precision: &str,
        recipe: &str,
        [precision_name, recipe_name]: [&str; 2],
    ) -> Result<Option<Fp8Recipe>, String> {
        match (precision, recipe) {
            ("bf16", _) => Ok(None),
            ("fp8", "tensorwise") => Ok(Some(Fp8Recipe::Tensorwise)),
            ("fp8", "blockwise") => Ok(Some(Fp8Recipe::Blockwise)),
            ("fp8", other) => Err(format!(
                "{recipe_name} is '{other}'; the CPU backend emulates the FP8 recipes tensorwise and blockwise (delayed scaling's amax history is not emulated)"
            )),
            (other, _) => Err(format!(
                "{precision_name} is '{other}'; the CPU backend runs bf16 (as f32) and fp8 (emulated)"
            )),
        }
    }
}

/// A GEMM operand of activations or gradients `[rows, cols]` as the recipe feeds it, with
/// `per_tensor` the format of the tensorwise recipe (a copy either way: the layer keeps it for
/// the weight gradient).
fn q_rows(
    r: Option<Fp8Recipe>,
    x: &[f32],
    rows: usize,
    cols: usize,
    per_tensor: Fp8Format,
) -> Vec<f32> {
    let mut v = x.to_vec();
    match r {
        None => {}
        Some(Fp8Recipe::Tensorwise) => {
            fake_quant_tensor(&mut v, per_tensor);
        }
        Some(Fp8Recipe::Blockwise) => {
            fake_quant_blocks(&mut v, rows, cols, 1, 128, Fp8Format::E4M3)
        }
    }
    v
}

/// A GEMM's activation operand `[rows, cols]` as the recipe feeds it (E4M3).
pub fn q_act(r: Option<Fp8Recipe>, x: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    q_rows(r, x, rows, cols, Fp8Format::E4M3)
}

/// A GEMM's gradient operand `[rows, cols]` as the recipe feeds it (E5M2 per tensor, the hybrid
/// format; E4M3 in blocks).
pub fn q_grad(r: Option<Fp8Recipe>, x: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    q_rows(r, x, rows, cols, Fp8Format::E5M2)
}

/// A weight `[rows, cols]` as the recipe feeds it (borrowed unchanged without FP8).
pub fn q_weight(r: Option<Fp8Recipe>, w: &[f32], rows: usize, cols: usize) -> Cow<'_, [f32]> {
    match r {
        None => Cow::Borrowed(w),
        Some(Fp8Recipe::Tensorwise) => {
            let mut v = w.to_vec();
            fake_quant_tensor(&mut v, Fp8Format::E4M3);
            Cow::Owned(v)
        }
        Some(Fp8Recipe::Blockwise) => {
            let mut v = w.to_vec();
            fake_quant_blocks(&mut v, rows, cols, 128, 128, Fp8Format::E4M3);
            Cow::Owned(v)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recipes_round_their_operands_and_f32_leaves_them() {
        let x: Vec<f32> = (0..256).map(|i| 1.0 + i as f32 / 1000.0).collect();
        assert_eq!(q_act(None, &x, 2, 128), x);
        assert!(matches!(q_weight(None, &x, 2, 128), Cow::Borrowed(_)));
        // E4M3 keeps 3 mantissa bits: 1.001 .. 1.255 collapse onto a few values.
        let t = q_act(Some(Fp8Recipe::Tensorwise), &x, 2, 128);
        let distinct = |v: &[f32]| {
            let mut s: Vec<u32> = v.iter().map(|x| x.to_bits()).collect();
            s.sort();
            s.dedup();
            s.len()
        };
        assert!(distinct(&t) <= 4, "{}", distinct(&t));
        // E5M2 keeps 2: fewer still.
        let g = q_grad(Some(Fp8Recipe::Tensorwise), &x, 2, 128);
        assert!(
            distinct(&g) < distinct(&t),
            "{} {}",
            distinct(&g),
            distinct(&t)
        );
        assert!(t.iter().zip(&x).all(|(a, b)| (a - b).abs() <= b / 16.0));
    }

    #[test]
    fn plans_name_the_recipe_they_ask_for() {
        assert_eq!(Fp8Recipe::from_plan("bf16", "delayed"), Ok(None));
        assert_eq!(
            Fp8Recipe::from_plan("fp8", "blockwise"),
            Ok(Some(Fp8Recipe::Blockwise))
        );
        let e = Fp8Recipe::from_plan("fp8", "delayed").unwrap_err();
        assert!(
            e.contains("parallelism.fp8_recipe") && e.contains("tensorwise"),
            "{e}"
        );
        let e = Fp8Recipe::from_plan("nvfp4", "delayed").unwrap_err();
        assert!(e.contains("parallelism.precision"), "{e}");
    }
}
