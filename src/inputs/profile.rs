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
        let text = super::json_strict::prepare(text).map_err(err)?;
        let p: LayerProfile = serde_json::from_str(text).map_err(|e| {
            let e = crate::inputs::json_path::describe(text, &e);
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

/// A profile lined up with a model of `num_layers` transformer layers (see
/// [`LayerProfile::for_model`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModelProfile<'a> {
    /// The input embedding, when the profile has `num_layers + 2` entries.
    pub embedding: Option<&'a ProfiledLayer>,
    /// One entry per transformer layer: profile layer i is model layer i.
    pub layers: &'a [ProfiledLayer],
    /// The output layer (and loss), when the profile has `num_layers + 2` entries.
    pub output: Option<&'a ProfiledLayer>,
}

/// Sums over a run of profiled layers.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LayerSum {
    pub forward_ms: f64,
    pub backward_input_ms: f64,
    pub backward_weight_ms: f64,
    pub weight_bytes: u64,
    pub activation_bytes: u64,
    /// `output_bytes` of the last layer of the run (what goes to the next stage); 0 if empty.
    pub output_bytes: u64,
}

/// Sum the layers' times and bytes (`backward_split_ms` for I and W).
pub fn sum_layers(layers: &[ProfiledLayer]) -> LayerSum {
    let mut s = LayerSum::default();
    for l in layers {
        let (i, w) = l.backward_split_ms();
        s.forward_ms += l.forward_ms;
        s.backward_input_ms += i;
        s.backward_weight_ms += w;
        s.weight_bytes = s.weight_bytes.saturating_add(l.weight_bytes);
        s.activation_bytes = s.activation_bytes.saturating_add(l.activation_bytes);
    }
    s.output_bytes = layers.last().map_or(0, |l| l.output_bytes);
    s
}

/// Layers per stage for an even split of `layers` over `stages` (the first `layers % stages`
/// stages get one more), the split `pplan predict` assumes.
pub fn even_split(layers: u32, stages: u32) -> Vec<u32> {
    (0..stages)
        .map(|s| layers / stages + u32::from(s < layers % stages))
        .collect()
}

/// First layer of each stage for `stages` stages over `layers` layers, split evenly (the first
/// `layers % stages` stages get one more, as [`even_split`]).
pub fn even_boundaries(layers: u32, stages: u32) -> Vec<u32> {
    let mut first = 0;
    even_split(layers, stages)
        .into_iter()
        .map(|n| {
            let f = first;
            first += n;
            f
        })
        .collect()
}

/// Check first-layer indices of stages: `stages` entries, starting at 0, strictly increasing,
/// each below `layers`.
pub fn check_boundaries(b: &[u32], layers: u32, stages: u32) -> Result<(), String> {
    if b.len() != stages as usize {
        return Err(format!(
            "{} boundaries given for {stages} stages; give one first-layer index per stage, e.g. {}",
            b.len(),
            list(&even_boundaries(layers, stages))
        ));
    }
    if b.first() != Some(&0) {
        return Err("the first stage must start at layer 0".to_string());
    }
    for (i, w) in b.windows(2).enumerate() {
        if w[1] <= w[0] {
            return Err(format!(
                "entry {} ({}) is not after entry {i} ({}): boundaries must increase (every stage holds a layer)",
                i + 1,
                w[1],
                w[0]
            ));
        }
    }
    if let Some(&last) = b.last() {
        if last >= layers {
            return Err(format!(
                "the last stage starts at layer {last}, but the profile has {layers} layers (0 to {})",
                layers.saturating_sub(1)
            ));
        }
    }
    Ok(())
}

fn list(v: &[u32]) -> String {
    v.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
}

impl LayerProfile {
    /// Line the profile up with a model of `num_layers` transformer layers: exactly
    /// `num_layers` entries (the transformer layers; embedding and output layer come from
    /// elsewhere) or `num_layers + 2` (the embedding first, the output layer last).
    pub fn for_model(&self, num_layers: u32) -> Result<ModelProfile<'_>, String> {
        let n = self.layers.len();
        let l = num_layers as usize;
        if n == l {
            Ok(ModelProfile {
                embedding: None,
                layers: &self.layers,
                output: None,
            })
        } else if n == l + 2 {
            Ok(ModelProfile {
                embedding: Some(&self.layers[0]),
                layers: &self.layers[1..n - 1],
                output: Some(&self.layers[n - 1]),
            })
        } else {
            Err(format!(
                "the profile has {n} layers but the model has {l} transformer layers; valid: {l} entries (one per transformer layer) or {} (the embedding, the {l} layers, the output layer)",
                l + 2
            ))
        }
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

    #[test]
    fn lines_up_with_a_model_and_checks_boundaries() {
        let layer = |name: &str, f: f64| ProfiledLayer {
            name: name.into(),
            forward_ms: f,
            backward_ms: 2.0 * f,
            backward_input_ms: None,
            backward_weight_ms: None,
            weight_bytes: 10,
            activation_bytes: 100,
            output_bytes: 7,
        };
        let p = LayerProfile {
            source: None,
            micro_batch: None,
            layers: vec![
                layer("emb", 0.5),
                layer("l0", 1.0),
                layer("l1", 2.0),
                layer("out", 3.0),
            ],
        };
        let m = p.for_model(2).unwrap();
        assert_eq!(m.embedding.unwrap().name, "emb");
        assert_eq!(m.output.unwrap().name, "out");
        assert_eq!(m.layers.len(), 2);
        assert_eq!(p.for_model(4).unwrap().layers.len(), 4);
        let e = p.for_model(3).unwrap_err();
        assert!(
            e.contains("4 layers") && e.contains("3 transformer layers") && e.contains("5"),
            "{e}"
        );
        let s = sum_layers(m.layers);
        assert_eq!(
            (s.forward_ms, s.backward_input_ms, s.backward_weight_ms),
            (3.0, 3.0, 3.0)
        );
        assert_eq!(
            (s.weight_bytes, s.activation_bytes, s.output_bytes),
            (20, 200, 7)
        );

        assert_eq!(even_boundaries(10, 3), vec![0, 4, 7]);
        assert!(check_boundaries(&[0, 4, 7], 10, 3).is_ok());
        assert!(check_boundaries(&[0, 4], 10, 3)
            .unwrap_err()
            .contains("0,4,7"));
        assert!(check_boundaries(&[1, 4, 7], 10, 3)
            .unwrap_err()
            .contains("layer 0"));
        assert!(check_boundaries(&[0, 4, 4], 10, 3)
            .unwrap_err()
            .contains("increase"));
        assert!(check_boundaries(&[0, 4, 10], 10, 3)
            .unwrap_err()
            .contains("10 layers"));
    }
}
