//! Megatron-LM iteration lines and torchtitan step lines: the per-iteration figures a training
//! log prints (docs/validate.md, "Readers: Nsight Systems and logs").
//!
//! Megatron-LM (`training_log` in megatron/training/training.py) prints, on the last rank,
//!
//! ```text
//!  [2025-09-05 16:08:25] iteration        2/    2000 | consumed samples: 256 | elapsed time per
//!  iteration (ms): 11182.0 | throughput per GPU (TFLOP/s/GPU): 128.2 | ... | global batch size:
//!  128 | lm loss: 2.688647E+00 | ...
//! ```
//!
//! (one line; older versions have no timestamp and no throughput) and, from `report_memory`,
//! `[Rank 0] (after 1 iterations) memory (MB) | allocated: ... | max reserved: 66802.0`.
//!
//! torchtitan (`MetricsProcessor.log` in torchtitan/components/metrics.py) prints, on every
//! logged rank, `step: 5  loss:  7.07623  grad_norm: 46.5000  memory: 66.91GiB(37.51%)  tps:
//! 10,007  tflops: 313.36  mfu: 13.93%`, coloured with ANSI escape codes unless colour printing
//! is off; older versions print `wps:` for `tps:` and no `grad_norm` or `tflops`.
//!
//! Launcher prefixes (`0: `, `[default0]:`, `[rank0]:`) are ignored: the fields are found
//! anywhere in a line. Lines that are neither are skipped, and so are validation lines
//! (Megatron's `validation loss at iteration N`, torchtitan's `validate step: N`).

use super::timeline::{LogIteration, MeasuredError, Source};
use std::collections::HashMap;

/// The physical ranges of a log's figures. A value outside is a damaged or hostile line, not a
/// slow run: refused with the line, the field and the range.
///
/// An iteration takes more than 0 ms and less than a day (86,400,000 ms).
const STEP_MS_MAX: f64 = 86_400_000.0;
/// Throughput per GPU below 100,000 TFLOP/s: ten times the dense FP4 peak of any GPU shipped
/// (B300: 15 PFLOP/s, hardware/b300.json).
const TFLOPS_MAX: f64 = 100_000.0;
/// Tokens per second per GPU below 10^9 (a GPU of 10^16 FLOP/s on a model of 10^6 parameters
/// does 10^9 tokens/s at 6 FLOPs per parameter and token).
const TOKENS_PER_S_MAX: f64 = 1e9;
/// Memory below 1 PiB per GPU.
const MEMORY_BYTES_MAX: f64 = (1u64 << 50) as f64;

const NOTHING_FOUND: &str = "no Megatron-LM iteration lines ('iteration N/M | ... | elapsed time \
     per iteration (ms): T | ...') nor torchtitan step lines ('step: N  loss: L  ...  tps: T  ...') \
     found; pass the training's stdout/stderr log";

/// Which framework wrote this log, from its first iteration or step line; `None` when neither.
pub fn sniff(text: &str) -> Option<Source> {
    text.lines().find_map(|raw| {
        let line = strip_ansi(raw);
        if megatron_iteration(&line).is_some() {
            Some(Source::MegatronLog)
        } else if titan_step(&line).is_some() {
            Some(Source::TorchtitanLog)
        } else {
            None
        }
    })
}

/// Read every iteration line of a log, in file order. The first recognised line decides the
/// framework; lines of the other framework are then skipped. An iteration number seen before
/// (torchtitan prints the same step on every logged rank) keeps its first line.
///
/// Megatron-LM's memory line (`memory (MB) | ... | max reserved: M`) gives `memory_bytes`
/// (M × 2^20) of the iteration it names (`after N iterations`) when that iteration was read,
/// else of the last iteration read before it; several such lines (one per data-parallel rank
/// 0) keep the largest. `max reserved` is the caching allocator's peak, the figure closest to
/// what nvidia-smi shows as used (without the CUDA context).
pub fn read(text: &str, file: &str) -> Result<(Source, Vec<LogIteration>), MeasuredError> {
    if text.trim().is_empty() {
        return Err(MeasuredError::new(
            file,
            format!("the log is empty: {NOTHING_FOUND}"),
        ));
    }
    let err = |line_no: usize, field: &str, value: &str, expected: &str| {
        MeasuredError::new(
            file,
            format!("line {line_no}: field '{field}' is '{value}', not {expected}"),
        )
    };
    let mut source: Option<Source> = None;
    let mut iterations: Vec<LogIteration> = Vec::new();
    // Iteration number → its index in `iterations`: a log of a million lines is read in
    // linear time (a search per line made 200k lines take a minute).
    let mut seen: HashMap<u64, usize> = HashMap::new();
    for (i, raw) in text.lines().enumerate() {
        let line_no = i + 1;
        let line = strip_ansi(raw);
        if source != Some(Source::TorchtitanLog) {
            if let Some(fields) = megatron_iteration(&line) {
                source = Some(Source::MegatronLog);
                let it = megatron_fields(&fields).map_err(|(f, v, e)| err(line_no, f, v, e))?;
                push_new(&mut iterations, &mut seen, it);
                continue;
            }
            if source == Some(Source::MegatronLog) {
                if let Some((after, reserved)) = megatron_memory(&line) {
                    let mib = reserved.map_err(|v| {
                        err(
                            line_no,
                            "max reserved",
                            v,
                            "a number of megabytes from 0 to 2^30 (1 PiB)",
                        )
                    })?;
                    let bytes = (mib * 1024.0 * 1024.0).round() as u64;
                    let target = after
                        .and_then(|n| seen.get(&n).copied())
                        .or_else(|| iterations.len().checked_sub(1));
                    if let Some(t) = target {
                        let m = &mut iterations[t].memory_bytes;
                        *m = Some(m.map_or(bytes, |old| old.max(bytes)));
                    }
                }
                continue;
            }
        }
        if source != Some(Source::MegatronLog) {
            if let Some(fields) = titan_step(&line) {
                source = Some(Source::TorchtitanLog);
                let it = titan_fields(&fields).map_err(|(f, v, e)| err(line_no, f, v, e))?;
                push_new(&mut iterations, &mut seen, it);
            }
        }
    }
    match source {
        Some(s) => Ok((s, iterations)),
        None => Err(MeasuredError::new(file, NOTHING_FOUND)),
    }
}

fn push_new(iterations: &mut Vec<LogIteration>, seen: &mut HashMap<u64, usize>, it: LogIteration) {
    if let std::collections::hash_map::Entry::Vacant(e) = seen.entry(it.iteration) {
        e.insert(iterations.len());
        iterations.push(it);
    }
}

/// The line without ANSI escape sequences (`ESC [ ... final-byte`, and lone `ESC x`).
fn strip_ansi(line: &str) -> std::borrow::Cow<'_, str> {
    if !line.contains('\x1b') {
        return std::borrow::Cow::Borrowed(line);
    }
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\x1b' {
            out.push(c);
            continue;
        }
        if chars.peek() == Some(&'[') {
            chars.next();
            // Parameters and intermediates, then one final byte in '@'..='~'.
            for d in chars.by_ref() {
                if ('@'..='~').contains(&d) {
                    break;
                }
            }
        } else {
            chars.next();
        }
    }
    std::borrow::Cow::Owned(out)
}

/// A field that could not be read: (field name, text, what was expected).
type FieldError<'a> = (&'a str, &'a str, &'static str);

const ELAPSED: &str = "elapsed time per iteration (ms)";

/// A Megatron-LM training iteration line split into `(key, value)` fields, the first being
/// `("iteration", "N")`; `None` for any other line.
fn megatron_iteration(line: &str) -> Option<Vec<(&str, &str)>> {
    if !line.contains(ELAPSED) {
        return None;
    }
    let mut segments = line.split('|');
    let head = segments.next()?;
    // `... iteration      100/   50000 `: the last "iteration" of the first segment.
    let at = head.rfind("iteration")?;
    let (number, total) = head[at + "iteration".len()..].split_once('/')?;
    let number = number.trim();
    if number.is_empty()
        || !number.bytes().all(|b| b.is_ascii_digit())
        || !total.trim().bytes().all(|b| b.is_ascii_digit())
        || head[..at].to_ascii_lowercase().contains("validation")
    {
        return None;
    }
    let mut fields = vec![("iteration", number)];
    fields.extend(segments.filter_map(|s| {
        let (k, v) = s.split_once(':')?;
        Some((k.trim(), v.trim()))
    }));
    Some(fields)
}

fn megatron_fields<'a>(fields: &[(&'a str, &'a str)]) -> Result<LogIteration, FieldError<'a>> {
    let mut it = LogIteration::default();
    let mut elapsed = None;
    for &(key, value) in fields {
        match key {
            "iteration" => it.iteration = int(key, value)?,
            ELAPSED => {
                elapsed = Some(ranged(
                    key,
                    value,
                    0.0,
                    STEP_MS_MAX,
                    false,
                    "a number of milliseconds above 0 and below 86,400,000 (a day)",
                )?)
            }
            "throughput per GPU (TFLOP/s/GPU)" => {
                it.tflops_per_gpu = Some(ranged(
                    key,
                    value,
                    0.0,
                    TFLOPS_MAX,
                    true,
                    "a number of TFLOP/s from 0 to 100,000 (ten times any GPU's peak)",
                )?)
            }
            "global batch size" => {
                let b = int(key, value)?;
                if b == 0 {
                    return Err((key, value, "a positive integer"));
                }
                it.global_batch = Some(b)
            }
            "lm loss" => it.loss = Some(float(key, value)?),
            _ => {}
        }
    }
    it.step_time_s = elapsed.map(|ms| ms / 1000.0);
    Ok(it)
}

/// A Megatron-LM memory report: the iteration it names (`after N iterations`) and its
/// `max reserved` in MB (the unparsed text when it is not a number). `None` for other lines.
fn megatron_memory(line: &str) -> Option<(Option<u64>, Result<f64, &str>)> {
    let at = line.find("memory (MB)")?;
    let reserved = line[at..].split('|').find_map(|s| {
        let (k, v) = s.split_once(':')?;
        (k.trim() == "max reserved").then(|| v.trim())
    })?;
    let after = line[..at].find("after ").and_then(|a| {
        let rest = &line[a + "after ".len()..at];
        let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
        digits.parse().ok()
    });
    let value = reserved
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v >= 0.0 && v * 1024.0 * 1024.0 < MEMORY_BYTES_MAX)
        .ok_or(reserved);
    Some((after, value))
}

/// A torchtitan training step line split into `(key, value)` fields from `step:` on; `None`
/// for any other line, validation steps included.
fn titan_step(line: &str) -> Option<Vec<(&str, &str)>> {
    let at = line.find("step:")?;
    if line[..at].trim_end().ends_with("validate") {
        return None;
    }
    let mut fields = Vec::new();
    let mut tokens = line[at..].split_whitespace();
    while let Some(token) = tokens.next() {
        if let Some(key) = token.strip_suffix(':') {
            if let Some(value) = tokens.next() {
                fields.push((key, value));
            }
        }
    }
    let step_ok = fields.first().is_some_and(|&(k, v)| {
        k == "step" && !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit())
    });
    let has_rate = fields.iter().any(|&(k, _)| k == "tps" || k == "wps");
    (step_ok && has_rate).then_some(fields)
}

fn titan_fields<'a>(fields: &[(&'a str, &'a str)]) -> Result<LogIteration, FieldError<'a>> {
    let mut it = LogIteration::default();
    for &(key, value) in fields {
        match key {
            "step" => it.iteration = int(key, value)?,
            "loss" => it.loss = Some(float(key, value)?),
            "tps" | "wps" => {
                it.tokens_per_s_per_gpu = Some(
                    in_range(
                        float(key, &value.replace(',', "")),
                        0.0,
                        TOKENS_PER_S_MAX,
                        true,
                    )
                    .map_err(|_| {
                        (
                            key,
                            value,
                            "a number of tokens per second from 0 to 10^9 (e.g. 6,123)",
                        )
                    })?,
                )
            }
            "tflops" => {
                it.tflops_per_gpu = Some(
                    in_range(float(key, &value.replace(',', "")), 0.0, TFLOPS_MAX, true).map_err(
                        |_| {
                            (
                                key,
                                value,
                                "a number of TFLOP/s from 0 to 100,000 (e.g. 354.56)",
                            )
                        },
                    )?,
                )
            }
            "mfu" if value == "N/A" => {}
            "mfu" => {
                let pct = value.strip_suffix('%').ok_or((
                    key,
                    value,
                    "a percentage (e.g. 35.85%) or N/A",
                ))?;
                // Model FLOPs utilisation is achieved over peak FLOP/s: 0 to 100 %.
                it.mfu = Some(
                    in_range(float(key, pct), 0.0, 100.0, true)
                        .map_err(|_| (key, value, "a percentage from 0% to 100% (e.g. 35.85%)"))?
                        / 100.0,
                );
            }
            "memory" => {
                // `35.21GiB(37.05%)`: the peak reserved memory and its share of the device.
                let gib = value.split_once("GiB").map(|(g, _)| g).ok_or((
                    key,
                    value,
                    "a size in GiB (e.g. 35.21GiB(37.05%))",
                ))?;
                let gib = in_range(
                    float(key, gib),
                    0.0,
                    MEMORY_BYTES_MAX / (1u64 << 30) as f64,
                    true,
                )
                .map_err(|_| {
                    (
                        key,
                        value,
                        "a size in GiB from 0 to 1 PiB (e.g. 35.21GiB(37.05%))",
                    )
                })?;
                it.memory_bytes = Some((gib * (1u64 << 30) as f64).round() as u64);
            }
            _ => {}
        }
    }
    Ok(it)
}

fn float<'a>(key: &'a str, value: &'a str) -> Result<f64, FieldError<'a>> {
    value
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite())
        .ok_or((key, value, "a number"))
}

/// A parsed number within [lo, hi] (lo itself allowed when `lo_ok`, else excluded).
fn in_range<'a>(
    v: Result<f64, FieldError<'a>>,
    lo: f64,
    hi: f64,
    lo_ok: bool,
) -> Result<f64, FieldError<'a>> {
    let v = v?;
    let above = if lo_ok { v >= lo } else { v > lo };
    if above && v <= hi {
        Ok(v)
    } else {
        Err(("", "", ""))
    }
}

/// A number of `key` within its range, `expected` naming the range in the error.
fn ranged<'a>(
    key: &'a str,
    value: &'a str,
    lo: f64,
    hi: f64,
    lo_ok: bool,
    expected: &'static str,
) -> Result<f64, FieldError<'a>> {
    in_range(float(key, value), lo, hi, lo_ok).map_err(|_| (key, value, expected))
}

fn int<'a>(key: &'a str, value: &'a str) -> Result<u64, FieldError<'a>> {
    value
        .parse::<u64>()
        .map_err(|_| (key, value, "a non-negative integer"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ansi_codes_are_stripped() {
        // torchtitan's colours (torchtitan/tools/utils.py `Color`) around a step line.
        let s = strip_ansi("\x1b[31mstep:  1  \x1b[38;2;54;234;195mmemory: 1.00GiB(1.00%)\x1b[39m");
        assert_eq!(s, "step:  1  memory: 1.00GiB(1.00%)");
    }

    #[test]
    fn validation_lines_are_not_iterations() {
        // Synthetic, in the formats of Megatron-LM's `evaluate_and_print_results` and
        // torchtitan's `log_validation`.
        assert!(megatron_iteration(
            " validation loss at iteration 1000 | lm loss value: 6.439325E+00 | lm loss PPL: 6.259840E+02 | "
        )
        .is_none());
        assert!(
            titan_step("validate step: 10  loss:  2.1000  memory: 1.00GiB(1.00%)  tps: 1,000")
                .is_none()
        );
    }
}
