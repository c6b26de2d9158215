//! What a prediction is made from: model descriptions (bundled presets, Hugging Face and
//! Megatron-style JSON), hardware profiles and measured or computed layer profiles; their
//! parsing and checks.
//!
//! Imports nothing else of the crate.

pub mod arch;
pub mod dense_presets;
pub mod families;
pub mod hardware;
pub mod hardware_check;
pub mod hf_text;
pub mod json_path;
pub mod json_strict;
pub mod model;
pub mod moe;
pub mod moe_presets;
pub mod mtp;
pub mod profile;

pub use hardware::Hardware;
pub use model::Model;
pub use profile::LayerProfile;
