//! A row made ready to predict: its flags parsed exactly as `pplan predict` parses them
//! ([`PredictFlags`]), its model, hardware profile and layer profile read (names bundled,
//! paths relative to the runs file), and the prediction beside the measured figure.

use super::file::{Row, Spec};
use crate::inputs::hardware::Hardware;
use crate::inputs::model::Model;
use crate::inputs::profile::LayerProfile;
use crate::plan::flags::{join_negative_values, PredictFlags};
use crate::plan::predict::Prediction;
use std::path::Path;

/// The flags a row gives as fields, not in `args`.
const ROW_FIELD_FLAGS: [(&str, &str); 5] = [
    ("--model", "model"),
    ("--hardware", "hardware"),
    ("--gpus", "gpus"),
    ("--global-batch", "global_batch"),
    ("--seq-len", "seq_len"),
];

#[derive(clap::Parser)]
#[command(
    name = "predict",
    disable_help_flag = true,
    disable_version_flag = true
)]
struct RowCommand {
    #[command(flatten)]
    flags: PredictFlags,
}

/// A row with everything its prediction needs.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub row: Row,
    pub flags: PredictFlags,
    /// The row's model at its sequence length, the vocabulary padded as its flags say.
    pub model: Model,
    /// The row's hardware profile.
    pub hardware: Hardware,
    pub profile: Option<LayerProfile>,
}

/// A row predicted.
#[derive(Debug, Clone)]
pub struct RowPrediction {
    pub prediction: Prediction,
    /// The prediction's value of the row's metric.
    pub predicted: f64,
    /// Predicted over measured throughput minus 1.
    pub error: f64,
}

/// The flags `row` gives `pplan predict`: its fields as `--model`, `--hardware`, `--gpus`,
/// `--global-batch` and `--seq-len`, then its `args`, checked by the same parser.
pub fn row_flags(row: &Row) -> Result<PredictFlags, String> {
    for a in &row.args {
        let flag = a.split('=').next().unwrap_or(a);
        if let Some((_, field)) = ROW_FIELD_FLAGS.iter().find(|(f, _)| *f == flag) {
            return Err(format!(
                "args: {flag} is the row's `{field}` field; give it there, not in args"
            ));
        }
        if flag == "--help" || flag == "-h" {
            return Err(format!("args: {flag} is not a prediction flag"));
        }
    }
    let mut argv: Vec<std::ffi::OsString> = vec!["predict".into()];
    for (flag, value) in [
        ("--model", row.model.label()),
        ("--hardware", row.hardware.label()),
        ("--gpus", row.gpus.to_string()),
        ("--global-batch", row.global_batch.to_string()),
        ("--seq-len", row.seq_len.to_string()),
    ] {
        argv.push(flag.into());
        argv.push(value.into());
    }
    argv.extend(row.args.iter().map(Into::into));
    use clap::Parser;
    RowCommand::try_parse_from(join_negative_values(argv))
        .map(|c| c.flags)
        .map_err(|e| {
            let text = e.render().to_string();
            let first = text.lines().next().unwrap_or("").trim();
            format!("args: {}", first.strip_prefix("error: ").unwrap_or(first))
        })
}

/// Read what `row` names, relative to `base` (the runs file's folder), and parse its flags.
pub fn prepare(row: &Row, base: &Path) -> Result<Prepared, String> {
    let flags = row_flags(row)?;
    // A bundled name as it is; anything that looks like a path, relative to the runs file.
    let resolve = |name: &str| {
        if name.contains('/') || name.ends_with(".json") {
            base.join(name).display().to_string()
        } else {
            name.to_string()
        }
    };
    let tidy = |e: String, flag: &str| e.strip_prefix(flag).unwrap_or(&e).to_string();
    let mut model = match &row.model {
        Spec::Named(n) => Model::load(&resolve(n))
            .map_err(|e| format!("model: {}", tidy(e.to_string(), "--model: ")))?,
        Spec::Inline(v) => {
            let mut m = Model::from_json(
                &v.to_string(),
                &format!("the inline model of row {}", row.id),
            )
            .map_err(|e| format!("model: {}", tidy(e.to_string(), "--model: ")))?;
            m.name = row.model.label();
            if m.name == "inline" {
                m.name = format!("{} model", row.id);
            }
            m
        }
    };
    model.seq_len = row.seq_len;
    model.check().map_err(|e| {
        format!(
            "seq_len {}: {}",
            row.seq_len,
            tidy(e.to_string(), "--model: ")
        )
    })?;
    flags
        .apply_to_model(&mut model)
        .map_err(|e| format!("args: {e}"))?;
    let hardware = match &row.hardware {
        Spec::Named(n) => Hardware::load(&resolve(n))
            .map_err(|e| format!("hardware: {}", tidy(e.to_string(), "--hardware: ")))?,
        Spec::Inline(v) => Hardware::from_json(&v.to_string(), &format!("{} hardware", row.id))
            .map_err(|e| format!("hardware: {e}"))?,
    };
    let profile = match &flags.profile {
        None => None,
        Some(p) => {
            let path = base.join(p);
            let origin = path.display().to_string();
            let text = std::fs::read_to_string(&path)
                .map_err(|e| format!("args: --profile '{origin}': cannot read it: {e}"))?;
            Some(
                LayerProfile::from_json(&text, &origin)
                    .map_err(|e| format!("args: --profile: {e}"))?,
            )
        }
    };
    Ok(Prepared {
        row: row.clone(),
        flags,
        model,
        hardware,
        profile,
    })
}

impl Prepared {
    /// Predict the row on its own hardware profile.
    pub fn predict(&self) -> Result<RowPrediction, String> {
        self.predict_on(&self.hardware)
    }

    /// Whether the row takes Megatron-Core's default host time for a MoE layer: a MoE model on
    /// `--stack megatron-core` without `--moe-layer-host-ms` (what `calibrate --runs --fit
    /// stack.moe_layer_host_s` sets).
    pub fn takes_moe_layer_host_time(&self) -> bool {
        self.model.moe.is_some()
            && self.flags.stack.moe_layer_host_ms.is_none()
            && self.flags.stack.preset.stack().moe_layer_host_s > 0.0
    }

    /// Predict the row on `hw` (its profile with fitted values, when calibrating).
    pub fn predict_on(&self, hw: &Hardware) -> Result<RowPrediction, String> {
        self.predict_with(hw, &self.flags)
    }

    /// Predict the row on `hw` with `flags` in place of its own (its flags with a fitted
    /// stack constant, when calibrating).
    pub fn predict_with(
        &self,
        hw: &Hardware,
        flags: &PredictFlags,
    ) -> Result<RowPrediction, String> {
        let req = flags
            .request(&self.model, hw, self.profile.as_ref())
            .map_err(|e| format!("args: {e}"))?;
        let prediction = flags.predict(&req).map_err(|e| e.to_string())?;
        let metric = self.row.measured.metric;
        let predicted = metric.predicted(&prediction, &req);
        if !(predicted.is_finite() && predicted > 0.0) {
            return Err(format!(
                "internal: the predicted {} is {predicted}",
                metric.key()
            ));
        }
        Ok(RowPrediction {
            error: metric.error(predicted, self.row.measured.value),
            predicted,
            prediction,
        })
    }
}
