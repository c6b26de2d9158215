//! What a plan file's fields mean, checked as strictly as the flags that made it: a plan is
//! read by `emit`, `simulate --plan`, `predict --plan` and the executor, and a value the flags
//! would refuse (an expert-parallel size that does not divide the experts, top-k above the
//! expert count, a schedule named `gpipe` whose action lists are 1F1B's) would otherwise be
//! written into a Megatron-LM command line or run as something it is not. Split from
//! `plan_file` (the format) to keep files short. No IO.

use super::{field, Plan, PlanError};
use crate::cost::{CrossEntropyFusion, Stack};
use crate::inputs::hardware::valid_names;
use crate::inputs::model::{megatron_rms_norm, megatron_rotary};
use crate::schedule::generators::{generate, GenParams, ScheduleName};
use crate::schedule::ir::{Placement, Schedule};

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
        if let Err((name, reason)) = par.check_switches() {
            return Err(field(origin, name, reason));
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
        // The recipe of FP8 with per-tensor or per-block scales; MXFP8 and NVFP4 are
        // precisions of their own.
        if !["delayed", "tensorwise", "blockwise"].contains(&par.fp8_recipe.as_str()) {
            return Err(field(
                origin,
                "parallelism.fp8_recipe",
                format!(
                    "'{}' (valid: delayed, tensorwise, blockwise; mxfp8 is parallelism.precision mxfp8)",
                    par.fp8_recipe
                ),
            ));
        }
        if par.fp8_recipe != "delayed" && par.precision != "fp8" {
            return Err(field(
                origin,
                "parallelism.fp8_recipe",
                format!(
                    "'{}' needs parallelism.precision fp8 (got '{}'); valid: drop the recipe, or precision fp8",
                    par.fp8_recipe, par.precision
                ),
            ));
        }
        match par.cross_entropy_fusion.parse::<CrossEntropyFusion>() {
            Err(e) => return Err(field(origin, "parallelism.cross_entropy_fusion", e)),
            Ok(c) if c.pytorch_only() && par.stack != "torchtitan" => {
                return Err(field(
                    origin,
                    "parallelism.cross_entropy_fusion",
                    format!(
                        "'{}' is a PyTorch stack's loss (stack '{}'); valid: stack torchtitan, or off, native, te",
                        c.as_str(),
                        par.stack
                    ),
                ))
            }
            Ok(_) => {}
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
        if let Err(e) = par.attention_kernel.parse::<crate::cost::AttentionKernel>() {
            return Err(field(origin, "parallelism.attention_kernel", e));
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
        self.check_experts(origin)?;
        self.check_recipe(origin)?;
        self.check_mtp(origin)?;
        self.check_window(origin)?;
        let schedule = self.schedule_ir_at(origin)?;
        self.check_schedule_name(origin, &schedule)?;
        Ok(())
    }

    /// The dispatcher, capacity and CUDA-graph fields by Megatron-Core's rules, as the flags
    /// that wrote them are checked (`cost::recipe::check`).
    fn check_recipe(&self, origin: &str) -> Result<(), PlanError> {
        let par = &self.parallelism;
        let (dispatcher, capacity, graphs) = par
            .recipe()
            .map_err(|(f, reason)| field(origin, f, reason))?;
        let moe = self.model.moe.as_ref();
        let ctx = crate::cost::recipe::RecipeContext {
            experts: moe.map_or(0, |m| m.num_experts),
            all_moe: moe.is_some_and(|m| m.moe_layer_pattern.iter().all(|&b| b == 1)),
            dispatcher,
            capacity,
            full_recompute: par.recompute == "full",
            ep_overlap: false,
        };
        crate::cost::recipe::check(graphs, &ctx)
            .map_err(|e| field(origin, "parallelism.cuda_graph_impl", e))
    }

    /// A sliding window of at least one token, named for every layer (the cost model and the
    /// emitters index the pattern by layer).
    fn check_window(&self, origin: &str) -> Result<(), PlanError> {
        let Some(w) = &self.model.sliding_window else {
            return Ok(());
        };
        if w.window_size == 0 {
            return Err(field(
                origin,
                "model.sliding_window.window_size",
                "0 (valid: a positive number of tokens)".to_string(),
            ));
        }
        if w.window_layer_pattern.len() != self.model.num_layers as usize
            || w.window_layer_pattern.iter().any(|&b| b > 1)
        {
            return Err(field(
                origin,
                "model.sliding_window.window_layer_pattern",
                format!(
                    "{} entries (valid: one 0/1 entry per layer, model.num_layers = {})",
                    w.window_layer_pattern.len(),
                    self.model.num_layers
                ),
            ));
        }
        Ok(())
    }

    /// Multi-token prediction as Megatron-Core's layouts allow it (`Layout::check`): at most
    /// the model's layers, all depths on one stage (none named: the last), no transformer
    /// layer after them, in a rank's last virtual stage.
    fn check_mtp(&self, origin: &str) -> Result<(), PlanError> {
        let n = self.model.mtp_num_layers;
        if n > self.model.num_layers {
            return Err(field(
                origin,
                "model.mtp_num_layers",
                format!(
                    "{n} (valid: 0 to model.num_layers = {})",
                    self.model.num_layers
                ),
            ));
        }
        let holding: Vec<usize> = (0..self.stages.len())
            .filter(|&s| self.stages[s].mtp_layers > 0)
            .collect();
        let Some(&s) = holding.first() else {
            return Ok(());
        };
        let st = &self.stages[s];
        let at = format!("stages[{s}].mtp_layers");
        if holding.len() > 1 || st.mtp_layers != n {
            return Err(field(
                origin,
                at,
                format!("{} on stages {holding:?}; model.mtp_num_layers is {n}, and every depth sits on one stage", st.mtp_layers),
            ));
        }
        if self.stages[s + 1..].iter().any(|x| x.num_layers > 0) {
            return Err(field(
                origin,
                at,
                "a later stage holds transformer layers; Megatron-Core places every transformer layer before the multi-token prediction layers",
            ));
        }
        let pp = self.parallelism.pp as usize;
        if s + pp < self.stages.len() {
            return Err(field(
                origin,
                at,
                format!("stage {s} is not in the last virtual stage of its pipeline rank (stages {} to {}), as Megatron-Core requires", self.stages.len() - pp, self.stages.len() - 1),
            ));
        }
        Ok(())
    }

    /// Mixture of experts and latent attention as Megatron-LM's flags take them (the same
    /// rules `pplan predict` applies to `--ep`/`--etp` and model files apply to their keys).
    fn check_experts(&self, origin: &str) -> Result<(), PlanError> {
        let par = &self.parallelism;
        let m = &self.model;
        let Some(moe) = &m.moe else {
            for (name, v) in [("parallelism.ep", par.ep), ("parallelism.etp", par.etp)] {
                if v != 1 {
                    return Err(field(
                        origin,
                        name,
                        format!("is {v} but the model has no experts (model.moe); valid: 1"),
                    ));
                }
            }
            return self.check_mla(origin);
        };
        let e = moe.num_experts;
        if e == 0 || e > 1 << 16 {
            return Err(field(
                origin,
                "model.moe.num_experts",
                format!("is {e}; valid: 1 to 65536 (omit model.moe for a dense model)"),
            ));
        }
        if moe.moe_router_topk == 0 || moe.moe_router_topk > e {
            return Err(field(
                origin,
                "model.moe.moe_router_topk",
                format!(
                    "is {}; valid: 1 to model.moe.num_experts = {e} (a token is routed to that many distinct experts)",
                    moe.moe_router_topk
                ),
            ));
        }
        if moe.moe_ffn_hidden_size == 0 {
            return Err(field(
                origin,
                "model.moe.moe_ffn_hidden_size",
                "must be at least 1",
            ));
        }
        let pattern = &moe.moe_layer_pattern;
        if pattern.len() != m.num_layers as usize || pattern.iter().any(|&b| b > 1) {
            return Err(field(
                origin,
                "model.moe.moe_layer_pattern",
                format!(
                    "has {} entries; valid: one 0 or 1 per layer (model.num_layers = {})",
                    pattern.len(),
                    m.num_layers
                ),
            ));
        }
        if !pattern.contains(&1) {
            return Err(field(
                origin,
                "model.moe.moe_layer_pattern",
                "has no MoE layer (no 1); omit model.moe for a dense model",
            ));
        }
        let (g, gk) = (moe.moe_router_num_groups, moe.moe_router_group_topk);
        if (g == 0) != (gk == 0)
            || (g > 0 && (e % g != 0 || gk > g || moe.moe_router_topk % gk != 0))
        {
            return Err(field(
                origin,
                "model.moe.moe_router_num_groups",
                format!(
                    "{g} groups choosing {gk} (moe_router_group_topk): valid when both are 0, or the groups divide the {e} experts and the chosen groups are 1 to the groups and divide moe_router_topk {} (Megatron-Core's rule)",
                    moe.moe_router_topk
                ),
            ));
        }
        if par.ep == 0 || e % par.ep != 0 {
            let valid: Vec<String> = (1..=e)
                .filter(|d| e % d == 0)
                .map(|d| d.to_string())
                .collect();
            return Err(field(
                origin,
                "parallelism.ep",
                format!(
                    "is {} but must divide model.moe.num_experts = {e}; valid: {}",
                    par.ep,
                    valid.join(", ")
                ),
            ));
        }
        if par.etp != 1 && par.etp != par.tp {
            return Err(field(
                origin,
                "parallelism.etp",
                format!("is {}; valid: 1 or parallelism.tp = {}", par.etp, par.tp),
            ));
        }
        let ranks = u128::from(par.tp) * u128::from(par.cp) * u128::from(par.dp);
        if ranks % (u128::from(par.ep) * u128::from(par.etp)) != 0 {
            return Err(field(
                origin,
                "parallelism.ep",
                format!(
                    "ep x etp = {} x {} must divide tp x cp x dp = {ranks} (expert-parallel ranks are carved from them, as in Megatron-Core)",
                    par.ep, par.etp
                ),
            ));
        }
        self.check_mla(origin)
    }

    fn check_mla(&self, origin: &str) -> Result<(), PlanError> {
        let Some(mla) = &self.model.mla else {
            return Ok(());
        };
        for (name, v) in [
            ("model.mla.kv_lora_rank", mla.kv_lora_rank),
            ("model.mla.qk_head_dim", mla.qk_head_dim),
            ("model.mla.qk_pos_emb_head_dim", mla.qk_pos_emb_head_dim),
            ("model.mla.v_head_dim", mla.v_head_dim),
        ] {
            if v == 0 || v > 1 << 16 {
                return Err(field(origin, name, format!("is {v}; valid: 1 to 65536")));
            }
        }
        if mla.q_lora_rank > 1 << 16 {
            return Err(field(
                origin,
                "model.mla.q_lora_rank",
                format!("is {}; valid: 0 (none) to 65536", mla.q_lora_rank),
            ));
        }
        Ok(())
    }

    /// A schedule named after a built-in one must be that schedule: the generator's action
    /// lists for the plan's devices, micro-batches and chunks (what `predict --output` and
    /// `search --output` write). A custom order keeps any other name.
    fn check_schedule_name(&self, origin: &str, schedule: &Schedule) -> Result<(), PlanError> {
        let sch = &self.schedule;
        let Ok(name) = sch.name.parse::<ScheduleName>() else {
            return Ok(());
        };
        let per_step = sch.microbatches_per_step.max(1);
        let params = GenParams::new(self.parallelism.pp as u32, per_step)
            .chunks(self.parallelism.chunks as u32)
            .group(sch.microbatch_group)
            .steps((sch.microbatches / per_step).max(1));
        // PipeDream's vertical sync changes the weight versions, not the order: both match.
        let candidates = [false, true].map(|vertical_sync| {
            generate(
                name,
                GenParams {
                    vertical_sync,
                    ..params
                },
            )
        });
        let custom = "keep the order under another name (any name but the built-in ones) for a custom schedule";
        let expected = match &candidates[0] {
            Ok(s) => s,
            Err(e) => {
                return Err(field(
                    origin,
                    "schedule.name",
                    format!(
                        "'{}' cannot be generated for this plan ({e}); {custom}",
                        sch.name
                    ),
                ))
            }
        };
        if candidates
            .iter()
            .flatten()
            .any(|g| g.devices == schedule.devices)
        {
            return Ok(());
        }
        // The first place the plan's order leaves the generator's.
        let (device, position, got, want) = expected
            .devices
            .iter()
            .zip(&schedule.devices)
            .enumerate()
            .find_map(|(d, (w, g))| {
                let at = w
                    .iter()
                    .zip(g)
                    .position(|(a, b)| a != b)
                    .or_else(|| (w.len() != g.len()).then(|| w.len().min(g.len())))?;
                let show = |v: &[crate::schedule::ir::Action]| {
                    v.get(at).map_or("(end)".to_string(), |a| a.to_string())
                };
                Some((d, at, show(g), show(w)))
            })
            .unwrap_or((0, 0, "?".into(), "?".into()));
        Err(field(
            origin,
            "schedule.name",
            format!(
                "'{}' but schedule.devices is not its order for pp {}, {} micro-batches, chunks {}: device {device} position {position} is {got}, {} has {want}; {custom}",
                sch.name, self.parallelism.pp, sch.microbatches, self.parallelism.chunks, sch.name
            ),
        ))
    }
}
