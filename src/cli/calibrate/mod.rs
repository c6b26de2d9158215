//! `pplan calibrate`: fit a layer profile (and hardware terms) to a measured run of a plan.

use super::common::*;
use pplan::inputs::hardware::Hardware;
use pplan::plan::calibrate::{calibrate, CalibrateInput, Calibration};
use serde::Serialize;
use std::path::Path;

pub(crate) mod args;

pub(crate) use args::CalibrateArgs;

#[derive(Serialize)]
struct Report<'a> {
    #[serde(flatten)]
    calibration: &'a Calibration,
    out_profile: String,
    out_hardware: Option<String>,
}

/// `--hardware`, else the plan's `hardware` (a bundled name, a path, or a path relative to
/// the plan file). `Err` only for an unreadable `--hardware`.
fn hardware(
    args: &CalibrateArgs,
    plan_hw: &str,
) -> Result<(Option<Hardware>, Option<String>), CliError> {
    if let Some(h) = &args.hardware {
        let hw = Hardware::load(h).map_err(|e| CliError::Input(format!("--hardware: {e}")))?;
        return Ok((Some(hw), None));
    }
    let beside = args
        .plan
        .as_deref()
        .and_then(Path::parent)
        .map(|d| d.join(plan_hw).display().to_string());
    let mut why = String::new();
    for cand in std::iter::once(plan_hw.to_string()).chain(beside) {
        match Hardware::load(&cand) {
            Ok(hw) => return Ok((Some(hw), None)),
            Err(e) => why = e.to_string(),
        }
    }
    Ok((
        None,
        Some(format!(
            "the plan's `hardware` '{plan_hw}' cannot be read ({why}); give --hardware"
        )),
    ))
}

pub(crate) fn cmd_calibrate(args: CalibrateArgs) -> Result<(), CliError> {
    if !args.runs.is_empty() {
        return super::runs::cmd_calibrate_runs(&args);
    }
    let missing: Vec<&str> = [
        ("--trace FILE...", args.trace.is_empty()),
        ("--plan FILE", args.plan.is_none()),
        ("--out-profile FILE", args.out_profile.is_none()),
    ]
    .into_iter()
    .filter_map(|(f, m)| m.then_some(f))
    .collect();
    let (Some(plan_path), Some(out_profile), false) =
        (&args.plan, &args.out_profile, args.trace.is_empty())
    else {
        return input(format!(
            "calibrate needs {} (a measured run of a plan), or --runs FILE... --fit NAME[,NAME...] (runs files)",
            missing.join(", ")
        ));
    };
    let plan_origin = plan_path.display().to_string();
    let plan = load_plan(plan_path)?;
    let prior = match &args.profile {
        Some(p) => Some((load_profile(p)?, p.display().to_string())),
        None => None,
    };
    let (hw, hw_missing) = hardware(&args, &plan.hardware)?;
    if let (Some(out), Some(why)) = (&args.out_hardware, &hw_missing) {
        return input(format!(
            "--out-hardware {}: there is no hardware profile to fit: {why}",
            out.display()
        ));
    }
    let measured = pplan::measured::load::load(&args.trace, Some(plan.layout_sizes()))
        .map_err(|e| CliError::Input(format!("--trace: {e}")))?;
    if measured.ranks.is_empty() {
        return input(format!(
            "--trace: {}: a training log has no per-stage times; calibrate needs a trace (pplan-exec, PyTorch profiler or Nsight Systems)",
            measured.files.join(", ")
        ));
    }
    let bd = pplan::measured::breakdown::breakdown(&measured, args.skip_steps)
        .map_err(|e| CliError::Input(format!("--trace: {e}")))?;
    let c = calibrate(CalibrateInput {
        plan: &plan,
        plan_origin: &plan_origin,
        measured: &measured,
        breakdown: &bd,
        prior: prior.as_ref().map(|(p, o)| (p, o.as_str())),
        hardware: hw.as_ref(),
    })
    .map_err(|e| CliError::Input(e.to_string()))?;
    write_output(out_profile, "--out-profile", c.profile.to_json().as_bytes())?;
    if let (Some(path), Some(h)) = (&args.out_hardware, &c.hardware) {
        let mut text =
            serde_json::to_string_pretty(h).map_err(|e| CliError::Internal(e.to_string()))?;
        text.push('\n');
        write_output(path, "--out-hardware", text.as_bytes())?;
    }
    let shown = |p: &Path| p.display().to_string();
    match args.format {
        Format::Json => print_json(&Report {
            calibration: &c,
            out_profile: shown(out_profile),
            out_hardware: args.out_hardware.as_deref().map(shown),
        })?,
        Format::Table => print_table(&c, &args, out_profile),
    }
    Ok(())
}

fn print_table(c: &Calibration, args: &CalibrateArgs, out_profile: &Path) {
    let opt = |v: Option<f64>| v.map_or("-".to_string(), |x| format!("{x:.3}"));
    println!(
        "measured: {} steps ({} skipped as warm-up), step time {:.6} s{}",
        c.steps,
        c.steps_skipped,
        c.step_time_measured_s,
        c.step_time_plan_predicted_s
            .map_or(String::new(), |p| format!(" (the plan predicted {p:.6} s)"))
    );
    println!();
    println!(
        "stage device layers   F_meas_ms  F_prior_ms   B_meas_ms  B_prior_ms   I_meas_ms   W_meas_ms"
    );
    for s in &c.stages {
        println!(
            "{:>5} {:>6} {:>6} {:>11.3} {:>11} {:>11.3} {:>11} {:>11} {:>11}",
            s.stage,
            s.device,
            format!("{}+{}", s.first_layer, s.num_layers),
            s.measured_forward_ms,
            opt(s.prior_forward_ms),
            s.measured_backward_ms,
            opt(s.prior_backward_ms),
            opt(s.measured_backward_input_ms),
            opt(s.measured_backward_weight_ms),
        );
    }
    println!();
    if let Some(s) = c.compute_scale {
        println!("compute scale (measured / prior): {s:.4}");
    }
    if let (Some(t), Some(b)) = (c.p2p_measured_s, c.p2p_bytes) {
        println!("pipeline transfer: median {:.3} us for {b} B", t * 1e6);
    }
    if let Some(m) = c.optimizer_measured_s {
        println!(
            "optimizer step: measured {:.3} ms per device, prior {}",
            m * 1e3,
            c.optimizer_prior_s
                .map_or("-".to_string(), |p| format!("{:.3} ms", p * 1e3))
        );
    }
    if !c.hardware_terms.is_empty() {
        println!();
        println!("fitted hardware term                     prior          fitted");
        for t in &c.hardware_terms {
            println!("{:<36} {:>12.6e} {:>15.6e}", t.field, t.prior, t.fitted);
        }
    }
    if !c.hardware_copied.is_empty() {
        println!(
            "copied (not informed by the trace): {}",
            c.hardware_copied.join(", ")
        );
    }
    for n in &c.notes {
        println!("note: {n}");
    }
    println!();
    println!("wrote {}", out_profile.display());
    if let (Some(p), Some(_)) = (&args.out_hardware, &c.hardware) {
        println!("wrote {}", p.display());
    }
}
