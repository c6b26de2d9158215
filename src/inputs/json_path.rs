//! The field a JSON error is about, as a path (`gpu.peak_flops_per_s`, `layers[2].forward_ms`,
//! `parallelism.tp`).
//!
//! serde_json's type errors ("invalid type: string \"x\", expected f64 at line 21 column 23")
//! give a position but not the field, and the crate that tracks paths during deserialization
//! is not a dependency. The position is enough: serde_json reports a type error at the last
//! character of the offending value, a missing field at the `}` of the object that lacks it and
//! an unknown field at its key, so walking the text up to that position and keeping the stack
//! of keys and array indices names the field. The walk is a small tokenizer, not a parser: it
//! stops at the position, never allocates more than the nesting depth, and gives up (returns
//! `None`) on anything it does not understand, so a message only gains a path, never loses its
//! position. No IO.

/// One level of nesting on the way to the position.
enum Frame {
    /// Inside an object: the key of the member being read (`None` before its key).
    Object(Option<String>),
    /// Inside an array: the index of the element being read, `None` before the first one.
    Array(Option<usize>),
}

/// Deeper than this the walk gives up (serde_json's own recursion limit is 128).
const MAX_DEPTH: usize = 512;

fn render(frames: &[Frame]) -> String {
    let mut out = String::new();
    for f in frames {
        match f {
            Frame::Object(Some(k)) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
            }
            Frame::Array(Some(i)) => out.push_str(&format!("[{i}]")),
            Frame::Object(None) | Frame::Array(None) => {}
        }
    }
    out
}

/// The byte offset of serde_json's 1-based `line` and `column` (the column counts bytes).
fn offset_of(text: &str, line: usize, column: usize) -> Option<usize> {
    if line == 0 || column == 0 {
        return None;
    }
    let mut start = 0usize;
    for _ in 1..line {
        start += text[start..].find('\n')? + 1;
    }
    let off = start + column - 1;
    (off < text.len()).then_some(off)
}

/// The path of the value (or object key, or container end) that covers byte `off` of `text`;
/// `Some("")` for the top-level value.
pub fn path_at_offset(text: &str, off: usize) -> Option<String> {
    let bytes = text.as_bytes();
    // An array or object of the wrong type is reported at the character before it (serde_json
    // has peeked at its bracket, not consumed it): the value is the next one.
    let mut off = off;
    while off < bytes.len() && matches!(bytes[off], b' ' | b'\t' | b'\n' | b'\r' | b':' | b',') {
        off += 1;
    }
    let mut frames: Vec<Frame> = Vec::new();
    let mut i = 0usize;
    // Entering a value in an array starts its next element.
    let start_value = |frames: &mut Vec<Frame>| {
        if let Some(Frame::Array(idx)) = frames.last_mut() {
            *idx = Some(idx.map_or(0, |n| n + 1));
        }
    };
    while i < bytes.len() && i <= off {
        let c = bytes[i];
        match c {
            b' ' | b'\t' | b'\n' | b'\r' | b':' => i += 1,
            b',' => {
                if let Some(Frame::Object(key)) = frames.last_mut() {
                    *key = None;
                }
                i += 1;
            }
            b'{' | b'[' => {
                start_value(&mut frames);
                if i == off {
                    return Some(render(&frames));
                }
                if frames.len() >= MAX_DEPTH {
                    return None;
                }
                frames.push(if c == b'{' {
                    Frame::Object(None)
                } else {
                    Frame::Array(None)
                });
                i += 1;
            }
            b'}' | b']' => {
                frames.pop()?;
                if i == off {
                    return Some(render(&frames));
                }
                i += 1;
            }
            b'"' => {
                // A string: find its closing quote, skipping escapes.
                let mut j = i + 1;
                while j < bytes.len() && bytes[j] != b'"' {
                    j += if bytes[j] == b'\\' { 2 } else { 1 };
                }
                let end = j.min(bytes.len().saturating_sub(1));
                let is_key = matches!(frames.last(), Some(Frame::Object(None)));
                if is_key {
                    let key = text.get(i + 1..j.min(text.len()))?.to_string();
                    if let Some(Frame::Object(k)) = frames.last_mut() {
                        *k = Some(key);
                    }
                } else {
                    start_value(&mut frames);
                }
                if off <= end {
                    return Some(render(&frames));
                }
                i = j + 1;
            }
            _ => {
                // A number, true, false or null: up to the next delimiter.
                start_value(&mut frames);
                let mut j = i;
                while j < bytes.len()
                    && !matches!(
                        bytes[j],
                        b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r' | b':'
                    )
                {
                    j += 1;
                }
                if off < j.max(i + 1) {
                    return Some(render(&frames));
                }
                i = j.max(i + 1);
            }
        }
    }
    None
}

/// The path of the field a serde_json error from parsing `text` is about, when the error is
/// about the data (a wrong type or value, a missing or unknown field) and has a position:
/// e.g. `layers[2].forward_ms`. A missing field's path ends with the missing key.
pub fn error_path(text: &str, e: &serde_json::Error) -> Option<String> {
    if e.classify() != serde_json::error::Category::Data {
        return None;
    }
    let off = offset_of(text, e.line(), e.column())?;
    let path = path_at_offset(text, off)?;
    let msg = e.to_string();
    let missing = msg
        .strip_prefix("missing field `")
        .and_then(|r| r.split('`').next());
    Some(match missing {
        Some(field) if path.is_empty() => field.to_string(),
        Some(field) => format!("{path}.{field}"),
        None => path,
    })
}

/// `e` with the field named in front: "field `gpu.peak_flops_per_s`: invalid type: …" (or
/// `e` alone when no field can be named).
pub fn describe(text: &str, e: &serde_json::Error) -> String {
    match error_path(text, e) {
        Some(p) if !p.is_empty() => format!("field `{p}`: {e}"),
        _ => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Layer {
        name: String,
        forward_ms: f64,
    }
    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Doc {
        gpu: Gpu,
        layers: Vec<Layer>,
    }
    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Gpu {
        peak_flops_per_s: f64,
        count: u32,
    }

    /// The message for `text` parsed as a `Doc`.
    fn check(text: &str, expected_path: &str) {
        let e = serde_json::from_str::<Doc>(text).unwrap_err();
        assert_eq!(
            error_path(text, &e).as_deref(),
            Some(expected_path),
            "{e} in {text}"
        );
        let d = describe(text, &e);
        assert!(d.starts_with(&format!("field `{expected_path}`: ")), "{d}");
        assert!(d.contains(" at line "), "the position stays: {d}");
    }

    #[test]
    fn type_errors_missing_and_unknown_fields_name_the_path() {
        let ok_layers = r#"[{"name": "a", "forward_ms": 1}]"#;
        check(
            &format!(
                r#"{{"gpu": {{"peak_flops_per_s": "lots", "count": 1}}, "layers": {ok_layers}}}"#
            ),
            "gpu.peak_flops_per_s",
        );
        check(
            "{\n  \"gpu\": {\"peak_flops_per_s\": 1e15, \"count\": -1},\n  \"layers\": []\n}",
            "gpu.count",
        );
        check(
            r#"{"gpu": {"peak_flops_per_s": 1, "count": 1}, "layers": [{"name": "a", "forward_ms": 1}, {"name": "b, \"c\"", "forward_ms": 2}, {"name": "c", "forward_ms": [1]}]}"#,
            "layers[2].forward_ms",
        );
        check(
            r#"{"gpu": {"peak_flops_per_s": 1, "count": 1}, "layers": [{"name": "a", "forward_ms": 1}, {"name": "b"}]}"#,
            "layers[1].forward_ms",
        );
        check(
            r#"{"gpu": {"peak_flops_per_s": 1, "count": 1, "colour": "green"}, "layers": []}"#,
            "gpu.colour",
        );
        check(r#"{"layers": []}"#, "gpu");
        check(
            r#"{"gpu": {"peak_flops_per_s": 1, "count": 1}, "layers": {"a": 1}}"#,
            "layers",
        );
        check(
            r#"{"gpu": {"peak_flops_per_s": 1, "count": 1}, "layers": [{"name": 7, "forward_ms": 1}]}"#,
            "layers[0].name",
        );
    }

    #[test]
    fn syntax_errors_and_garbage_keep_the_plain_message() {
        for text in [
            "{",
            "{\"gpu\": }",
            "[1, 2",
            "\"",
            "}}}",
            "",
            "[[[[[[[[[[",
            "{\"a\\",
        ] {
            let e = serde_json::from_str::<Doc>(text).unwrap_err();
            if e.classify() != serde_json::error::Category::Data {
                assert_eq!(describe(text, &e), e.to_string());
            }
            for off in 0..text.len() + 2 {
                let _ = path_at_offset(text, off);
            }
        }
    }
}
