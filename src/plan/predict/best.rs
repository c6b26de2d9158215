//! `--micro-batch auto` / `--chunks auto`: the fastest fitting micro-batch size and chunk
//! count for a fixed (t, p, d), by predicting each.

use super::figures::predict;
use super::request::*;
use crate::schedule::generators::ScheduleName;

/// The best micro-batch size and chunk count for a fixed (t, p, d): every `b` dividing the
/// per-replica batch (or only `micro_batch` when given) and, when `p > 1`, every `v` dividing
/// the layers per device (or only `chunks` when given; interleaved schedule for `v > 1`, which
/// Megatron-LM runs only when `p` divides the micro-batch count). With `chunks` given the
/// base request's schedule is kept; otherwise each `v` runs its default schedule
/// (`--micro-batch auto`, `--chunks auto`). Returns the fitting prediction with the highest
/// throughput, or `None` if none fits.
pub fn best_micro_batch_and_chunks(
    base: &PredictRequest,
    micro_batch: Option<u64>,
    chunks: Option<u64>,
) -> Result<Option<Prediction>, PredictError> {
    let mut probe = base.clone();
    probe.micro_batch = 1;
    probe.chunks = 1;
    let dp = check(&probe)?;
    let per_replica = base.global_batch / dp;
    let layers_per_device = base.model.num_layers as u64 / base.pp;
    let chunk_options = match chunks {
        Some(v) => vec![v],
        None if base.pp > 1 => divisors(layers_per_device.max(1)),
        None => vec![1],
    };
    let batch_options = match micro_batch {
        Some(b) => vec![b],
        None => divisors(per_replica),
    };
    let mut best: Option<Prediction> = None;
    for b in batch_options {
        let m = per_replica / b;
        for &v in &chunk_options {
            let interleaved = chunks.is_none()
                || matches!(base.schedule, None | Some(ScheduleName::Interleaved1F1B));
            if interleaved && v > 1 && m % base.pp != 0 {
                continue;
            }
            let mut req = base.clone();
            req.micro_batch = b;
            req.chunks = v;
            if chunks.is_none() {
                req.schedule = None;
            }
            req.record_timeline = false;
            let pred = match predict(&req) {
                Ok(p) => p,
                Err(PredictError::TooLarge { .. }) => continue,
                Err(e) => return Err(e),
            };
            if pred.fits
                && best
                    .as_ref()
                    .is_none_or(|x| pred.tflops_per_gpu > x.tflops_per_gpu)
            {
                best = Some(pred);
            }
        }
    }
    Ok(best)
}
