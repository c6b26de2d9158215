//! Layer profiles (`--profile FILE`): measured or computed per-layer costs for any network.
//!
//! ```json
//! {"layers": [{"name": "layer0", "forward_ms": 1.2, "backward_ms": 2.4,
//!              "backward_input_ms": 1.2, "backward_weight_ms": 1.2,
//!              "weight_bytes": 1000, "activation_bytes": 2000, "output_bytes": 500}]}
//! ```
//!
//! `forward_ms`, `backward_ms`, `weight_bytes`, `activation_bytes` and `output_bytes` are the
//! DESIGN.md contract. `backward_input_ms` and `backward_weight_ms` are optional (zero-bubble
//! schedules need them; when absent the backward splits in half, as the ZB paper's uniform
//! profile assumes); when given they must sum to `backward_ms` within 1%. `output_bytes` is
//! what the layer sends to the next stage per micro-batch. `activation_bytes` is what one
//! micro-batch keeps alive between its forward and backward. Optional top-level fields:
//! `source` (free text: who measured it, how) and `micro_batch` (the micro-batch size the
//! layer times are for). No IO here.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LayerProfile {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub micro_batch: Option<u64>,
    pub layers: Vec<ProfiledLayer>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfiledLayer {
    pub name: String,
    pub forward_ms: f64,
    pub backward_ms: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backward_input_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backward_weight_ms: Option<f64>,
    pub weight_bytes: u64,
    pub activation_bytes: u64,
    pub output_bytes: u64,
}

impl ProfiledLayer {
    /// (backward for inputs, backward for weights) in ms.
    pub fn backward_split_ms(&self) -> (f64, f64) {
        match (self.backward_input_ms, self.backward_weight_ms) {
            (Some(i), Some(w)) => (i, w),
            _ => (self.backward_ms / 2.0, self.backward_ms / 2.0),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{origin}: {reason}")]
pub struct ProfileError {
    pub origin: String,
    pub reason: String,
}

impl LayerProfile {
    /// Parse and check; `origin` (the path) prefixes every message, which names the field.
    pub fn from_json(text: &str, origin: &str) -> Result<LayerProfile, ProfileError> {
        let err = |reason: String| ProfileError {
            origin: origin.to_string(),
            reason,
        };
        let p: LayerProfile = serde_json::from_str(text).map_err(|e| {
            err(format!(
                "not a layer profile ({e}); expected {{\"layers\": [{{\"name\", \"forward_ms\", \"backward_ms\", \"weight_bytes\", \"activation_bytes\", \"output_bytes\"}}]}}"
            ))
        })?;
        if p.layers.is_empty() {
            return Err(err(
                "`layers` is empty; a profile needs at least one layer".into()
            ));
        }
        for (i, l) in p.layers.iter().enumerate() {
            let times = [
                ("forward_ms", Some(l.forward_ms)),
                ("backward_ms", Some(l.backward_ms)),
                ("backward_input_ms", l.backward_input_ms),
                ("backward_weight_ms", l.backward_weight_ms),
            ];
            for (name, v) in times {
                if let Some(v) = v {
                    if !v.is_finite() || !(0.0..=1e9).contains(&v) {
                        return Err(err(format!(
                            "layers[{i}].{name} is {v}; valid: a finite number of milliseconds in [0, 1e9]"
                        )));
                    }
                }
            }
            match (l.backward_input_ms, l.backward_weight_ms) {
                (Some(a), Some(b)) => {
                    if (a + b - l.backward_ms).abs() > 0.01 * l.backward_ms.max(1e-9) {
                        return Err(err(format!(
                            "layers[{i}]: backward_input_ms + backward_weight_ms = {} but backward_ms is {}; they must agree within 1%",
                            a + b,
                            l.backward_ms
                        )));
                    }
                }
                (None, None) => {}
                _ => {
                    return Err(err(format!(
                    "layers[{i}]: give both backward_input_ms and backward_weight_ms, or neither"
                )))
                }
            }
        }
        Ok(p)
    }

    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).expect("a profile always serializes");
        s.push('\n');
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_names_bad_fields() {
        let ok = r#"{"layers":[{"name":"l0","forward_ms":1,"backward_ms":2,"weight_bytes":1,"activation_bytes":2,"output_bytes":3}]}"#;
        let p = LayerProfile::from_json(ok, "p.json").unwrap();
        assert_eq!(p.layers[0].backward_split_ms(), (1.0, 1.0));
        let bad = ok.replace("\"forward_ms\":1", "\"forward_ms\":-1");
        let e = LayerProfile::from_json(&bad, "p.json")
            .unwrap_err()
            .to_string();
        assert!(e.contains("layers[0].forward_ms"), "{e}");
        let bad = ok.replace(
            "\"backward_ms\":2",
            "\"backward_ms\":2,\"backward_input_ms\":0.5,\"backward_weight_ms\":0.5",
        );
        let e = LayerProfile::from_json(&bad, "p.json")
            .unwrap_err()
            .to_string();
        assert!(e.contains("must agree"), "{e}");
        let e = LayerProfile::from_json("{\"layers\":[]}", "p.json")
            .unwrap_err()
            .to_string();
        assert!(e.contains("empty"), "{e}");
    }
}
