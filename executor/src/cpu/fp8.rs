//! FP8 GEMM-input emulation in f32 ("fake quantization").
//!
//! To run FP8 GEMMs as Transformer Engine does (inputs cast to FP8 with a scale, products
//! accumulated in higher precision), each operand is scaled, rounded to the nearest FP8 value
//! and scaled back; the executor's f32 GEMM then runs on the result.
//!
//! Formats: the OCP 8-bit Floating Point Specification (OFP8) v1.0 (2023); Micikevicius et
//! al., "FP8 Formats for Deep Learning" (arXiv 2209.05433). Rounding is to nearest, ties to
//! even; beyond max it saturates (as Transformer Engine's casts do). Scales follow Transformer
//! Engine's `compute_scale_from_amax` (`transformer_engine/common/recipe/recipe_common.cuh`).

/// An OCP FP8 format (OFP8 v1.0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fp8Format {
    /// 4 exponent bits (bias 7), 3 mantissa bits; no infinities, `S.1111.111` is NaN; max
    /// normal 448 (`S.1111.110`), min normal 2^-6, min subnormal 2^-9. Activations, weights.
    E4M3,
    /// 5 exponent bits (bias 15), 2 mantissa bits; IEEE 754-like (infinities, NaNs at exponent
    /// 31); max normal 57344, min normal 2^-14, min subnormal 2^-16. Gradients.
    E5M2,
}

impl Fp8Format {
    /// The largest finite value: 448 (E4M3, `S.1111.110`) or 57344 (E5M2, `S.11110.11`).
    pub fn max(self) -> f32 {
        match self {
            Fp8Format::E4M3 => 448.0,
            Fp8Format::E5M2 => 57344.0,
        }
    }

    /// The smallest positive (subnormal) value: 2^-9 (E4M3) or 2^-16 (E5M2).
    pub fn min_subnormal(self) -> f32 {
        pow2(self.layout().1 - self.layout().0)
    }

    /// (explicit mantissa bits, exponent of the smallest normal value 1 − bias): (3, −6) for
    /// E4M3, (2, −14) for E5M2 (OFP8 v1.0).
    fn layout(self) -> (i32, i32) {
        match self {
            Fp8Format::E4M3 => (3, -6),
            Fp8Format::E5M2 => (2, -14),
        }
    }
}

/// 2^k as an f32, exactly, for `k` in f32's normal exponent range (−126..=127).
fn pow2(k: i32) -> f32 {
    f32::from_bits(((k + 127) as u32) << 23)
}

/// The nearest value of `f` to `x`, ties to even (on the FP8 mantissa's last bit), saturating:
/// |x| ≥ max (including ±infinity, also for E5M2, which has infinities) gives ±max, as
/// Transformer Engine's saturating casts do. NaN gives NaN; ±0 and values that round to zero
/// keep `x`'s sign. Exact for every representable value: `round_to(v, f) == v` for each finite
/// FP8 value `v`, and every result is exactly an FP8 value.
///
/// Method: `f`'s spacing around |x| is ulp = 2^(max(⌊log2|x|⌋, 1 − bias) − m) (m mantissa
/// bits), with ⌊log2|x|⌋ read from the f32 exponent field; |x|/ulp (exact, at most 2^(m+1)) is
/// rounded by `round_ties_even` to an integer whose parity is the FP8 mantissa's last bit, and
/// multiplying back by ulp is exact.
pub fn round_to(x: f32, f: Fp8Format) -> f32 {
    let a = x.abs();
    if a >= f.max() {
        return f.max().copysign(x);
    }
    // f32 subnormals have exponent field 0 (so −127 here), far below every FP8 binade; NaN
    // (exponent field 255, so a valid ulp) and ±0 pass through the arithmetic unchanged.
    let (m, emin) = f.layout();
    let ulp = pow2(((a.to_bits() >> 23) as i32 - 127).max(emin) - m);
    ((a / ulp).round_ties_even() * ulp).copysign(x)
}

/// The largest |x| in `x`: 0 for an empty slice; NaN entries are ignored (an infinity counts).
pub fn amax(x: &[f32]) -> f32 {
    x.iter().fold(0.0f32, |m, v| m.max(v.abs()))
}

/// Transformer Engine's current scale for a tensor whose amax is `amax`: `max / amax` (no power
/// of two is forced), 1 when `amax` is 0 or not finite, and `f32::MAX` when the quotient
/// overflows f32 (a tiny amax), as `compute_scale_from_amax` in Transformer Engine's
/// `recipe_common.cuh` does.
pub fn scale_for(amax: f32, f: Fp8Format) -> f32 {
    if amax == 0.0 || !amax.is_finite() {
        return 1.0;
    }
    (f.max() / amax.abs()).min(f32::MAX)
}

/// In place: `x ← round_to(x·scale, f) / scale`, the FP8 cast and its dequantization. `scale`
/// should be positive and finite (as [`scale_for`] returns); entries whose scaled magnitude
/// exceeds `f.max()` saturate.
pub fn fake_quant(x: &mut [f32], scale: f32, f: Fp8Format) {
    for v in x.iter_mut() {
        *v = round_to(*v * scale, f) / scale;
    }
}

/// Per-tensor current scaling (Transformer Engine's `Float8CurrentScaling` recipe): the scale
/// comes from this tensor's own amax ([`scale_for`]), then [`fake_quant`]. Returns the amax.
pub fn fake_quant_tensor(x: &mut [f32], f: Fp8Format) -> f32 {
    let a = amax(x);
    fake_quant(x, scale_for(a, f), f);
    a
}

/// Block scaling (DeepSeek-V3's fine-grained recipe, Megatron-Core's `--fp8-recipe blockwise`,
/// Transformer Engine's `Float8BlockScaling`): `x` is `[rows, cols]` row-major, cut into blocks
/// of `br` × `bc` (blocks at the bottom and right edges are smaller), and each block is
/// fake-quantized with the scale of its own amax. Activations and gradients use 1 × 128 blocks,
/// weights 128 × 128.
///
/// Panics if `x.len() != rows * cols` or a block dimension is 0.
pub fn fake_quant_blocks(
    x: &mut [f32],
    rows: usize,
    cols: usize,
    br: usize,
    bc: usize,
    f: Fp8Format,
) {
    assert_eq!(x.len(), rows * cols, "x is not [rows, cols]");
    assert!(br > 0 && bc > 0, "empty block shape {br} x {bc}");
    for r0 in (0..rows).step_by(br) {
        let r1 = (r0 + br).min(rows);
        for c0 in (0..cols).step_by(bc) {
            let c1 = (c0 + bc).min(cols);
            let a = (r0..r1).fold(0.0f32, |m, r| m.max(amax(&x[r * cols + c0..r * cols + c1])));
            let s = scale_for(a, f);
            for r in r0..r1 {
                fake_quant(&mut x[r * cols + c0..r * cols + c1], s, f);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Fp8Format::{E4M3, E5M2};
    use super::*;
    use crate::spec::SplitMix64;

    /// Decodes an FP8 bit pattern straight from the OFP8 bit layout, independently of
    /// `round_to`: the value (NaN for NaN patterns, ±inf for E5M2's) and the mantissa field.
    fn decode(bits: u8, f: Fp8Format) -> (f32, u8) {
        let (eb, m, bias) = if f == E4M3 { (4, 3, 7) } else { (5, 2, 15) };
        let sign = if bits & 0x80 != 0 { -1.0 } else { 1.0 };
        let exp = ((bits >> m) & ((1 << eb) - 1)) as i32;
        let man = bits & ((1 << m) - 1);
        if exp == (1 << eb) - 1 && (f == E5M2 || man == 0b111) {
            let inf = f == E5M2 && man == 0;
            return (sign * if inf { f32::INFINITY } else { f32::NAN }, man);
        }
        let mag = if exp == 0 {
            man as f64 * 2f64.powi(1 - bias - m)
        } else {
            (1.0 + man as f64 / (1 << m) as f64) * 2f64.powi(exp - bias)
        };
        (sign * mag as f32, man)
    }

    /// Non-negative finite values of `f`, ascending, with their mantissa fields.
    fn positives(f: Fp8Format) -> Vec<(f32, u8)> {
        let mut v: Vec<_> = (0..=0x7fu8).map(|b| decode(b, f)).collect();
        v.retain(|d| d.0.is_finite());
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
        v
    }

    /// `round_to(x, f)` must be `want`, bit for bit (so the sign of zero counts).
    fn check(x: f32, f: Fp8Format, want: f32) {
        let r = round_to(x, f);
        assert_eq!(r.to_bits(), want.to_bits(), "{f:?}: {x:e} -> {r:e}");
    }

    /// Test 1: all 256 patterns of each format round-trip exactly (bitwise, so −0 stays −0);
    /// NaN patterns give NaN and E5M2's infinities saturate to ±57344.
    #[test]
    fn every_bit_pattern_round_trips() {
        for f in [E4M3, E5M2] {
            let (mut nans, mut infs) = (0, 0);
            for b in 0..=255u8 {
                let (v, _) = decode(b, f);
                if v.is_nan() {
                    nans += 1;
                    assert!(round_to(v, f).is_nan(), "{f:?} {b:#04x}: NaN stays NaN");
                } else if v.is_infinite() {
                    infs += 1;
                    check(v, f, f.max().copysign(v));
                } else {
                    check(v, f, v);
                }
            }
            let p = positives(f);
            assert_eq!(p.last().unwrap().0, f.max(), "{f:?} max");
            assert_eq!(p[1].0, f.min_subnormal(), "{f:?} min subnormal");
            assert_eq!((nans, infs), if f == E4M3 { (2, 0) } else { (6, 2) });
        }
    }

    /// Test 2: published anchors (saturation, ties to even, the subnormal floor).
    #[test]
    fn published_anchors() {
        let p2 = |k: i32| 2f32.powi(k);
        assert_eq!((E4M3.max(), E4M3.min_subnormal()), (448.0, p2(-9)));
        assert_eq!((E5M2.max(), E5M2.min_subnormal()), (57344.0, p2(-16)));
        for x in [448.0, 449.0, 464.0, 500.0, 1e6, f32::INFINITY] {
            check(x, E4M3, 448.0);
            check(-x, E4M3, -448.0);
        }
        check(1.0625, E4M3, 1.0); // tie: 1.000 (even) vs 1.001
        check(1.1875, E4M3, 1.25); // tie: 1.001 vs 1.010 (even)
        check(p2(-10), E4M3, 0.0); // tie: 0 (even) vs 2^-9
        check(-p2(-10), E4M3, -0.0);
        check(1.5 * p2(-10), E4M3, p2(-9));
        check(-0.0, E4M3, -0.0);
        for x in [57344.0, 61440.0, 1e9, f32::INFINITY] {
            check(-x, E5M2, -57344.0);
        }
        check(1.125, E5M2, 1.0); // tie: 1.00 (even) vs 1.01
        check(1.375, E5M2, 1.5); // tie: 1.01 vs 1.10 (even)
        check(p2(-17), E5M2, 0.0);
        check(3.0 * p2(-18), E5M2, p2(-16));
        check(f32::from_bits(1), E5M2, 0.0);
        assert!(round_to(f32::NAN, E4M3).is_nan() && round_to(f32::NAN, E5M2).is_nan());
    }

    /// amax ignores NaN; scales are max/amax, 1 for a zero or non-finite amax, f32::MAX when
    /// max/amax overflows (Transformer Engine's rule), and a tiny tensor quantizes finitely.
    #[test]
    fn amax_and_scales() {
        assert_eq!((amax(&[]), amax(&[1.0, f32::NAN, -3.0])), (0.0, 3.0));
        assert_eq!(
            (scale_for(2.0, E4M3), scale_for(-8.0, E5M2)),
            (224.0, 7168.0)
        );
        let ones = [0.0, f32::INFINITY, f32::NAN].map(|a| scale_for(a, E4M3));
        assert_eq!(ones, [1.0; 3]);
        assert_eq!(scale_for(1e-40, E4M3), f32::MAX);
        let mut x = [1e-40, -5e-41, 0.0];
        assert_eq!(fake_quant_tensor(&mut x, E4M3), 1e-40);
        assert!(x[0] > 0.0 && x[1] < 0.0 && x[2] == 0.0, "{x:?}");
    }

    /// Test 3: at every midpoint of adjacent values the even mantissa wins, and one f32 ulp
    /// either side goes to the nearer neighbour.
    #[test]
    fn midpoints_tie_to_even() {
        for f in [E4M3, E5M2] {
            for w in positives(f).windows(2) {
                let ((a, ma), (b, mb)) = (w[0], w[1]);
                assert_ne!(ma % 2, mb % 2, "{f:?}: {a} and {b}");
                let mid = (a + b) / 2.0;
                let even = if ma % 2 == 0 { a } else { b };
                check(mid, f, even);
                check(-mid, f, -even);
                check(f32::from_bits(mid.to_bits() - 1), f, a);
                check(f32::from_bits(mid.to_bits() + 1), f, b);
            }
        }
    }

    /// Against a brute-force nearest search (ties to the even mantissa) over the decoded table,
    /// on values spread over every binade in and around each format's range.
    #[test]
    fn matches_brute_force_nearest() {
        let mut rng = SplitMix64::new(11);
        for f in [E4M3, E5M2] {
            let p = positives(f);
            for i in 0..40_000 {
                let x = rng.next_signed_unit() * 3.0 * 2f32.powi(i % 48 - 24);
                let d = |v: f32| (v as f64 - x.abs() as f64).abs();
                let mut best = p[0];
                for &c in &p[1..] {
                    if d(c.0) < d(best.0) || (d(c.0) == d(best.0) && c.1 % 2 == 0) {
                        best = c;
                    }
                }
                check(x, f, best.0.copysign(x));
            }
        }
    }

    /// Test 4: per-tensor current scaling keeps each element above amax·2^-8 (normal range
    /// once scaled) within the half-ulp relative bound 2^-4 (E4M3; 2^-3 for E5M2), the rest
    /// within half the smallest subnormal over the scale, and maps the amax element to itself.
    #[test]
    fn per_tensor_error_bounds() {
        for f in [E4M3, E5M2] {
            let mut rng = SplitMix64::new(7);
            let orig: Vec<f32> = (0..4096).map(|_| rng.next_signed_unit() * 10.0).collect();
            let mut x = orig.clone();
            let am = fake_quant_tensor(&mut x, f);
            assert_eq!(am, amax(&orig));
            let rel_bound = 2f32.powi(-(f.layout().0 + 1)) * (1.0 + 1e-5);
            let abs_bound = f.min_subnormal() / 2.0 / scale_for(am, f) * (1.0 + 1e-5);
            let mut worst = 0.0f32;
            for (&o, &q) in orig.iter().zip(&x) {
                let err = (q - o).abs();
                if o.abs() > am * 2f32.powi(-8) {
                    assert!(err <= o.abs() * rel_bound, "{f:?}: {o} -> {q}");
                    worst = worst.max(err / o.abs());
                } else {
                    let bound = abs_bound.max(o.abs() * rel_bound);
                    assert!(err <= bound, "{f:?}: {o} -> {q}");
                }
            }
            assert!(worst > rel_bound / 4.0, "{f:?}: worst {worst}"); // it did quantize
            let i = orig.iter().position(|v| v.abs() == am).unwrap();
            let (o, q) = (orig[i], x[i]);
            assert!((q - o).abs() <= am * 4.0 * f32::EPSILON, "{f:?}: {q}");
        }
    }

    /// A [4, 256] tensor: columns 0..128 have magnitudes in [0.5, 1], columns 128..256 the
    /// same times `ratio`; random signs.
    fn two_scale(ratio: f32) -> Vec<f32> {
        let mut rng = SplitMix64::new(3);
        let m = |u: f32| (0.5 + 0.5 * u.abs()).copysign(u);
        let w = |i: usize| if i % 256 < 128 { 1.0 } else { ratio };
        let v = |i: usize| m(rng.next_signed_unit()) * w(i);
        (0..1024).map(v).collect()
    }

    /// Relative errors of the small half (columns 0..128).
    fn small_half_errors(orig: &[f32], q: &[f32]) -> Vec<f32> {
        let rel = |i: usize| (q[i] - orig[i]).abs() / orig[i].abs();
        (0..orig.len()).filter(|i| i % 256 < 128).map(rel).collect()
    }

    /// Test 5: 1 × 128 block scaling keeps the small half of a two-scale tensor accurate where
    /// per-tensor scaling loses it.
    #[test]
    fn block_scaling_beats_per_tensor() {
        let bound = 1.0 / 16.0 * (1.0 + 1e-5);
        // 1e6 apart: per-tensor scaling puts the small half below half E4M3's smallest
        // subnormal, so it all flushes to zero; blocks keep it within the half-ulp bound.
        let orig = two_scale(1e6);
        let (mut blk, mut ten) = (orig.clone(), orig.clone());
        fake_quant_blocks(&mut blk, 4, 256, 1, 128, E4M3);
        fake_quant_tensor(&mut ten, E4M3);
        let eb = small_half_errors(&orig, &blk);
        let et = small_half_errors(&orig, &ten);
        assert!(eb.iter().all(|&e| e <= bound), "block scaling: {eb:?}");
        let mb = eb.iter().sum::<f32>() / 512.0;
        let mt = et.iter().sum::<f32>() / 512.0;
        assert!(mb * 10.0 <= mt, "block mean {mb} vs per-tensor {mt}");
        assert!(et.iter().all(|&e| e == 1.0), "per-tensor flushes to zero");
        // 1000x apart, E4M3's range absorbs it: per-tensor scales the small half to [0.22, 0.45].
        let orig = two_scale(1000.0);
        let mut ten = orig.clone();
        fake_quant_tensor(&mut ten, E4M3);
        assert!(small_half_errors(&orig, &ten).iter().all(|&e| e <= bound));
    }

    /// Block fake-quantization of a [3, 130] tensor done element by element: each element
    /// scaled by its own block's amax.
    fn blocks_by_hand(x: &[f32], br: usize, bc: usize, f: Fp8Format) -> Vec<f32> {
        let block = |i: usize| (i / 130 / br) * 130usize.div_ceil(bc) + (i % 130) / bc;
        let mut am = vec![0.0f32; 3 * 130];
        for (i, v) in x.iter().enumerate() {
            am[block(i)] = am[block(i)].max(v.abs());
        }
        let s = |i: usize| scale_for(am[block(i)], f);
        let q = |i: usize| round_to(x[i] * s(i), f) / s(i);
        (0..x.len()).map(q).collect()
    }

    /// Edge blocks: a [3, 130] tensor with 128 × 128 (and other) blocks matches the by-hand
    /// result exactly, and differs from per-tensor scaling unless one block covers it all.
    #[test]
    fn edge_blocks_match_by_hand() {
        let mut rng = SplitMix64::new(5);
        let w = |i: usize| if i % 130 >= 128 { 50.0 } else { 1.0 };
        let orig: Vec<f32> = (0..390).map(|i| rng.next_signed_unit() * w(i)).collect();
        let mut ten = orig.clone();
        fake_quant_tensor(&mut ten, E4M3);
        for (br, bc) in [(128, 128), (1, 128), (2, 64), (3, 130)] {
            for f in [E4M3, E5M2] {
                let mut x = orig.clone();
                fake_quant_blocks(&mut x, 3, 130, br, bc, f);
                let want = blocks_by_hand(&orig, br, bc, f);
                let same = x.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "{br}x{bc} {f:?}");
                if f == E4M3 {
                    assert_eq!(x != ten, (br, bc) != (3, 130), "{br}x{bc} vs per-tensor");
                }
            }
        }
    }

    /// A shape mismatch panics with a message.
    #[test]
    #[should_panic(expected = "x is not [rows, cols]")]
    fn block_shape_mismatch_panics() {
        fake_quant_blocks(&mut [0.0; 5], 2, 3, 1, 128, E4M3);
    }
}
