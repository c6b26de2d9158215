//! A streaming reader of Chrome trace files: it hands each element of `traceEvents` (or of a
//! bare top-level array) to a callback as its raw bytes, and collects the other top-level
//! fields (`distributedInfo`, `baseTimeNanoseconds`, …) when they are small. Memory is one
//! read buffer plus the largest single event, whatever the file's size; the caller parses each
//! event with `serde_json::from_slice`, which is several times faster than parsing from a
//! reader byte by byte.

use super::timeline::MeasuredError;
use std::io::BufRead;

/// Top-level fields other than `traceEvents` larger than this are skipped, not kept.
const MAX_KEPT_FIELD: usize = 1 << 20;

/// What was found besides the events.
#[derive(Debug, Default)]
pub struct TopLevel {
    /// `(key, raw JSON value)` of the small top-level fields of an object trace.
    pub fields: Vec<(String, Vec<u8>)>,
    /// The file held `{"traceEvents": [...]}` (false: a bare array).
    pub object: bool,
    /// Elements seen in the event array.
    pub events: usize,
}

/// The per-event callback.
type OnEvent<'a> = dyn FnMut(&[u8], usize) -> Result<(), MeasuredError> + 'a;

struct Scanner<'f, R> {
    r: R,
    file: &'f str,
    /// Bytes consumed so far (for messages).
    pos: u64,
}

impl<'f, R: BufRead> Scanner<'f, R> {
    fn err(&self, what: impl std::fmt::Display) -> MeasuredError {
        MeasuredError::new(self.file, format!("byte {}: {what}", self.pos))
    }

    fn io(&self, e: std::io::Error) -> MeasuredError {
        MeasuredError::new(self.file, format!("cannot read at byte {}: {e}", self.pos))
    }

    /// The next byte without consuming it; `None` at the end of the file.
    fn peek(&mut self) -> Result<Option<u8>, MeasuredError> {
        loop {
            match self.r.fill_buf() {
                Ok(b) => return Ok(b.first().copied()),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(self.io(e)),
            }
        }
    }

    fn bump(&mut self) {
        self.r.consume(1);
        self.pos += 1;
    }

    fn skip_ws(&mut self) -> Result<Option<u8>, MeasuredError> {
        loop {
            match self.peek()? {
                Some(b' ' | b'\t' | b'\n' | b'\r') => self.bump(),
                other => return Ok(other),
            }
        }
    }

    fn truncated(&self, inside: &str) -> MeasuredError {
        self.err(format!(
            "the file ends inside {inside}: truncated? (a Chrome trace is one JSON document)"
        ))
    }

    /// Consume one JSON value, appending its bytes to `out` when given. Nesting is tracked with
    /// a counter, not recursion, so a deep document cannot overflow the stack; the value's
    /// grammar is checked by whoever parses the bytes.
    fn value(&mut self, mut out: Option<&mut Vec<u8>>, inside: &str) -> Result<(), MeasuredError> {
        let first = self.skip_ws()?.ok_or_else(|| self.truncated(inside))?;
        let mut depth = 0usize;
        let mut in_str = false;
        let mut escape = false;
        let scalar = !matches!(first, b'{' | b'[' | b'"');
        loop {
            let buf = match self.r.fill_buf() {
                Ok(b) => b,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(self.io(e)),
            };
            if buf.is_empty() {
                if scalar {
                    return Ok(());
                }
                return Err(self.truncated(inside));
            }
            let mut done = None;
            for (i, &c) in buf.iter().enumerate() {
                if scalar {
                    if matches!(c, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r') {
                        done = Some(i);
                        break;
                    }
                    continue;
                }
                if in_str {
                    if escape {
                        escape = false;
                    } else if c == b'\\' {
                        escape = true;
                    } else if c == b'"' {
                        in_str = false;
                        if depth == 0 {
                            done = Some(i + 1);
                            break;
                        }
                    }
                    continue;
                }
                match c {
                    b'"' => in_str = true,
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth = depth.saturating_sub(1);
                        if depth == 0 {
                            done = Some(i + 1);
                            break;
                        }
                    }
                    _ => {}
                }
            }
            let n = done.unwrap_or(buf.len());
            if let Some(o) = out.as_deref_mut() {
                o.extend_from_slice(&buf[..n]);
            }
            self.r.consume(n);
            self.pos += n as u64;
            if done.is_some() {
                return Ok(());
            }
        }
    }

    fn expect(&mut self, want: u8, what: &str) -> Result<(), MeasuredError> {
        match self.skip_ws()? {
            Some(c) if c == want => {
                self.bump();
                Ok(())
            }
            Some(c) => Err(self.err(format!(
                "expected {what}, found '{}'",
                char::from(c).escape_default()
            ))),
            None => Err(self.truncated(what)),
        }
    }

    /// The elements of an array whose `[` is next.
    fn array(&mut self, on_event: &mut OnEvent<'_>) -> Result<usize, MeasuredError> {
        self.expect(b'[', "'[' (the event array)")?;
        let mut buf = Vec::with_capacity(1024);
        let mut n = 0;
        if self.skip_ws()? == Some(b']') {
            self.bump();
            return Ok(0);
        }
        loop {
            buf.clear();
            self.value(Some(&mut buf), "the event array")?;
            on_event(&buf, n)?;
            n += 1;
            match self.skip_ws()? {
                Some(b',') => self.bump(),
                Some(b']') => {
                    self.bump();
                    return Ok(n);
                }
                Some(c) => {
                    return Err(self.err(format!(
                        "expected ',' or ']' after traceEvents[{}], found '{}'",
                        n - 1,
                        char::from(c).escape_default()
                    )))
                }
                None => return Err(self.truncated("the event array")),
            }
        }
    }
}

/// Stream a Chrome trace: `on_event(bytes, index)` for each event.
pub fn stream(
    r: impl BufRead,
    file: &str,
    mut on_event: impl FnMut(&[u8], usize) -> Result<(), MeasuredError>,
) -> Result<TopLevel, MeasuredError> {
    let mut s = Scanner { r, file, pos: 0 };
    // A UTF-8 byte-order mark is allowed; a byte of one alone is the parser's to reject.
    for b in [0xEF, 0xBB, 0xBF] {
        if s.peek()? != Some(b) {
            break;
        }
        s.bump();
    }
    let mut top = TopLevel::default();
    match s.skip_ws()? {
        None => {
            return Err(MeasuredError::new(
                file,
                "empty file: expected a Chrome trace ({\"traceEvents\": [...]})",
            ))
        }
        Some(b'[') => {
            top.events = s.array(&mut on_event)?;
        }
        Some(b'{') => {
            top.object = true;
            s.bump();
            let mut seen_events = false;
            if s.skip_ws()? == Some(b'}') {
                s.bump();
            } else {
                loop {
                    let mut key = Vec::new();
                    if s.skip_ws()? != Some(b'"') {
                        return Err(s.err("expected a field name in the top-level object"));
                    }
                    s.value(Some(&mut key), "a field name")?;
                    let key: String = serde_json::from_slice(&key)
                        .map_err(|e| s.err(format!("bad field name: {e}")))?;
                    s.expect(b':', "':' after a field name")?;
                    if key == "traceEvents" {
                        if s.skip_ws()? != Some(b'[') {
                            return Err(s.err("`traceEvents` must be an array of events"));
                        }
                        top.events = s.array(&mut on_event)?;
                        seen_events = true;
                    } else {
                        let mut v = Vec::new();
                        s.value(Some(&mut v), &format!("field `{key}`"))?;
                        if v.len() <= MAX_KEPT_FIELD {
                            top.fields.push((key, v));
                        }
                    }
                    match s.skip_ws()? {
                        Some(b',') => s.bump(),
                        Some(b'}') => {
                            s.bump();
                            break;
                        }
                        Some(c) => {
                            return Err(s.err(format!(
                                "expected ',' or '}}' in the top-level object, found '{}'",
                                char::from(c).escape_default()
                            )))
                        }
                        None => return Err(s.truncated("the top-level object")),
                    }
                }
            }
            if !seen_events {
                return Err(MeasuredError::new(
                    file,
                    "no `traceEvents` field: not a Chrome trace (expected {\"traceEvents\": [...]})",
                ));
            }
        }
        Some(c) => {
            return Err(MeasuredError::new(
                file,
                format!(
                    "not a Chrome trace: starts with '{}', expected '{{' or '['",
                    char::from(c).escape_default()
                ),
            ))
        }
    }
    if let Some(c) = s.skip_ws()? {
        return Err(s.err(format!(
            "trailing data after the trace ('{}')",
            char::from(c).escape_default()
        )));
    }
    Ok(top)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(text: &str) -> Result<(Vec<String>, TopLevel), MeasuredError> {
        let mut got = Vec::new();
        // A tiny buffer, so that values straddle buffer boundaries.
        let r = std::io::BufReader::with_capacity(3, text.as_bytes());
        let top = stream(r, "t.json", |b, _| {
            got.push(String::from_utf8(b.to_vec()).unwrap());
            Ok(())
        })?;
        Ok((got, top))
    }

    #[test]
    fn splits_events_and_keeps_fields() {
        let (ev, top) = events(
            r#"{"schemaVersion": 1, "traceEvents": [ {"name": "a]}\"", "ts": 1}, {"x": [1, {"y": 2}]} ],
              "distributedInfo": {"rank": 3}, "n": -1.5e3}"#,
        )
        .unwrap();
        assert_eq!(
            ev,
            vec![r#"{"name": "a]}\"", "ts": 1}"#, r#"{"x": [1, {"y": 2}]}"#]
        );
        assert!(top.object);
        assert_eq!(top.events, 2);
        let keys: Vec<&str> = top.fields.iter().map(|f| f.0.as_str()).collect();
        assert_eq!(keys, vec!["schemaVersion", "distributedInfo", "n"]);
        assert_eq!(top.fields[2].1, b"-1.5e3");
        let (ev, top) = events("\u{feff}[{\"a\":1}]").unwrap();
        assert_eq!(ev, vec!["{\"a\":1}"]);
        assert!(!top.object);
    }

    #[test]
    fn refuses_what_is_not_a_trace() {
        for (text, want) in [
            ("", "empty file"),
            ("{\"traceEvents\": [{\"a\": 1}, {\"b\"", "truncated"),
            ("{\"traceEvents\": [{\"a\": 1}", "truncated"),
            ("{\"other\": 1}", "no `traceEvents`"),
            ("{\"traceEvents\": 5}", "must be an array"),
            ("hello", "not a Chrome trace"),
            ("[{\"a\":1}] x", "trailing data"),
            (
                "{\"traceEvents\": [{\"a\":1} {\"b\":2}]}",
                "expected ',' or ']'",
            ),
        ] {
            let e = events(text).unwrap_err();
            assert!(e.to_string().contains(want), "{text:?}: {e}");
            assert!(e.to_string().starts_with("t.json: "), "{e}");
        }
    }
}
