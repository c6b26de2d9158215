//! `pplan search --format csv` read back with an RFC 4180 reader and compared, cell by cell,
//! with `--format json` of the same search: every column is a JSON result field (its unit in
//! brackets in the header) and every row a ranked result, in rank order.

mod common;
use common::{json, pplan};

/// RFC 4180: fields split on commas, quoted fields may hold commas, quotes (doubled) and
/// line breaks; records end with CRLF.
fn parse_csv(text: &str) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    let (mut row, mut field) = (Vec::new(), String::new());
    let mut chars = text.chars().peekable();
    let mut quoted = false;
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                chars.next();
                field.push('"');
            }
            (true, '"') => quoted = false,
            (true, c) => field.push(c),
            (false, '"') => quoted = true,
            (false, ',') => row.push(std::mem::take(&mut field)),
            (false, '\r') => assert_eq!(chars.next(), Some('\n'), "CR without LF"),
            (false, '\n') => panic!("a record must end with CRLF"),
            (false, c) => field.push(c),
        }
        if !quoted && c == '\r' {
            row.push(std::mem::take(&mut field));
            rows.push(std::mem::take(&mut row));
        }
    }
    assert!(
        row.is_empty() && field.is_empty(),
        "text after the last CRLF"
    );
    rows
}

const SEARCH: &[&str] = &[
    "search",
    "--gpus",
    "64",
    "--model",
    "gpt-1.7b",
    "--global-batch",
    "64",
    "--top",
    "5",
    "--tokens",
    "1T",
    "--gpu-hour-price",
    "2",
];

#[test]
fn csv_rows_are_the_json_results() {
    let (code, csv, err) = pplan(&[SEARCH, &["--format", "csv"]].concat());
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = pplan(&[SEARCH, &["--format", "json"]].concat());
    assert_eq!(code, 0, "{err}");
    let results = json(&out)["results"].as_array().unwrap().clone();
    let rows = parse_csv(&csv);
    let header = &rows[0];
    assert_eq!(rows.len() - 1, results.len(), "a row per result");
    assert_eq!(header[0], "rank");
    for (row, result) in rows[1..].iter().zip(&results) {
        assert_eq!(row.len(), header.len());
        for (name, cell) in header.iter().zip(row) {
            // "step_time_s [s]" is JSON's step_time_s, in seconds.
            let field = name.split(" [").next().unwrap();
            let expected = match field {
                "headroom_gb" => {
                    let limit = result["memory_limit_bytes"].as_f64().unwrap();
                    let peak = result["peak_memory_bytes"].as_f64().unwrap();
                    let gb: f64 = cell.parse().unwrap();
                    assert!((gb - (limit - peak) / 1e9).abs() < 1e-3, "{cell}");
                    continue;
                }
                "stage_layers" => {
                    let l: Vec<String> = result[field]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|x| x.to_string())
                        .collect();
                    l.join(",")
                }
                _ => match &result[field] {
                    serde_json::Value::String(s) => s.clone(),
                    serde_json::Value::Null => panic!("column {name} is no JSON result field"),
                    v => v.to_string(),
                },
            };
            if let (Ok(a), Ok(b)) = (cell.parse::<f64>(), expected.parse::<f64>()) {
                assert!(
                    (a - b).abs() <= 1e-12 * b.abs().max(1.0),
                    "{name}: {a} vs {b}"
                );
            } else {
                assert_eq!(cell, &expected, "column {name}");
            }
        }
    }
}

#[test]
fn quoting_follows_rfc_4180() {
    let rows = parse_csv("a,\"b,c\",\"say \"\"hi\"\"\"\r\n1,\"x\r\ny\",3\r\n");
    assert_eq!(rows[0], ["a", "b,c", "say \"hi\""]);
    assert_eq!(rows[1], ["1", "x\r\ny", "3"]);
}
