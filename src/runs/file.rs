//! The runs file (DESIGN.md, "Runs files"): published or measured training runs, each with
//! the `pplan predict` flags it ran with and the figure it reached. Parsing and checking
//! only: a file that is not a runs file is an error naming the file; a bad row is kept in
//! its place as [`Entry::Bad`] naming the row and the field, so the other rows can still be
//! predicted.

use super::metric::{FlopConvention, Metric};
use serde_json::{Map, Value};

/// A model or hardware profile as a row gives it.
#[derive(Debug, Clone, PartialEq)]
pub enum Spec {
    /// A bundled name, or a path relative to the runs file's folder.
    Named(String),
    /// The config or profile itself (a Hugging Face `config.json`, a Megatron-style object,
    /// or a hardware profile).
    Inline(Value),
}

impl Spec {
    /// How tables show it: the name or path, or `inline`.
    pub fn label(&self) -> String {
        match self {
            Spec::Named(n) => n.clone(),
            Spec::Inline(v) => v
                .get("name")
                .or_else(|| v.get("model_type"))
                .and_then(Value::as_str)
                .map_or_else(|| "inline".to_string(), str::to_string),
        }
    }
}

/// The measured figures of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct Measured {
    /// The figure compared: the first of `tokens_per_s_per_gpu`, `step_time_s`,
    /// `model_tflops_per_gpu` that the row gives.
    pub metric: Metric,
    pub value: f64,
    /// `peak_memory_gb`, when given.
    pub peak_memory_gb: Option<f64>,
    /// Every key of `measured` as given (the others are information).
    pub all: Map<String, Value>,
}

/// One run.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub id: String,
    pub model: Spec,
    pub hardware: Spec,
    pub gpus: u64,
    pub global_batch: u64,
    pub seq_len: u64,
    /// `pplan predict` flags, exactly as typed.
    pub args: Vec<String>,
    pub measured: Measured,
    /// The citation (any JSON object).
    pub source: Value,
    /// Why the run is left out of the errors, if it is.
    pub exclude: Option<String>,
    pub notes: Option<String>,
}

/// A row as read: checked, or the reason it cannot be used.
#[derive(Debug, Clone, PartialEq)]
pub enum Entry {
    Ok(Box<Row>),
    /// `id` is the row's `id` or `#N` (its 1-based position) when it has none.
    Bad {
        id: String,
        error: String,
    },
}

impl Entry {
    pub fn id(&self) -> &str {
        match self {
            Entry::Ok(r) => &r.id,
            Entry::Bad { id, .. } => id,
        }
    }
}

/// A runs file as read.
#[derive(Debug, Clone, PartialEq)]
pub struct RunsFile {
    /// The file as the user named it.
    pub origin: String,
    /// The group its runs belong to: the file's name without `.json`.
    pub group: String,
    pub description: String,
    pub entries: Vec<Entry>,
}

/// Why a file is not a runs file.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum RunsFileError {
    #[error("runs file '{path}': cannot read it: {reason}")]
    Read { path: String, reason: String },
    #[error("runs file '{path}': not JSON: {reason}")]
    NotJson { path: String, reason: String },
    #[error("runs file '{path}': {what} (a runs file is one JSON object with `description` and `runs`, a list of rows: DESIGN.md, \"Runs files\")")]
    Shape { path: String, what: String },
}

/// The keys a row may have.
pub const ROW_KEYS: [&str; 11] = [
    "id",
    "model",
    "hardware",
    "gpus",
    "global_batch",
    "seq_len",
    "args",
    "measured",
    "source",
    "exclude",
    "notes",
];

impl RunsFile {
    /// Read and check the file at `path`.
    pub fn load(path: &std::path::Path) -> Result<RunsFile, RunsFileError> {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| RunsFileError::Read {
            path: origin.clone(),
            reason: e.to_string(),
        })?;
        RunsFile::parse(&text, &origin)
    }

    /// Every `*.json` file directly in `dir` (e.g. `data/runs/`), in name order.
    pub fn load_dir(dir: &std::path::Path) -> Result<Vec<RunsFile>, RunsFileError> {
        let read = |e: std::io::Error| RunsFileError::Read {
            path: dir.display().to_string(),
            reason: e.to_string(),
        };
        let mut paths = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(read)? {
            let path = entry.map_err(read)?.path();
            if path.extension().is_some_and(|x| x == "json") {
                paths.push(path);
            }
        }
        paths.sort();
        paths.iter().map(|p| RunsFile::load(p)).collect()
    }

    /// Parse a runs file's text; `origin` names it in errors and gives the group.
    pub fn parse(text: &str, origin: &str) -> Result<RunsFile, RunsFileError> {
        let text =
            crate::inputs::json_strict::prepare(text).map_err(|what| RunsFileError::Shape {
                path: origin.to_string(),
                what,
            })?;
        let v: Value = serde_json::from_str(text).map_err(|e| RunsFileError::NotJson {
            path: origin.to_string(),
            reason: e.to_string(),
        })?;
        let shape = |what: &str| RunsFileError::Shape {
            path: origin.to_string(),
            what: what.to_string(),
        };
        let obj = v
            .as_object()
            .ok_or_else(|| shape("the top level is not an object"))?;
        let runs = match obj.get("runs") {
            None => return Err(shape("no `runs` list")),
            Some(Value::Array(a)) => a,
            Some(_) => return Err(shape("`runs` is not a list")),
        };
        if runs.is_empty() {
            return Err(shape("`runs` is empty"));
        }
        let description = match obj.get("description") {
            None => String::new(),
            Some(Value::String(s)) => s.clone(),
            Some(_) => return Err(shape("`description` is not a string")),
        };
        let mut entries: Vec<Entry> = runs
            .iter()
            .enumerate()
            .map(|(i, r)| parse_row(r, i))
            .collect();
        // A repeated id would make the rows' results ambiguous: the later ones are refused.
        let mut seen = std::collections::BTreeSet::new();
        for e in &mut entries {
            if let Entry::Ok(r) = e {
                if !seen.insert(r.id.clone()) {
                    *e = Entry::Bad {
                        id: r.id.clone(),
                        error: format!(
                            "id: '{}' is used by an earlier row; ids must be unique within a file",
                            r.id
                        ),
                    };
                }
            }
        }
        let group = std::path::Path::new(origin)
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| origin.to_string());
        Ok(RunsFile {
            origin: origin.to_string(),
            group,
            description,
            entries,
        })
    }
}

fn parse_row(v: &Value, index: usize) -> Entry {
    let fallback = format!("#{}", index + 1);
    let id = v
        .get("id")
        .and_then(Value::as_str)
        .filter(|s| !s.trim().is_empty())
        .map_or(fallback, str::to_string);
    match check_row(v, &id) {
        Ok(row) => Entry::Ok(Box::new(row)),
        Err(error) => Entry::Bad { id, error },
    }
}

fn check_row(v: &Value, id: &str) -> Result<Row, String> {
    let obj = v
        .as_object()
        .ok_or_else(|| "the row is not an object".to_string())?;
    if let Some(k) = obj.keys().find(|k| !ROW_KEYS.contains(&k.as_str())) {
        return Err(format!(
            "{k}: not a row field (valid: {})",
            ROW_KEYS.join(", ")
        ));
    }
    match obj.get("id") {
        Some(Value::String(s)) if !s.trim().is_empty() => {}
        Some(_) => return Err("id: must be a non-empty string".into()),
        None => return Err("id: missing (a name for the run, unique in the file)".into()),
    }
    let spec = |key: &str, what: &str| -> Result<Spec, String> {
        match obj.get(key) {
            Some(Value::String(s)) if !s.trim().is_empty() => Ok(Spec::Named(s.clone())),
            Some(Value::Object(_)) => Ok(Spec::Inline(obj[key].clone())),
            Some(_) => Err(format!(
                "{key}: must be a bundled name, a path relative to the runs file, or the {what} itself as an object"
            )),
            None => Err(format!("{key}: missing ({what})")),
        }
    };
    let model = spec("model", "a model config")?;
    let hardware = spec("hardware", "a hardware profile")?;
    let count = |key: &str| -> Result<u64, String> {
        match obj.get(key) {
            None => Err(format!("{key}: missing (a positive integer)")),
            Some(x) => x
                .as_u64()
                .filter(|&n| n >= 1)
                .ok_or_else(|| format!("{key}: must be a positive integer, got {x}")),
        }
    };
    let gpus = count("gpus")?;
    let global_batch = count("global_batch")?;
    let seq_len = count("seq_len")?;
    let args = match obj.get("args") {
        None => Vec::new(),
        Some(Value::Array(a)) => a
            .iter()
            .enumerate()
            .map(|(i, x)| {
                x.as_str().map(str::to_string).ok_or_else(|| {
                    format!("args[{i}]: must be a string (flags exactly as typed), got {x}")
                })
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err("args: must be a list of strings (pplan predict flags)".into()),
    };
    let measured = check_measured(obj.get("measured"))?;
    let source = match obj.get("source") {
        Some(s @ Value::Object(_)) => s.clone(),
        Some(s @ Value::String(_)) => s.clone(),
        Some(_) => {
            return Err(
                "source: must be an object or a string (where the figure was published)".into(),
            )
        }
        None => return Err("source: missing (where the figure was published or measured)".into()),
    };
    let text = |key: &str| -> Result<Option<String>, String> {
        match obj.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(format!("{key}: must be a string")),
        }
    };
    let exclude = text("exclude")?;
    if exclude.as_deref().is_some_and(|s| s.trim().is_empty()) {
        return Err("exclude: give the reason the run is left out".into());
    }
    Ok(Row {
        id: id.to_string(),
        model,
        hardware,
        gpus,
        global_batch,
        seq_len,
        args,
        measured,
        source,
        exclude,
        notes: text("notes")?,
    })
}

fn check_measured(v: Option<&Value>) -> Result<Measured, String> {
    let obj = match v {
        Some(Value::Object(o)) => o,
        Some(_) => return Err("measured: must be an object".into()),
        None => {
            return Err(
                "measured: missing (tokens_per_s_per_gpu, step_time_s or model_tflops_per_gpu)"
                    .into(),
            )
        }
    };
    let positive = |key: &str| -> Result<Option<f64>, String> {
        match obj.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(x) => match x.as_f64() {
                Some(f) if f.is_finite() && f > 0.0 => Ok(Some(f)),
                _ => Err(format!(
                    "measured.{key}: must be a finite number greater than 0, got {x}"
                )),
            },
        }
    };
    let tokens = positive("tokens_per_s_per_gpu")?;
    let step = positive("step_time_s")?;
    let tflops = positive("model_tflops_per_gpu")?;
    let peak_memory_gb = positive("peak_memory_gb")?;
    let (metric, value) = if let Some(t) = tokens {
        (Metric::TokensPerSPerGpu, t)
    } else if let Some(s) = step {
        (Metric::StepTimeS, s)
    } else if let Some(f) = tflops {
        let convention = match obj.get("flop_convention") {
            Some(Value::String(c)) => c
                .parse::<FlopConvention>()
                .map_err(|e| format!("measured.flop_convention: {e}"))?,
            Some(x) => {
                return Err(format!(
                    "measured.flop_convention: must be one of {}, got {x}",
                    FlopConvention::NAMES.join(", ")
                ))
            }
            None => {
                return Err(format!(
                    "measured.flop_convention: missing; model_tflops_per_gpu needs the FLOP count it was computed with (valid: {})",
                    FlopConvention::NAMES.join(", ")
                ))
            }
        };
        (Metric::ModelTflopsPerGpu(convention), f)
    } else {
        return Err(
            "measured: no figure to compare (give tokens_per_s_per_gpu, step_time_s, or model_tflops_per_gpu with flop_convention)"
                .into(),
        );
    };
    Ok(Measured {
        metric,
        value,
        peak_memory_gb,
        all: obj.clone(),
    })
}
