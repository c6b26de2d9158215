//! The transformer layers `pplan-exec profile` times on the CPU backend, as a plan with the same
//! replicas runs them: a dense layer and, for a mixture-of-experts model, a MoE layer; on
//! `devices × dp · cp` threads at once, each device's replicas wired by the same collectives as
//! in `pplan-exec run` (the context-parallel ring, the expert-parallel all-to-all,
//! [`crate::cpu::comm::replica_comms`]), so a layer's F and I include its exchanges and the
//! threads compete for the machine as a run's do. The number format is the plan's (FP8 GEMMs
//! emulated with their rounding passes).

use crate::cpu::comm::{replica_comms, replica_mismatch, Comms, ReplicaMismatch};
use crate::cpu::model::{self, Ctx, StageInput, StageWeights};
use crate::cpu::quant::Fp8Recipe;
use crate::spec::{self, Dims};
use pplan::inputs::profile::ProfiledLayer;
use std::time::Instant;

/// The replicas and number format a profile is measured for (`pplan-exec profile --dp --cp
/// --ep --precision --fp8-recipe`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parallel {
    pub dp: usize,
    pub cp: usize,
    pub ep: usize,
    pub fp8: Option<Fp8Recipe>,
}

impl Default for Parallel {
    fn default() -> Self {
        Parallel {
            dp: 1,
            cp: 1,
            ep: 1,
            fp8: None,
        }
    }
}

impl Parallel {
    /// Why the replicas do not fit the model, naming the flag.
    pub fn check(&self, d: &Dims) -> Result<(), String> {
        if self.dp == 0 || self.cp == 0 || self.ep == 0 {
            return Err("--dp, --cp and --ep must be at least 1".into());
        }
        let experts = d.moe.map_or(0, |m| m.experts);
        let replicas = self.dp * self.cp;
        let n = |x: usize| x as u64;
        match replica_mismatch(n(d.seq), n(experts), n(self.dp), n(self.cp), n(self.ep)) {
            Some(ReplicaMismatch::CpChunks) => Err(format!(
                "--cp {}: the sequence length {} must be a multiple of 2·cp = {} (each sequence is cut into 2·cp chunks)",
                self.cp,
                d.seq,
                2 * self.cp
            )),
            Some(ReplicaMismatch::Ep) => Err(format!(
                "--ep {}: expert parallelism needs a MoE model whose experts ({experts}) and dp·cp ranks ({replicas}) it divides",
                self.ep
            )),
            None => Ok(()),
        }
    }
}

/// Median F, I, W (ms) of one `kind` layer (dense, or MoE when `moe`), timed with
/// [`time_stage`] on every replica of `devices` devices at once: the median
/// over threads of each thread's median over `repeats` runs.
pub fn time_layer(
    devices: u32,
    par: Parallel,
    d: &Dims,
    moe: bool,
    threads: usize,
    repeats: u32,
) -> (f64, f64, f64) {
    let seed = spec::DEFAULT_SEED;
    let c = Ctx {
        fp8: par.fp8,
        ..Ctx::new(*d, threads)
    };
    let experts = d.moe.map_or(0, |m| m.experts) as u32;
    let per_rank = experts / par.ep.max(1) as u32;
    let pattern = [moe as u8];
    let (t, h) = (d.tokens(), d.hidden);
    std::thread::scope(|scope| {
        let mut handles = Vec::new();
        for _ in 0..devices.max(1) {
            for (r, mut comms) in replica_comms(par.dp, par.cp, par.ep)
                .into_iter()
                .enumerate()
            {
                let c = &c;
                handles.push(scope.spawn(move || {
                    let q = (r % par.ep) as u32;
                    let w = StageWeights::init_moe(
                        seed,
                        0,
                        1,
                        false,
                        false,
                        d,
                        &pattern,
                        q * per_rank..(q + 1) * per_rank,
                    );
                    let mut rng = spec::SplitMix64::new(11 + r as u64);
                    let x: Vec<f32> = (0..t * h).map(|_| rng.next_signed_unit()).collect();
                    let dy: Vec<f32> = (0..t * h).map(|_| rng.next_signed_unit() * 1e-3).collect();
                    time_stage(
                        c,
                        &w,
                        &|| (None, Some(x.clone())),
                        None,
                        Some(&dy),
                        repeats,
                        &mut comms,
                    )
                }));
            }
        }
        median_of_threads(handles)
    })
}

/// The median over threads of each thread's (F, I, W); a thread that panicked gives NaN,
/// which the profile's checks refuse.
pub fn median_of_threads(
    handles: Vec<std::thread::ScopedJoinHandle<'_, (f64, f64, f64)>>,
) -> (f64, f64, f64) {
    let per: Vec<(f64, f64, f64)> = handles
        .into_iter()
        .map(|h| h.join().unwrap_or((f64::NAN, f64::NAN, f64::NAN)))
        .collect();
    let m = |f: fn(&(f64, f64, f64)) -> f64| median(per.iter().map(f).collect());
    (m(|x| x.0), m(|x| x.1), m(|x| x.2))
}

/// A layer's activation bytes on one rank ([`model::layer_activation_bytes`] of its kind).
pub fn layer_activation_bytes(d: &Dims, moe: bool) -> u64 {
    if moe {
        model::layer_activation_bytes(d)
    } else {
        model::layer_activation_bytes(&Dims { moe: None, ..*d })
    }
}

/// The median (0 of nothing).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n == 0 {
        0.0
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        0.5 * (v[n / 2 - 1] + v[n / 2])
    }
}

fn ms_since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// (F, I, W) medians in ms of a stage made of `w` on `input`; `comms` wire it to the other
/// replicas timed at the same time ([`crate::profile_layers`]).
pub fn time_stage(
    c: &Ctx,
    w: &StageWeights,
    make_input: &(dyn Fn() -> (Option<Vec<u32>>, Option<Vec<f32>>) + Sync),
    labels: Option<&[u32]>,
    dy: Option<&[f32]>,
    repeats: u32,
    comms: &mut Comms,
) -> (f64, f64, f64) {
    let (mut f, mut i, mut wt) = (Vec::new(), Vec::new(), Vec::new());
    let mut acc = w.zeros_like();
    // One untimed warm-up run (first touch of the buffers), then `repeats` timed ones.
    for r in 0..=repeats {
        let (ids, hidden) = make_input();
        let input = match (&ids, hidden) {
            (Some(ids), _) => StageInput::Tokens(ids),
            (None, Some(x)) => StageInput::Hidden(x),
            (None, None) => unreachable!("an input is always made"),
        };
        let t = Instant::now();
        let (_, _, mut st) = model::stage_forward(c, w, input, labels, 1.0, comms)
            .expect("the profile's replicas run to the end together");
        let tf = ms_since(t);
        let t = Instant::now();
        let _ = model::stage_backward_input(c, w, &mut st, dy.map(<[f32]>::to_vec), comms)
            .expect("the profile's replicas run to the end together");
        let ti = ms_since(t);
        let t = Instant::now();
        model::stage_backward_weight(c, &st, &mut acc);
        let tw = ms_since(t);
        if r > 0 {
            f.push(tf);
            i.push(ti);
            wt.push(tw);
        }
    }
    (median(f), median(i), median(wt))
}

/// F, I and W of one stage, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StageTimes {
    pub f: f64,
    pub i: f64,
    pub w: f64,
}

/// A mixture-of-experts model's MoE layer: its times, which layers are MoE, and the
/// expert-parallel size it was measured at (each rank holds `E / ep` experts).
#[derive(Debug, Clone, PartialEq)]
pub struct MoeTimes {
    pub times: StageTimes,
    pub pattern: Vec<bool>,
    pub ep: usize,
}

/// The replicas a CPU profile was measured on, for its source text.
pub fn parallel_text(d: &Dims, p: Parallel) -> String {
    let mut s = String::new();
    if let Some(m) = d.moe {
        s += &format!(
            ", {} experts (top {}, width {}, shared {})",
            m.experts, m.topk, m.ffn, m.shared_ffn
        );
    }
    if p.dp * p.cp > 1 {
        s += &format!(
            ", on dp {} x cp {} replicas (ep {}) with their exchanges",
            p.dp, p.cp, p.ep
        );
    }
    s
}

/// Layer-profile entries: embedding, `num_layers` copies of the measured layer (the MoE
/// layer's where `moe` says a layer is one), output. Weights `weight_elem_bytes · params` on
/// one rank ([`model::layer_params`]); activations and transfers are f32 in
/// both backends (the CUDA backend keeps activations in f32 and casts GEMM inputs to bf16 on
/// the fly).
pub fn layer_entries(
    d: &Dims,
    num_layers: u32,
    weight_elem_bytes: u64,
    layer: StageTimes,
    moe: Option<&MoeTimes>,
    embedding: StageTimes,
    output: StageTimes,
) -> Vec<ProfiledLayer> {
    let (t, h, v) = (d.tokens(), d.hidden, d.vocab);
    let out_bytes = (4 * t * h) as u64;
    let entry = |name: String, s: StageTimes, wb: u64, ab: u64, ob: u64| ProfiledLayer {
        name,
        forward_ms: s.f,
        backward_ms: s.i + s.w,
        backward_input_ms: Some(s.i),
        backward_weight_ms: Some(s.w),
        weight_bytes: wb,
        activation_bytes: ab,
        output_bytes: ob,
    };
    let mut layers = vec![entry(
        "embedding".into(),
        embedding,
        weight_elem_bytes * (v * h) as u64,
        (4 * t) as u64,
        out_bytes,
    )];
    for l in 0..num_layers {
        let (is_moe, times, ep) = match moe {
            Some(m) if m.pattern.get(l as usize) == Some(&true) => (true, m.times, m.ep),
            _ => (false, layer, 1),
        };
        layers.push(entry(
            format!("layer{l}"),
            times,
            weight_elem_bytes * model::layer_params(d, is_moe, ep),
            layer_activation_bytes(d, is_moe),
            out_bytes,
        ));
    }
    layers.push(entry(
        "output".into(),
        output,
        weight_elem_bytes * (h * v) as u64,
        (4 * (t * h + t * v)) as u64,
        0,
    ));
    layers
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::MoeDims;

    fn moe_dims() -> Dims {
        Dims {
            moe: Some(MoeDims {
                experts: 4,
                topk: 2,
                ffn: 8,
                shared_ffn: 4,
            }),
            cp: 2,
            dp: 2,
            ..Dims::dense(16, 2, 32, 8, 1, 32)
        }
    }

    #[test]
    fn replicas_are_timed_with_their_exchanges() {
        let d = moe_dims();
        let par = Parallel {
            dp: 2,
            cp: 2,
            ep: 2,
            fp8: Some(Fp8Recipe::Tensorwise),
        };
        par.check(&d).unwrap();
        let (f, i, w) = time_layer(1, par, &d, true, 1, 1);
        assert!(f > 0.0 && i > 0.0 && w > 0.0, "{f} {i} {w}");
    }

    #[test]
    fn layouts_that_do_not_fit_the_model_name_the_flag() {
        let d = moe_dims();
        let bad = |p: Parallel, flag: &str| {
            let e = p.check(&d).unwrap_err();
            assert!(e.contains(flag), "{e}");
        };
        bad(
            Parallel {
                cp: 3,
                ..Parallel::default()
            },
            "--cp 3",
        );
        bad(
            Parallel {
                ep: 2,
                ..Parallel::default()
            },
            "--ep 2",
        );
    }

    #[test]
    fn parameters_count_the_ranks_experts() {
        let d = moe_dims();
        assert_eq!(
            model::layer_params(&d, false, 1),
            (4 * 256 + 2 * 16 * 32) as u64
        );
        // router 16·4, 2 of 4 experts 2·16·8 each, shared 2·16·4.
        assert_eq!(
            model::layer_params(&d, true, 2),
            (4 * 256 + 64 + 2 * 256 + 128) as u64
        );
    }
}
