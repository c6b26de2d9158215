//! Nsight Systems SQLite exports (`nsys export --type sqlite`). (Being written.)

use super::timeline::{MeasuredError, RankTrace};
use std::path::Path;

/// Read an export: one [`RankTrace`] per GPU device (or per process, when the export holds
/// several processes on one device).
pub fn read(path: &Path, file: &str) -> Result<Vec<RankTrace>, MeasuredError> {
    let _ = path;
    Err(MeasuredError::new(
        file,
        "Nsight Systems exports are not read yet",
    ))
}
