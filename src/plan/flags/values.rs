//! The value parsers and small value types of the `predict` / `search` flags.

use clap::ValueEnum;

/// A flag value that cannot hold, with the flag's name and what would be valid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct FlagError(pub String);

/// A switch given as `on` or `off`.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum OnOff {
    On,
    Off,
}

impl OnOff {
    /// `true` for `on`.
    pub fn is_on(self) -> bool {
        self == OnOff::On
    }
}

/// `--flag -1` becomes `--flag=-1`, so that clap hands a negative number to the flag's value
/// parser (which says what the flag accepts) instead of reporting an unknown argument '-1'.
/// pplan has no positional arguments, so a token `-<digit>…` or `-.<digit>…` after a flag can
/// only be meant as its value.
pub fn join_negative_values(args: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    let mut out: Vec<std::ffi::OsString> = Vec::with_capacity(args.len());
    for arg in args {
        let negative = arg.to_str().is_some_and(|a| {
            let rest = a.strip_prefix('-').unwrap_or("");
            let rest = rest.strip_prefix('.').unwrap_or(rest);
            rest.starts_with(|c: char| c.is_ascii_digit())
        });
        match out.last_mut() {
            Some(prev)
                if negative
                    && prev.to_str().is_some_and(|p| {
                        p.starts_with("--") && p.len() > 2 && !p.contains('=')
                    }) =>
            {
                prev.push("=");
                prev.push(&arg);
            }
            _ => out.push(arg),
        }
    }
    out
}

/// Value parser of a count flag that must be at least 1 (`--gpus`, `--stages`, …): a negative
/// number or a non-integer is refused saying so (0 is left to the subcommand's own check,
/// which says why it cannot be 0).
pub fn positive<T: std::str::FromStr>(text: &str) -> Result<T, String> {
    int_value(text, "a positive integer")
}

/// Value parser of a count flag where 0 is valid (`--skip-steps`).
pub fn count<T: std::str::FromStr>(text: &str) -> Result<T, String> {
    int_value(text, "0 or a positive integer")
}

fn int_value<T: std::str::FromStr>(text: &str, what: &str) -> Result<T, String> {
    let t = text.trim();
    if t.starts_with('-') || t.is_empty() || !t.chars().all(|c| c.is_ascii_digit() || c == '+') {
        return Err(format!("must be {what}, got {text}"));
    }
    t.parse::<T>().map_err(|_| {
        format!(
            "must be {what} that fits in {} bits, got {text}",
            8 * std::mem::size_of::<T>()
        )
    })
}

/// A count flag that also takes `auto` (`--micro-batch`, `--chunks` of `predict`): `auto`
/// asks for the fastest value that fits ([`crate::plan::predict::best_micro_batch_and_chunks`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Auto {
    /// `auto`: the fastest value that fits.
    Auto,
    /// A given value (at least 1).
    Value(u64),
}

impl Auto {
    /// The given value, `None` for `auto`.
    pub fn value(self) -> Option<u64> {
        match self {
            Auto::Auto => None,
            Auto::Value(v) => Some(v),
        }
    }
}

impl std::fmt::Display for Auto {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Auto::Auto => f.write_str("auto"),
            Auto::Value(v) => write!(f, "{v}"),
        }
    }
}

/// Value parser of an [`Auto`] flag: `auto` or a positive integer.
pub fn positive_or_auto(text: &str) -> Result<Auto, String> {
    if text.trim() == "auto" {
        return Ok(Auto::Auto);
    }
    int_value(text, "a positive integer or auto").map(Auto::Value)
}

/// `--attention`.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum AttentionArg {
    Unfused,
    Flash,
}
