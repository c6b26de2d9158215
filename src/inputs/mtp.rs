//! Multi-token prediction (MTP): how many extra prediction depths a model trains (Gloeckle et
//! al. 2024, "Better & Faster Large Language Models via Multi-token Prediction"; the
//! DeepSeek-V3 technical report, arXiv 2412.19437, Sec. 2.2), read from a Hugging Face
//! `config.json` (`num_nextn_predict_layers`, 1 in DeepSeek-V3's) or Megatron-style JSON
//! (`mtp_num_layers`, Megatron-LM's `--mtp-num-layers`). Each depth is one more transformer
//! layer of the model's last-layer kind after the decoder, with its own projection and norms;
//! it shares the embedding and the output layer (`Model::mtp_depth_params`, the costs in
//! `cost::mtp`). Never imports `model` (it returns `moe`'s `FieldError`).

use super::moe::FieldError;
use serde_json::Value;

/// The Hugging Face key (DeepSeek-V3's `config.json`).
pub const HF_KEY: &str = "num_nextn_predict_layers";
/// The Megatron-style key (Megatron-LM's `--mtp-num-layers`).
pub const MEGATRON_KEY: &str = "mtp_num_layers";

/// What a depth count may be.
pub const EXPECTED: &str = "an integer from 0 to the number of transformer layers";

/// The depth count under `key` for a model of `layers` transformer layers: absent, null or 0
/// is none. A negative or fractional count, or more depths than the model has layers (each
/// depth is a whole layer more: a count above that is a typo, not a model), is refused naming
/// the key.
pub fn mtp_layers(v: &Value, key: &str, layers: u32) -> Result<u32, FieldError> {
    let x = match v.get(key) {
        None | Some(Value::Null) => return Ok(0),
        Some(x) => x,
    };
    match x.as_u64() {
        Some(n) if n <= layers as u64 => Ok(n as u32),
        Some(n) => Err(FieldError {
            field: key.to_string(),
            got: format!("{n}, but the model has {layers} layers"),
            expected: EXPECTED,
        }),
        None => Err(FieldError {
            field: key.to_string(),
            got: x.to_string(),
            expected: EXPECTED,
        }),
    }
}

/// Parameters of one depth besides its transformer layer, for hidden size `h`: the projection
/// `eh_proj` of the concatenated hidden state and embedding, `2h x h` without a bias
/// (Megatron-Core `MultiTokenPredictionLayer`, `bias=False`), and three norms (`enorm`,
/// `hnorm` and the depth's final norm) of `h` weights each with RMSNorm, `2h` (weights and
/// biases) with LayerNorm.
pub fn projection_params(h: u64, rms_norm: bool) -> u64 {
    let norm = if rms_norm { h } else { 2 * h };
    2 * h * h + 3 * norm
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_read_and_bounded_by_the_layers() {
        let v: Value = serde_json::json!({"num_nextn_predict_layers": 1, "mtp_num_layers": null});
        assert_eq!(mtp_layers(&v, HF_KEY, 61), Ok(1));
        assert_eq!(mtp_layers(&v, MEGATRON_KEY, 61), Ok(0));
        assert_eq!(mtp_layers(&serde_json::json!({}), HF_KEY, 61), Ok(0));
        for bad in [
            serde_json::json!({"num_nextn_predict_layers": -1}),
            serde_json::json!({"num_nextn_predict_layers": 1.5}),
            serde_json::json!({"num_nextn_predict_layers": "1"}),
            serde_json::json!({"num_nextn_predict_layers": 62}),
        ] {
            let e = mtp_layers(&bad, HF_KEY, 61).unwrap_err();
            assert_eq!((e.field.as_str(), e.expected), (HF_KEY, EXPECTED), "{bad}");
        }
        // DeepSeek-V3: 2 x 7168^2 + 3 x 7168 (RMSNorm).
        assert_eq!(projection_params(7168, true), 102_781_952);
        assert_eq!(projection_params(8, false), 2 * 64 + 3 * 16);
    }
}
