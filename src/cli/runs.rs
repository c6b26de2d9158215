//! `pplan validate --runs` and `pplan calibrate --runs`: runs files predicted, and hardware
//! parameters fitted to them (`pplan::runs`).

use super::calibrate::args::CalibrateArgs;
use super::common::*;
use super::validate::args::ValidateArgs;
use pplan::runs::file::RunsFile;
use pplan::runs::fit::{self, Param};
use pplan::runs::validate::{self as rv, GroupBy, Loaded, RunResult};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Read every runs file; the first that is not one stops the command.
fn load_files(paths: &[PathBuf]) -> Result<Vec<RunsFile>, CliError> {
    paths
        .iter()
        .map(|p| RunsFile::load(p).map_err(|e| CliError::Input(e.to_string())))
        .collect()
}

/// Each row that could not be read or predicted, on standard error; an error (exit 2) if
/// there is one.
fn report_problems(results: &[RunResult]) -> Result<(), CliError> {
    let problems: Vec<&RunResult> = results.iter().filter(|r| r.problem().is_some()).collect();
    for r in &problems {
        eprintln!(
            "error: runs file '{}': row {}: {}",
            r.file,
            r.id,
            r.problem().unwrap_or("")
        );
    }
    if problems.is_empty() {
        Ok(())
    } else {
        let rest = results.len() - problems.len();
        input(format!(
            "{} of {} rows could not be predicted (each named above){}",
            problems.len(),
            results.len(),
            match rest {
                0 => String::new(),
                1 => "; the other row was".to_string(),
                n => format!("; the other {n} were"),
            }
        ))
    }
}

pub(crate) fn cmd_validate_runs(args: &ValidateArgs) -> Result<(), CliError> {
    if !args.measured.is_empty() {
        return input("--runs and --measured compare different things; give one of them");
    }
    let by: GroupBy = args
        .group_by
        .parse()
        .map_err(|e: String| CliError::Input(format!("--group-by: {e}")))?;
    let files = load_files(&args.runs)?;
    let mut rows = rv::load_rows(&files);
    if let Some(h) = &args.hardware {
        let hw = pplan::inputs::hardware::Hardware::load(h)
            .map_err(|e| CliError::Input(format!("--hardware: {e}")))?;
        for r in &mut rows {
            if let Ok(p) = &mut r.prepared {
                p.hardware = hw.clone();
            }
        }
    }
    let results = rv::predict_rows(&rows);
    if args.against_search {
        return against_search(&files, &rows, results, args.format);
    }
    match args.format {
        Format::Json => print_json(&rv::to_json(&results, by))?,
        Format::Table => print!("{}", rv::markdown(&files, &results, by)),
    }
    report_problems(&results)
}

/// `validate --runs --against-search`: each row's own layout beside an unpinned search's best.
fn against_search(
    files: &[RunsFile],
    rows: &[Loaded],
    results: Vec<RunResult>,
    format: Format,
) -> Result<(), CliError> {
    use pplan::runs::against_search as vs;
    let compared = vs::compare_rows(rows, results);
    match format {
        Format::Json => print_json(&vs::to_json(&compared))?,
        Format::Table => print!("{}", vs::markdown(files, &compared)),
    }
    let problems = vs::problems(&compared);
    for c in &problems {
        if let Err(e) = &c.search {
            eprintln!("error: runs file '{}': row {}: {e}", c.own.file, c.own.id);
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        input(format!(
            "{} of {} rows could not be compared (each named above)",
            problems.len(),
            compared.len()
        ))
    }
}

/// `--cv`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Cv {
    None,
    By(GroupBy),
}

#[derive(Serialize)]
struct ParamJson {
    name: &'static str,
    unit: &'static str,
    prior: f64,
    fitted: f64,
    lo: f64,
    hi: f64,
    meaning: &'static str,
}

#[derive(Serialize)]
struct CalibrateJson {
    schema_version: u32,
    /// Parameter name -> fitted value.
    fitted: BTreeMap<&'static str, f64>,
    params: Vec<ParamJson>,
    count: usize,
    prior_mape: f64,
    fit_mape: f64,
    cv: &'static str,
    cv_mape: Option<f64>,
    groups: Vec<fit::HeldOut>,
    evaluations: usize,
    out_hardware: Option<String>,
}

pub(crate) fn cmd_calibrate_runs(args: &CalibrateArgs) -> Result<(), CliError> {
    if args.fit.is_empty() {
        return input(format!(
            "--runs needs --fit NAME[,NAME...]: the parameters to fit (valid: {})",
            fit::PARAMS
                .iter()
                .map(|p| p.name)
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let mut params: Vec<&'static Param> = Vec::new();
    for name in &args.fit {
        let p = fit::param(name.trim()).map_err(CliError::Input)?;
        if params.contains(&p) {
            return input(format!("--fit: {} is named twice", p.name));
        }
        params.push(p);
    }
    let cv = match args.cv.as_str() {
        "none" => Cv::None,
        "source" => Cv::By(GroupBy::Source),
        "hardware" => Cv::By(GroupBy::Hardware),
        other => {
            return input(format!(
                "--cv: unknown grouping '{other}' (valid: none, source, hardware)"
            ))
        }
    };
    let files = load_files(&args.runs)?;
    let loaded = rv::load_rows(&files);
    let results = rv::predict_rows(&loaded);
    // The rows fitted: predicted at the priors, not excluded, on --hardware's profiles and of
    // --kind's kind.
    let wanted: Option<Vec<&str>> = args
        .hardware
        .as_ref()
        .map(|h| h.split(',').map(str::trim).collect());
    let mut picked: Vec<(&Loaded, &RunResult)> = loaded
        .iter()
        .zip(&results)
        .filter(|(_, r)| r.counted_error().is_some())
        .filter(|(_, r)| {
            wanted
                .as_ref()
                .is_none_or(|w| w.contains(&r.hardware.as_str()))
        })
        .filter(|(_, r)| {
            args.kind
                .as_ref()
                .is_none_or(|k| r.group(GroupBy::Kind) == *k)
        })
        .collect();
    // Every profile --hardware names must have runs: a misspelt name is an error, not a
    // silently smaller fit.
    if let Some(w) = &wanted {
        let mut names: Vec<&str> = results.iter().map(|r| r.hardware.as_str()).collect();
        names.sort();
        names.dedup();
        if let Some(missing) = w.iter().find(|n| !names.contains(n)) {
            return input(format!(
                "--hardware {missing}: no runs on that profile to fit (the runs' profiles: {})",
                names.join(", ")
            ));
        }
    }
    if let Some(k) = &args.kind {
        if picked.is_empty() {
            return input(format!(
                "--kind {k}: no runs of that kind to fit{}",
                args.hardware
                    .as_ref()
                    .map_or(String::new(), |h| format!(" on --hardware {h}"))
            ));
        }
    }
    if picked.is_empty() {
        report_problems(&results)?;
        return input("no runs to fit: every row is excluded");
    }
    let mut profiles: Vec<&str> = picked.iter().map(|(_, r)| r.hardware.as_str()).collect();
    profiles.sort();
    profiles.dedup();
    if args.out_hardware.is_some() && profiles.len() > 1 {
        return input(format!(
            "--out-hardware writes one profile, but the runs fitted are on {} ({}); add --hardware NAME to fit and write one of them",
            profiles.len(),
            profiles.join(", ")
        ));
    }
    picked.sort_by_key(|(_, r)| match cv {
        Cv::By(GroupBy::Hardware) => r.hardware.clone(),
        _ => String::new(),
    });
    let rows: Vec<&pplan::runs::predict::Prepared> = picked
        .iter()
        .filter_map(|(l, _)| l.prepared.as_ref().ok().map(|b| &**b))
        .collect();
    if let Some(p) = params.iter().find(|p| p.is_stack()) {
        if args.out_hardware.is_some() {
            return input(format!(
                "--out-hardware: {} is a stack constant, not a hardware-profile field, so it cannot be written into a profile; give the fitted value to predict as --moe-layer-host-ms, or fit it without --out-hardware",
                p.name
            ));
        }
        if !rows.iter().any(|r| r.takes_moe_layer_host_time()) {
            return input(format!(
                "--fit {}: none of the {} runs fitted takes it (it is the host time of MoE models on --stack megatron-core whose rows do not give --moe-layer-host-ms)",
                p.name,
                rows.len()
            ));
        }
    }
    let base = &rows[0].hardware;
    let start: Vec<f64> = params.iter().map(|p| fit::get(base, p)).collect();
    let prior_errors: Vec<f64> = picked
        .iter()
        .filter_map(|(_, r)| r.counted_error())
        .collect();
    let all = fit::fit(&rows, &params).ok_or_else(|| {
        CliError::Internal("a row predicted at the priors failed during the fit".into())
    })?;
    for ((p, &v), &edge) in params.iter().zip(&all.values).zip(&all.at_edge) {
        if edge {
            return input(format!(
                "--fit {}: the least-squares value {v:.6} is on the edge of its plausible range {}-{} {} ({}); these runs ask for more than this parameter stands for. Fit another parameter with it, or look for what the model lacks",
                p.name, p.lo, p.hi, p.unit, p.meaning
            ));
        }
    }
    let (groups, cv_mape): (Vec<fit::HeldOut>, Option<f64>) = match cv {
        Cv::None => (Vec::new(), None),
        Cv::By(by) => {
            let names: Vec<String> = picked.iter().map(|(_, r)| r.group(by)).collect();
            let (groups, left_out) =
                fit::cross_validate(&rows, &names, &params, &all).ok_or_else(|| {
                    CliError::Internal("a row failed while leaving a group out".into())
                })?;
            let cv = (!left_out.is_empty()).then(|| fit::mape(&left_out));
            (groups, cv)
        }
    };
    let fit_mape = fit::mape(&all.errors);
    let prior_mape = fit::mape(&prior_errors);
    let cv_name = match cv {
        Cv::None => "none",
        Cv::By(by) => by.as_str(),
    };
    if let Some(path) = &args.out_hardware {
        let mut hw = base.clone();
        let command = format!(
            "pplan calibrate --runs {} --fit {}{}",
            args.runs
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(" "),
            params.iter().map(|p| p.name).collect::<Vec<_>>().join(","),
            args.hardware
                .as_ref()
                .map_or(String::new(), |h| format!(" --hardware {h}"))
                + &args
                    .kind
                    .as_ref()
                    .map_or(String::new(), |k| format!(" --kind {k}"))
        );
        for (p, &v) in params.iter().zip(&all.values) {
            fit::set(&mut hw, p, v);
            if !hw.fitted.iter().any(|f| f == p.name) {
                hw.fitted.push(p.name.to_string());
            }
            let mut text = format!(
                "FITTED by `{command}`: {v:.6} {}, {}; least squares over {} runs: mean absolute error {:.2} % at the prior values, {:.2} % fitted",
                p.unit,
                p.meaning,
                rows.len(),
                100.0 * prior_mape,
                100.0 * fit_mape
            );
            if let Some(c) = cv_mape {
                text += &format!("; each {cv_name} left out in turn: {:.2} %", 100.0 * c);
            }
            hw.sources.insert(p.name.to_string(), text);
        }
        let text =
            serde_json::to_string_pretty(&hw).map_err(|e| CliError::Internal(e.to_string()))?;
        write_output(path, "--out-hardware", format!("{text}\n").as_bytes())?;
    }
    match args.format {
        Format::Json => print_json(&CalibrateJson {
            schema_version: 1,
            fitted: params
                .iter()
                .zip(&all.values)
                .map(|(p, &v)| (p.name, v))
                .collect(),
            params: params
                .iter()
                .zip(start.iter().zip(&all.values))
                .map(|(p, (&prior, &fitted))| ParamJson {
                    name: p.name,
                    unit: p.unit,
                    prior,
                    fitted,
                    lo: p.lo,
                    hi: p.hi,
                    meaning: p.meaning,
                })
                .collect(),
            count: rows.len(),
            prior_mape,
            fit_mape,
            cv: cv_name,
            cv_mape,
            groups,
            evaluations: all.evaluations,
            out_hardware: args.out_hardware.as_ref().map(|p| p.display().to_string()),
        })?,
        Format::Table => {
            let mut files: Vec<&str> = picked.iter().map(|(_, r)| r.file.as_str()).collect();
            files.sort();
            files.dedup();
            println!(
                "fitted to {} runs of {} on {}",
                rows.len(),
                files.join(", "),
                profiles.join(", ")
            );
            println!(
                "{:<36} {:>14} {:>14}   plausible range",
                "parameter", "prior", "fitted"
            );
            for (p, (prior, fitted)) in params.iter().zip(start.iter().zip(&all.values)) {
                println!(
                    "{:<36} {:>14.6} {:>14.6}   {}-{} {}",
                    p.name, prior, fitted, p.lo, p.hi, p.unit
                );
            }
            println!(
                "mean absolute error: {:.2} % at the priors, {:.2} % fitted",
                100.0 * prior_mape,
                100.0 * fit_mape
            );
            if cv != Cv::None {
                println!();
                let names: Vec<&str> = params.iter().map(|p| p.name).collect();
                let columns: Vec<String> =
                    names.iter().map(|n| format!("{n} without it")).collect();
                println!(
                    "| {cv_name} left out | runs | error, all fitted | error, left out | {} |",
                    columns.join(" | ")
                );
                println!("|---|---|---|---|{}", "---|".repeat(names.len()));
                for g in &groups {
                    let values: Vec<String> = if g.fitted_without.is_empty() {
                        vec!["– (no other group)".to_string(); names.len()]
                    } else {
                        g.fitted_without.iter().map(|v| format!("{v:.4}")).collect()
                    };
                    println!(
                        "| {} | {} | {:.2} % | {} | {}{} |",
                        g.name,
                        g.count,
                        100.0 * g.fit_mape,
                        g.cv_mape
                            .map_or("–".to_string(), |c| format!("{:.2} %", 100.0 * c)),
                        values.join(" | "),
                        if g.at_edge.is_empty() {
                            String::new()
                        } else {
                            format!(" (on the edge: {})", g.at_edge.join(", "))
                        }
                    );
                }
                match cv_mape {
                    Some(c) => println!(
                        "\nleft-out mean absolute error (each {cv_name} in turn): {:.2} %",
                        100.0 * c
                    ),
                    None => println!("\nno left-out error: the runs are one {cv_name}"),
                }
            }
            if let Some(p) = &args.out_hardware {
                println!("wrote {}", p.display());
            }
        }
    }
    report_problems(&results)
}
