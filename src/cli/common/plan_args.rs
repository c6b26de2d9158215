//! `--plan FILE` as flags: the plan's `pplan predict` flags ([`pplan::plan::flags::plan_args`])
//! with every flag typed on top in place of the plan's value (said on standard error), parsed
//! by predict's own flag parser. `predict --plan` expands its command line this way before it
//! is parsed; `simulate --plan`, `search --gantt` and `report` parse the plan's flags alone.

use super::error::CliError;
use super::load::load_plan_to_predict;
use pplan::plan::flags::{join_negative_values, plan_args, PredictFlags};
use pplan::plan::plan_file::Plan;
use std::ffi::OsString;
use std::path::PathBuf;

/// The flags typed on a command line: each `--flag` with the value after it (or after `=`),
/// `None` for a switch followed by another flag.
fn typed_flags(args: &[OsString]) -> Vec<(String, Option<String>)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let Some(a) = args[i].to_str() else {
            i += 1;
            continue;
        };
        if let Some(rest) = a.strip_prefix("--").filter(|r| !r.is_empty()) {
            match rest.split_once('=') {
                Some((name, value)) => out.push((format!("--{name}"), Some(value.to_string()))),
                None => {
                    let value = args
                        .get(i + 1)
                        .and_then(|v| v.to_str())
                        .filter(|v| !v.starts_with("--"))
                        .map(str::to_string);
                    if value.is_some() {
                        i += 1;
                    }
                    out.push((a.to_string(), value));
                }
            }
        }
        i += 1;
    }
    out
}

/// The plan's flags, less those the typed ones replace, each replacement said on standard
/// error (`pplan: --micro-batch 2 overrides the plan's micro_batch 1`), then the typed ones.
pub(crate) fn merge(plan: &Plan, typed: &[OsString]) -> Vec<OsString> {
    let given = typed_flags(typed);
    let mut out: Vec<OsString> = Vec::new();
    for a in plan_args(plan) {
        let same = given.iter().find(|(f, _)| f == a.flag);
        let other = given
            .iter()
            .find(|(f, _)| a.yields_to.contains(&f.as_str()));
        let plan_value = a.value.clone().unwrap_or_else(|| "on".into());
        let field = a.field.strip_prefix("parallelism.").unwrap_or(a.field);
        match (same, other) {
            (Some((f, v)), _) => eprintln!(
                "pplan: {f}{} overrides the plan's {field} {plan_value}",
                v.as_deref().map(|v| format!(" {v}")).unwrap_or_default()
            ),
            (None, Some((f, v))) => eprintln!(
                "pplan: {f}{} replaces the plan's {field} ({} {plan_value}) too",
                v.as_deref().map(|v| format!(" {v}")).unwrap_or_default(),
                a.flag
            ),
            (None, None) => {
                out.push(a.flag.into());
                if let Some(v) = a.value {
                    out.push(v.into());
                }
            }
        }
    }
    out.extend(typed.iter().cloned());
    out
}

/// `pplan predict ... --plan FILE ...`: the command line with the plan's flags put in front
/// of the typed ones (which replace them), so that clap sees a complete `predict`;
/// `pplan simulate ... --plan FILE`: the plan's schedule as simulate's schedule flags
/// (`--schedule`, `--stages`, `--chunks`, the micro-batch group, and `--microbatches`, which
/// the plan's batch fixes), the costs are the plan's ([`simulate_plan_flags`]). Any other
/// command line is returned as it is. A plan that cannot be read is bad input naming the
/// file and the field.
pub(crate) fn expand_plan(argv: Vec<OsString>) -> Result<Vec<OsString>, CliError> {
    let command = argv.get(1).and_then(|a| a.to_str()).unwrap_or("");
    if argv.len() < 2 || !matches!(command, "predict" | "simulate") {
        return Ok(argv);
    }
    let rest = &argv[2..];
    let Some(path) = plan_path(rest) else {
        return Ok(argv);
    };
    if rest.iter().any(|a| a == "--help" || a == "-h") {
        return Ok(argv);
    }
    let plan = load_plan_to_predict(&path)?;
    let mut out = argv[..2].to_vec();
    if command == "predict" {
        out.extend(merge(&plan, rest));
        return Ok(join_negative_values(out));
    }
    let typed = typed_flags(rest);
    let has = |f: &str| typed.iter().any(|(t, _)| t == f);
    if has("--microbatches") {
        return Err(CliError::Input(format!(
            "--microbatches: with --plan '{}' the micro-batch count is the plan's ({} = global batch / (d x micro-batch)); valid: drop --microbatches, or pplan predict --plan FILE --global-batch B for another batch",
            path.display(),
            plan.schedule.microbatches
        )));
    }
    let s = &plan.schedule;
    let p = &plan.parallelism;
    let mut implied = vec![
        ("--schedule", s.name.clone()),
        ("--stages", p.pp.to_string()),
        ("--chunks", p.chunks.to_string()),
        ("--microbatches", s.microbatches.to_string()),
    ];
    if let Some(g) = s.microbatch_group {
        implied.push((
            "--microbatch-group-size-per-virtual-pipeline-stage",
            g.to_string(),
        ));
    }
    for (flag, value) in implied {
        if !has(flag) {
            out.push(flag.into());
            out.push(value.into());
        }
    }
    out.extend(rest.iter().cloned());
    Ok(join_negative_values(out))
}

/// The value of `--plan` on a command line, if given.
fn plan_path(args: &[OsString]) -> Option<PathBuf> {
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let text = a.to_str()?;
        if text == "--plan" {
            return it.next().map(PathBuf::from);
        }
        if let Some(v) = text.strip_prefix("--plan=") {
            return Some(PathBuf::from(v));
        }
    }
    None
}

#[derive(clap::Parser)]
#[command(
    name = "predict",
    disable_help_flag = true,
    disable_version_flag = true
)]
struct PlanCommand {
    #[command(flatten)]
    flags: PredictFlags,
}

/// `simulate --plan`'s flags that change the plan's costs where they differ from the plan's,
/// as predict's flags: `--hardware`, `--schedule`, `--stages` (as `--pp`), `--chunks` and
/// the micro-batch group.
pub(crate) fn simulate_plan_flags(
    plan: &Plan,
    hardware: Option<&str>,
    schedule: &str,
    stages: Option<u32>,
    chunks: Option<u32>,
    group: Option<u32>,
) -> Vec<OsString> {
    let mut out: Vec<OsString> = Vec::new();
    let mut push = |f: &str, v: String| {
        out.push(f.into());
        out.push(v.into());
    };
    let p = &plan.parallelism;
    if let Some(h) = hardware.filter(|&h| h != plan.hardware) {
        push("--hardware", h.to_string());
    }
    if schedule != plan.schedule.name {
        push("--schedule", schedule.to_string());
    }
    if let Some(s) = stages.filter(|&s| u64::from(s) != p.pp) {
        push("--pp", s.to_string());
    }
    if let Some(v) = chunks.filter(|&v| u64::from(v) != p.chunks) {
        push("--chunks", v.to_string());
    }
    if let Some(g) = group.filter(|&g| Some(g) != plan.schedule.microbatch_group) {
        push(
            "--microbatch-group-size-per-virtual-pipeline-stage",
            g.to_string(),
        );
    }
    out
}

/// The prediction flags of `plan` with `typed` on top (`simulate --plan FILE --hardware H`;
/// empty for the plan as it is), parsed as `pplan predict` parses them. `origin` names the
/// plan in messages.
pub(crate) fn plan_predict_flags(
    plan: &Plan,
    typed: &[OsString],
    origin: &str,
) -> Result<PredictFlags, CliError> {
    use clap::Parser;
    let mut argv: Vec<OsString> = vec!["predict".into()];
    argv.extend(merge(plan, typed));
    PlanCommand::try_parse_from(join_negative_values(argv))
        .map(|c| c.flags)
        .map_err(|e| {
            let text = e.render().to_string();
            let first = text.lines().next().unwrap_or("").trim();
            CliError::Input(format!(
                "--plan '{origin}': {}",
                first.strip_prefix("error: ").unwrap_or(first)
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::typed_flags;

    #[test]
    fn typed_flags_read_values_after_space_or_equals_and_bare_switches() {
        let args: Vec<std::ffi::OsString> = ["--tp", "8", "--shared-gpu", "--pp=4", "--zero1"]
            .iter()
            .map(Into::into)
            .collect();
        assert_eq!(
            typed_flags(&args),
            vec![
                ("--tp".to_string(), Some("8".to_string())),
                ("--shared-gpu".to_string(), None),
                ("--pp".to_string(), Some("4".to_string())),
                ("--zero1".to_string(), None),
            ]
        );
    }
}
