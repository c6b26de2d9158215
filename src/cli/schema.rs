//! `schema_version`: the version of the `--format json` objects' field lists (docs/output.md).
//!
//! Every subcommand's JSON object carries it, appended after its own fields so that the
//! fields before it keep their order and bytes. Fields are added, never renamed (DESIGN.md);
//! the number changes only if one ever had to be renamed or removed.

/// The current version of every subcommand's JSON fields.
pub(crate) const SCHEMA_VERSION: u32 = 1;

/// `text` (one serialised JSON value) with `"schema_version":1` appended when it is an object
/// that does not have the field already (`calibrate --runs` writes its own).
pub(crate) fn with_schema_version(text: String) -> String {
    let is_object = text.starts_with('{') && text.ends_with('}');
    if !is_object || has_top_level_schema_version(&text) {
        return text;
    }
    let body = &text[..text.len() - 1];
    let sep = if body.len() > 1 { "," } else { "" };
    format!("{body}{sep}\"schema_version\":{SCHEMA_VERSION}}}")
}

fn has_top_level_schema_version(text: &str) -> bool {
    text.contains("\"schema_version\"")
        && serde_json::from_str::<serde_json::Value>(text)
            .map(|v| v.get("schema_version").is_some())
            .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::with_schema_version;

    #[test]
    fn appended_once_after_the_fields() {
        assert_eq!(with_schema_version("{}".into()), "{\"schema_version\":1}");
        assert_eq!(
            with_schema_version("{\"a\":1}".into()),
            "{\"a\":1,\"schema_version\":1}"
        );
        let has = "{\"schema_version\":1,\"a\":2}".to_string();
        assert_eq!(with_schema_version(has.clone()), has);
        assert_eq!(with_schema_version("[1]".into()), "[1]");
    }
}
