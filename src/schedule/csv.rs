//! Schedule files in the format of PyTorch's `_dump_csv(format="compute_only")`.
//!
//! One row per device (row r = rank r), comma-separated action strings, an empty field is an
//! idle slot and is ignored, no header, LF or CRLF line ends. A UTF-8 byte-order mark (as
//! spreadsheet programs write) is skipped, and a field may be quoted as RFC 4180 allows
//! (`"0F1"`, `""` for a quote inside quotes). PyTorch writes CRLF (Python's
//! `csv.writer` default, `_dump_csv` opens the file with `newline=""`) and writes each idle
//! slot (`None`) as an empty field. [`write()`] writes LF; [`write_torch`] writes CRLF, byte for
//! byte what `_dump_csv(format="compute_only")` writes for the same order without idle slots.
//! Both read back to the same schedule given the placement (stage→device mapping), which the
//! file does not record: `Placement::Loop` (PyTorch's default "loop" style) or `Placement::V`
//! (its "v" style, used by ScheduleZBVZeroBubble and ScheduleDualPipeV).
//!
//! Lowered files (`format="compute_comms"`) are read too: their SEND/RECV/UNSHARD/RESHARD/
//! REDUCE_GRAD and WAIT_* actions are dropped, because the simulator derives communication from
//! the stage graph. DualPipeV's compound `(0F3;3B1)OVERLAP_F_B` puts its sub-actions in the
//! device list in order and is recorded in [`Schedule::compounds`], so that the simulator starts
//! them together as PyTorch does; both writers write it back as the same compound token.

use crate::schedule::ir::{ActionParseError, Compound, Placement, Schedule, Token, WeightUpdate};
use std::fmt::Write as _;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CsvError {
    #[error("row {row} (device {}), field {field}: {source}", row - 1)]
    Action {
        /// 1-based row (device = row - 1).
        row: usize,
        /// 1-based field within the row.
        field: usize,
        source: ActionParseError,
    },
    #[error("the file has no rows: a schedule needs one row per pipeline device")]
    Empty,
    #[error("the file is not UTF-8 text (byte {offset})")]
    NotText { offset: usize },
    #[error("the file has no compute actions (F, B, I, W)")]
    NoActions,
    /// RFC 4180 quoting broken: an unterminated quoted field, or a quote inside an unquoted one.
    #[error("row {row} (device {}), field {field}: {reason}", row - 1)]
    Quote {
        row: usize,
        field: usize,
        reason: &'static str,
    },
}

/// Split text into rows of fields as RFC 4180 reads it: fields separated by commas, rows by LF
/// or CRLF, a field in double quotes may hold commas, line breaks and `""` (one quote).
fn records(body: &str) -> Result<Vec<Vec<String>>, CsvError> {
    let mut rows = vec![Vec::new()];
    let mut field = String::new();
    let mut chars = body.chars().peekable();
    // Whether the current field began with a quote and is still inside it.
    let (mut quoted, mut in_quotes) = (false, false);
    let at = |rows: &Vec<Vec<String>>| (rows.len(), rows.last().map_or(0, Vec::len) + 1);
    while let Some(c) = chars.next() {
        if in_quotes {
            match c {
                '"' if chars.peek() == Some(&'"') => {
                    chars.next();
                    field.push('"');
                }
                '"' => in_quotes = false,
                c => field.push(c),
            }
            continue;
        }
        match c {
            '"' if field.is_empty() && !quoted => (quoted, in_quotes) = (true, true),
            '"' => {
                let (row, field) = at(&rows);
                let reason = if quoted {
                    "text after a closing quote (RFC 4180: a quoted field ends at its quote)"
                } else {
                    "a double quote inside an unquoted field (RFC 4180: quote the whole field)"
                };
                return Err(CsvError::Quote { row, field, reason });
            }
            ',' | '\n' => {
                let row = rows.last_mut().expect("rows is never empty");
                row.push(std::mem::take(&mut field));
                quoted = false;
                if c == '\n' {
                    rows.push(Vec::new());
                }
            }
            '\r' if chars.peek() == Some(&'\n') => {}
            // Blanks after a closing quote are dropped; anything else is an error.
            c if quoted && c.is_whitespace() => {}
            _ if quoted => {
                let (row, field) = at(&rows);
                return Err(CsvError::Quote {
                    row,
                    field,
                    reason:
                        "text after a closing quote (RFC 4180: a quoted field ends at its quote)",
                });
            }
            c => field.push(c),
        }
    }
    if in_quotes {
        let (row, field) = at(&rows);
        return Err(CsvError::Quote {
            row,
            field,
            reason: "a quoted field is not closed before the end of the file",
        });
    }
    rows.last_mut().expect("rows is never empty").push(field);
    Ok(rows)
}

/// Parse schedule text. `placement` decides which device holds which stage; the number of
/// stages and micro-batches is read off the largest indices. The result is *not* validated:
/// call [`crate::schedule::validate::validate`] (the simulator does).
pub fn parse(text: &str, placement: Placement) -> Result<Schedule, CsvError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let body = text
        .strip_suffix("\r\n")
        .or_else(|| text.strip_suffix('\n'))
        .unwrap_or(text);
    if body.trim().is_empty() {
        return Err(CsvError::Empty);
    }
    let mut devices = Vec::new();
    let mut max_stage = None::<u32>;
    let mut max_mb = None::<u32>;
    let mut compounds = Vec::new();
    for (r, line) in records(body)?.iter().enumerate() {
        let mut actions = Vec::new();
        for (f, field) in line.iter().enumerate() {
            if field.trim().is_empty() {
                continue;
            }
            let token = field.parse::<Token>().map_err(|source| CsvError::Action {
                row: r + 1,
                field: f + 1,
                source,
            })?;
            match token {
                Token::Compute(a) => actions.push(a),
                Token::Overlap(subs) => {
                    if subs.len() > 1 {
                        compounds.push(Compound {
                            device: r as u32,
                            first: actions.len() as u32,
                            len: subs.len() as u32,
                        });
                    }
                    actions.extend(subs)
                }
                Token::Comm { .. } => {}
            }
        }
        for a in &actions {
            max_stage = max_stage.max(Some(a.stage));
            max_mb = max_mb.max(Some(a.microbatch));
        }
        devices.push(actions);
    }
    let (Some(max_stage), Some(max_mb)) = (max_stage, max_mb) else {
        return Err(CsvError::NoActions);
    };
    let p = devices.len() as u64;
    // Round the stage count up to a whole number of chunks per device; the validator reports
    // the missing stages if the file does not hold them.
    let stages = (max_stage as u64 + 1).div_ceil(p) * p;
    let m = max_mb as u64 + 1;
    Ok(Schedule {
        devices,
        num_stages: stages.min(u32::MAX as u64) as u32,
        num_microbatches: m as u32,
        placement,
        weight_update: WeightUpdate::Flush,
        microbatches_per_step: m as u32,
        compounds,
    })
}

/// Parse raw bytes (from a file), rejecting non-UTF-8 input with its offset.
pub fn parse_bytes(bytes: &[u8], placement: Placement) -> Result<Schedule, CsvError> {
    let text = std::str::from_utf8(bytes).map_err(|e| CsvError::NotText {
        offset: e.valid_up_to(),
    })?;
    parse(text, placement)
}

/// Write a schedule: one row per device, actions joined by commas, LF line ends. A compound is
/// written as PyTorch writes it, `(0F3;3B1)OVERLAP_F_B`, in one field.
pub fn write(schedule: &Schedule) -> String {
    let mut out = String::with_capacity(schedule.num_actions() * 5);
    let lens = schedule.start_lengths();
    for (d, list) in schedule.devices.iter().enumerate() {
        let mut i = 0;
        while i < list.len() {
            if i > 0 {
                out.push(',');
            }
            let n = lens.len_at(d, i).min(list.len() - i);
            if n > 1 {
                out.push('(');
                for (j, a) in list[i..i + n].iter().enumerate() {
                    if j > 0 {
                        out.push(';');
                    }
                    let _ = write!(out, "{a}");
                }
                out.push_str(")OVERLAP_F_B");
            } else {
                let _ = write!(out, "{}", list[i]);
            }
            i += n.max(1);
        }
        out.push('\n');
    }
    out
}

/// Write a schedule as PyTorch's `_dump_csv` does: one row per rank, CRLF line ends.
pub fn write_torch(schedule: &Schedule) -> String {
    write(schedule).replace('\n', "\r\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::generators::one_f_one_b;

    #[test]
    fn round_trip_1f1b() {
        let s = one_f_one_b(4, 8);
        let text = write(&s);
        assert!(text.starts_with("0F0,0F1,0F2,0F3,0B0,"), "{text}");
        assert_eq!(parse(&text, Placement::Loop).unwrap(), s);
    }

    #[test]
    fn byte_order_mark_and_rfc4180_quotes() {
        let plain = parse("0F0,0B0\n1F0,1B0\n", Placement::Loop).unwrap();
        for text in [
            "\u{feff}0F0,0B0\r\n1F0,1B0\r\n",
            "\"0F0\",\"0B0\"\n1F0,\"1B0\"\n",
            "\u{feff}\"0F0\",,0B0\r\n\"1F0\" ,1B0",
        ] {
            assert_eq!(parse(text, Placement::Loop).unwrap(), plain, "{text:?}");
        }
        for (text, row, field) in [
            ("0F0,\"0B0\n", 1, 2),
            ("0F0,0\"B0\n", 1, 2),
            ("0F0\n\"1F0\"x\n", 2, 1),
        ] {
            match parse(text, Placement::Loop) {
                Err(CsvError::Quote {
                    row: r, field: f, ..
                }) => {
                    assert_eq!((r, f), (row, field), "{text:?}")
                }
                other => panic!("{text:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn crlf_empty_fields_and_comm_actions() {
        let text = "0F0,,0SEND_F0,0RECV_B0,0B0\r\n,1RECV_F0,1F0,1B0,1SEND_B0\r\n";
        let s = parse(text, Placement::Loop).unwrap();
        assert_eq!(s.devices.len(), 2);
        assert_eq!(write(&s), "0F0,0B0\n1F0,1B0\n");
    }

    #[test]
    fn compounds_are_recorded_and_written_back() {
        let text = "0F0,(0F1;3B0)OVERLAP_F_B,0I0,0SEND_F1,0WAIT_SEND_F1,0REDUCE_GRAD,0WAIT_REDUCE_GRAD\r\n";
        let s = parse(text, Placement::V).unwrap();
        assert_eq!(
            s.compounds,
            vec![Compound {
                device: 0,
                first: 1,
                len: 2
            }]
        );
        assert_eq!(s.devices[0].len(), 4);
        assert_eq!(write(&s), "0F0,(0F1;3B0)OVERLAP_F_B,0I0\n");
        assert_eq!(parse(&write_torch(&s), Placement::V).unwrap(), s);
    }

    #[test]
    fn errors_name_row_and_field() {
        let err = parse("0F0,0B0\n1F0,1X0\n", Placement::Loop).unwrap_err();
        let msg = err.to_string();
        assert!(msg.starts_with("row 2 (device 1), field 2:"), "{msg}");
        assert!(msg.contains("unknown action kind 'X'"), "{msg}");
        let err = parse("0F99999999999,0B0\n", Placement::Loop).unwrap_err();
        assert!(
            err.to_string().contains("not a valid non-negative integer"),
            "{err}"
        );
        let err = parse("0F\n", Placement::Loop).unwrap_err();
        assert!(
            err.to_string().contains("needs a micro-batch number"),
            "{err}"
        );
    }
}
