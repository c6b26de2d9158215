//! The CLI's error type and its exit codes: bad input (2) or a failure of pplan itself (1).

/// An error with its exit code.
pub(crate) enum CliError {
    /// Bad input or infeasible request: exit code 2.
    Input(String),
    /// A failure of pplan itself: exit code 1.
    Internal(String),
}

pub(crate) fn input<T>(msg: impl Into<String>) -> Result<T, CliError> {
    Err(CliError::Input(msg.into()))
}

impl From<pplan::plan::flags::FlagError> for CliError {
    fn from(e: pplan::plan::flags::FlagError) -> Self {
        CliError::Input(e.0)
    }
}
