//! The progress line on standard error for long searches.

/// A progress line with an estimate of the time left, on standard error only: drawn in place
/// when standard error is a terminal (after the first second, so quick commands stay quiet),
/// or, with `--progress`, from the start (as plain lines at most once a second when standard
/// error is not a terminal). It reads the clock, and nothing it does reaches standard output
/// or a file, so outputs stay byte-identical with or without it.
pub(crate) struct Progress {
    label: &'static str,
    forced: bool,
    terminal: bool,
    started: std::time::Instant,
    /// When the line was last drawn, and whether anything was drawn.
    state: std::sync::Mutex<(Option<std::time::Instant>, bool)>,
    /// Set by the first [`Progress::finish`] or [`Progress::end`]; later calls do nothing.
    ended: std::sync::atomic::AtomicBool,
}

impl Progress {
    pub(crate) fn new(label: &'static str, forced: bool) -> Progress {
        use std::io::IsTerminal;
        Progress {
            label,
            forced,
            terminal: std::io::stderr().is_terminal(),
            started: std::time::Instant::now(),
            state: std::sync::Mutex::new((None, false)),
            ended: std::sync::atomic::AtomicBool::new(false),
        }
    }

    fn line(&self, done: u64, total: u64) -> String {
        let elapsed_s = self.started.elapsed().as_secs_f64();
        let pct = if total == 0 {
            100.0
        } else {
            100.0 * done as f64 / total as f64
        };
        let eta = if done == 0 {
            "ETA unknown".to_string()
        } else {
            let left_s = elapsed_s * (total.saturating_sub(done)) as f64 / done as f64;
            format!("ETA {left_s:.0} s")
        };
        format!(
            "{}: {done}/{total} ({pct:.0}%), {elapsed_s:.0} s elapsed, {eta}",
            self.label
        )
    }

    /// `done` of `total` units finished.
    pub(crate) fn update(&self, done: u64, total: u64) {
        if !(self.forced || self.terminal) {
            return;
        }
        let now = std::time::Instant::now();
        if !self.forced && now.duration_since(self.started).as_secs_f64() < 1.0 {
            return;
        }
        let Ok(mut state) = self.state.lock() else {
            return;
        };
        let every_s = if self.terminal { 0.1 } else { 1.0 };
        if state
            .0
            .is_some_and(|t| now.duration_since(t).as_secs_f64() < every_s)
            && done < total
        {
            return;
        }
        state.0 = Some(now);
        state.1 = true;
        if self.terminal {
            eprint!("\r\x1b[2K{}", self.line(done, total));
        } else {
            eprintln!("{}", self.line(done, total));
        }
    }

    /// Phase `k` of `n` begins (1-based), for commands without finer progress points (the
    /// simulator reports none): the phase's name and the time so far, never a guessed time
    /// left. On a terminal it replaces the line in place (cleared by [`Progress::finish`]);
    /// with `--progress` elsewhere it is a line of its own.
    pub(crate) fn phase(&self, k: u64, n: u64, what: &str) {
        if !(self.forced || self.terminal) {
            return;
        }
        let Ok(mut state) = self.state.lock() else {
            return;
        };
        state.0 = Some(std::time::Instant::now());
        state.1 = true;
        let line = format!(
            "{}: phase {k}/{n}: {what} ({:.1} s elapsed)",
            self.label,
            self.started.elapsed().as_secs_f64()
        );
        if self.terminal {
            eprint!("\r\x1b[2K{line}");
        } else {
            eprintln!("{line}");
        }
    }

    /// [`Progress::finish`] after success; after a failure only clear the terminal's line, so
    /// that the error message starts a line of its own and no "done" is claimed.
    pub(crate) fn end(&self, ok: bool) {
        if ok {
            self.finish();
        } else if !self.ended.swap(true, std::sync::atomic::Ordering::Relaxed)
            && self.terminal
            && self.state.lock().map(|s| s.1).unwrap_or(false)
        {
            eprint!("\r\x1b[2K");
        }
    }

    /// Clear the line (terminal) or write the last one (`--progress` to a file or pipe).
    pub(crate) fn finish(&self) {
        if self.ended.swap(true, std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        let drawn = self.state.lock().map(|s| s.1).unwrap_or(false);
        if self.terminal && drawn {
            eprint!("\r\x1b[2K");
        } else if self.forced && !self.terminal {
            eprintln!(
                "{}: done in {:.1} s",
                self.label,
                self.started.elapsed().as_secs_f64()
            );
        }
    }
}
