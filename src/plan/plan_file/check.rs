//! [`Plan::from_json`]'s checks: everything a consumer of a plan relies on.

use super::*;

impl Plan {
    pub(super) fn check(&self, origin: &str) -> Result<(), PlanError> {
        // A bundled profile by name, or a path (the reader does no IO, so a path is taken as
        // given); anything else would flow unchecked into every emitted file.
        let hw = self.hardware.as_str();
        let looks_like_path = hw.contains('/') || hw.ends_with(".json");
        if !looks_like_path && !valid_names().contains(&hw) {
            return Err(field(
                origin,
                "hardware",
                format!(
                    "unknown hardware profile '{hw}'; valid: {}, or a path to a JSON profile",
                    valid_names().join(", ")
                ),
            ));
        }
        let m = &self.model;
        if let Err(got) = megatron_rms_norm(m.normalization.as_deref()) {
            return Err(field(
                origin,
                "model.normalization",
                format!("'{got}' is not a normalisation pplan knows (valid: LayerNorm, RMSNorm)"),
            ));
        }
        if let Err(got) = megatron_rotary(m.position_embedding_type.as_deref()) {
            return Err(field(
                origin,
                "model.position_embedding_type",
                format!("'{got}' is not a position embedding pplan knows (valid: learned_absolute, rope, mrope, yarn, relative, none)"),
            ));
        }
        for (name, v) in [
            ("model.num_layers", m.num_layers as u64),
            ("model.hidden_size", m.hidden_size),
            ("model.num_attention_heads", m.num_attention_heads),
            ("model.num_query_groups", m.num_query_groups),
            ("model.ffn_hidden_size", m.ffn_hidden_size),
            ("model.seq_length", m.seq_length),
            ("model.vocab_size", m.vocab_size),
        ] {
            if v == 0 {
                return Err(field(origin, name, "must be at least 1"));
            }
        }
        if m.hidden_size % m.num_attention_heads != 0 {
            return Err(field(
                origin,
                "model.hidden_size",
                format!(
                    "{} is not divisible by model.num_attention_heads {}",
                    m.hidden_size, m.num_attention_heads
                ),
            ));
        }
        if m.num_attention_heads % m.num_query_groups != 0 {
            return Err(field(
                origin,
                "model.num_query_groups",
                format!(
                    "{} does not divide model.num_attention_heads {}",
                    m.num_query_groups, m.num_attention_heads
                ),
            ));
        }
        let par = &self.parallelism;
        for (name, v) in [
            ("parallelism.gpus", par.gpus),
            ("parallelism.tp", par.tp),
            ("parallelism.pp", par.pp),
            ("parallelism.dp", par.dp),
            ("parallelism.micro_batch", par.micro_batch),
            ("parallelism.global_batch", par.global_batch),
            ("parallelism.chunks", par.chunks),
            ("parallelism.cp", par.cp),
        ] {
            if v == 0 {
                return Err(field(origin, name, "must be at least 1"));
            }
        }
        if (par.tp as u128) * (par.cp as u128) * (par.pp as u128) * (par.dp as u128)
            != par.gpus as u128
        {
            return Err(field(
                origin,
                "parallelism.gpus",
                format!(
                    "{} != tp x cp x pp x dp = {} x {} x {} x {}",
                    par.gpus, par.tp, par.cp, par.pp, par.dp
                ),
            ));
        }
        if par.zero > 3 || (par.zero >= 2 && !par.zero1) {
            return Err(field(
                origin,
                "parallelism.zero",
                format!(
                    "{} (valid: 2 or 3 with zero1 true; 0 and 1 are written as zero1)",
                    par.zero
                ),
            ));
        }
        if par.dp_replicate == 0
            || (par.dp_replicate > 1 && (!par.zero1 || par.dp % par.dp_replicate != 0))
        {
            return Err(field(
                origin,
                "parallelism.dp_replicate",
                format!(
                    "{} (valid: 1, or a divisor of dp = {} with zero1 true)",
                    par.dp_replicate, par.dp
                ),
            ));
        }
        if Stack::preset(&par.stack).is_none() {
            return Err(field(
                origin,
                "parallelism.stack",
                format!(
                    "'{}' (valid: {})",
                    par.stack,
                    Stack::PRESET_NAMES.join(", ")
                ),
            ));
        }
        if !["p2p", "all-gather"].contains(&par.cp_comm.as_str()) {
            return Err(field(
                origin,
                "parallelism.cp_comm",
                format!("'{}' (valid: p2p, all-gather)", par.cp_comm),
            ));
        }
        if let Err(e) = par.recompute.parse::<crate::cost::Recompute>() {
            return Err(field(origin, "parallelism.recompute", e));
        }
        if !["bf16", "fp8", "mxfp8", "nvfp4"].contains(&par.precision.as_str()) {
            return Err(field(
                origin,
                "parallelism.precision",
                format!("'{}' (valid: bf16, fp8, mxfp8, nvfp4)", par.precision),
            ));
        }
        if let Err(e) = par.cross_entropy_fusion.parse::<CrossEntropyFusion>() {
            return Err(field(origin, "parallelism.cross_entropy_fusion", e));
        }
        if let Err(e) = par.optimizer_state() {
            return Err(field(
                origin,
                format!("parallelism.{}", e.flag.replace('-', "_")),
                e.reason.replace(
                    "--use-precision-aware-optimizer on",
                    "parallelism.use_precision_aware_optimizer true",
                ),
            ));
        }
        if !["unfused", "flash"].contains(&par.attention.as_str()) {
            return Err(field(
                origin,
                "parallelism.attention",
                format!("'{}' (valid: unfused, flash)", par.attention),
            ));
        }
        if !["bf16", "f32"].contains(&self.dtype.as_str()) {
            return Err(field(
                origin,
                "dtype",
                format!("'{}' (valid: bf16, f32)", self.dtype),
            ));
        }
        let sch = &self.schedule;
        if sch.devices.len() as u64 != par.pp {
            return Err(field(
                origin,
                "schedule.devices",
                format!(
                    "has {} device lists but parallelism.pp is {}",
                    sch.devices.len(),
                    par.pp
                ),
            ));
        }
        let want_stages = par.pp.saturating_mul(par.chunks);
        if self.stages.len() as u64 != want_stages {
            return Err(field(
                origin,
                "stages",
                format!(
                    "has {} stages but parallelism.pp x parallelism.chunks = {}",
                    self.stages.len(),
                    want_stages
                ),
            ));
        }
        let placement: Placement = sch
            .placement
            .parse()
            .map_err(|e: String| field(origin, "schedule.placement", e))?;
        let mut next = 0u32;
        let n = self.stages.len() as u32;
        for (i, st) in self.stages.iter().enumerate() {
            let i = i as u32;
            let at = |f: &str| format!("stages[{i}].{f}");
            if st.stage != i {
                return Err(field(
                    origin,
                    at("stage"),
                    format!(
                        "is {} but must be {i} (stages are listed in order)",
                        st.stage
                    ),
                ));
            }
            let dev = placement.device_of(i, par.pp as u32);
            if st.device != dev {
                return Err(field(
                    origin,
                    at("device"),
                    format!(
                        "is {} but {} placement puts stage {i} on device {dev}",
                        st.device, sch.placement
                    ),
                ));
            }
            if st.first_layer != next {
                return Err(field(
                    origin,
                    at("first_layer"),
                    format!("is {} but the previous stages end at layer {next}; stages must cover the layers in order without gaps", st.first_layer),
                ));
            }
            if st.embedding != (i == 0) {
                return Err(field(
                    origin,
                    at("embedding"),
                    "only stage 0 holds the embedding",
                ));
            }
            if st.output != (i + 1 == n) {
                return Err(field(
                    origin,
                    at("output"),
                    "only the last stage holds the output layer",
                ));
            }
            next = next.saturating_add(st.num_layers);
        }
        if next != m.num_layers {
            return Err(field(
                origin,
                "stages",
                format!(
                    "cover {next} layers but model.num_layers is {}",
                    m.num_layers
                ),
            ));
        }
        if let Some(n) = sch.microbatch_group {
            if sch.name != "interleaved-1f1b" || self.parallelism.chunks < 2 {
                return Err(field(
                    origin,
                    "schedule.microbatch_group",
                    format!(
                        "applies to interleaved-1f1b with parallelism.chunks > 1 (schedule '{}', chunks {})",
                        sch.name, self.parallelism.chunks
                    ),
                ));
            }
            crate::schedule::generators::check_group(
                self.parallelism.pp as u32,
                sch.microbatches_per_step,
                n,
            )
            .map_err(|e| field(origin, "schedule.microbatch_group", e))?;
        }
        if let Ok(name) = sch.name.parse::<ScheduleName>() {
            if name.placement() != placement {
                return Err(field(
                    origin,
                    "schedule.placement",
                    format!("'{}' does not match schedule '{}'", sch.placement, sch.name),
                ));
            }
        }
        self.schedule_ir_at(origin)?;
        Ok(())
    }
}
