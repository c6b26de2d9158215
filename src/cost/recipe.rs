//! Megatron-Core's recipe switches that change how a mixture-of-experts layer and the host's
//! launches cost (docs/cost-model.md, "Recipe switches"): the token dispatcher and its backend,
//! token dropping with a capacity factor, and CUDA graphs. Each is read from Megatron-LM's own
//! flags (`plan::megatron_args`), written back by `emit --target megatron`, and checked here
//! with Megatron-Core's rules (`TransformerConfig.__post_init__`,
//! megatron/core/transformer/transformer_config.py at d98e8a64). Pure; no IO.

use std::fmt;

/// How a MoE layer's tokens reach their experts (`--moe-token-dispatcher-type`,
/// `--moe-flex-dispatcher-backend`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MoeDispatcher {
    /// NCCL all-to-all (`MoEAlltoAllTokenDispatcher`): one copy of a token per routed expert,
    /// permuted before the exchange and sorted by local expert after it.
    #[default]
    AllToAll,
    /// The flex dispatcher with DeepEP (DeepSeek-V3's kernels): a token crosses the network
    /// once per remote NVLink domain and reaches each GPU holding one of its experts once
    /// (over NVLink, forwarded inside the domain); the send buffer is gathered inside the
    /// communication kernel (one permutation pass).
    DeepEp,
    /// The flex dispatcher with HybridEP (DeepEP's `hybrid-ep` branch, NVIDIA): the same
    /// deduplication, with permutation and padding fused into the dispatch and combine
    /// kernels (`HybridEPDispatch`: "permute + dispatch a2a + permute", fused_a2a.py).
    HybridEp,
}

impl MoeDispatcher {
    pub const NAMES: &'static str = "alltoall, deepep, hybridep";

    /// From its name; `Err` says what is valid.
    pub fn parse(s: &str) -> Result<MoeDispatcher, String> {
        match s {
            "alltoall" => Ok(MoeDispatcher::AllToAll),
            "deepep" => Ok(MoeDispatcher::DeepEp),
            "hybridep" => Ok(MoeDispatcher::HybridEp),
            _ => Err(format!(
                "unknown dispatcher '{s}' (valid: {})",
                MoeDispatcher::NAMES
            )),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            MoeDispatcher::AllToAll => "alltoall",
            MoeDispatcher::DeepEp => "deepep",
            MoeDispatcher::HybridEp => "hybridep",
        }
    }

    /// A token is sent once per GPU (and once per remote domain over the network) that holds
    /// one of its experts, not once per expert.
    pub fn deduplicates(self) -> bool {
        self != MoeDispatcher::AllToAll
    }

    /// HBM passes over the routed rows to permute them, each way, with `local_experts` on a
    /// rank: the all-to-all dispatcher permutes for the exchange and, with more than one
    /// local expert, sorts the received rows by expert (`sort_chunks_by_idxs`); DeepEP
    /// gathers inside its kernel and permutes once; HybridEP fuses both into its kernels.
    pub fn permute_passes(self, local_experts: f64) -> f64 {
        match self {
            MoeDispatcher::AllToAll if local_experts > 1.0 => 2.0,
            MoeDispatcher::AllToAll | MoeDispatcher::DeepEp => 1.0,
            MoeDispatcher::HybridEp => 0.0,
        }
    }
}

impl fmt::Display for MoeDispatcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Token dropping (`--moe-expert-capacity-factor C`, `--moe-pad-expert-input-to-capacity`):
/// each expert takes at most `C` times its mean share of the routed tokens
/// (`get_capacity`, megatron/core/transformer/moe/moe_utils.py); the rest are dropped
/// (`--moe-token-drop-policy`: the lowest-probability ones or the last ones, the same cost).
/// Padded, every expert takes exactly its capacity: static shapes, no host synchronisation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MoeCapacity {
    pub factor: f64,
    pub pad: bool,
}

impl MoeCapacity {
    /// Rows on the busiest expert over the mean, given the dropless `imbalance`: capped at
    /// the capacity factor, or exactly it when padded.
    pub fn busiest_load(self, imbalance: f64) -> f64 {
        if self.pad {
            self.factor
        } else {
            imbalance.min(self.factor)
        }
    }
}

/// Busiest expert's rows over the mean with `capacity` (None: dropless).
pub fn busiest_load(capacity: Option<MoeCapacity>, imbalance: f64) -> f64 {
    capacity.map_or(imbalance, |c| c.busiest_load(imbalance))
}

/// CUDA graphs (`--cuda-graph-impl`, `--cuda-graph-modules`; the older `--cuda-graph-scope`
/// and `--enable-cuda-graph`/`--external-cuda-graph` are read as these). A captured region
/// is launched as one graph: its kernels cost the host no launch each, and the framework's
/// Python work for it is not repeated per micro-batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CudaGraphImpl {
    #[default]
    None,
    /// Megatron-Core's own per-layer graphs (`CudaGraphManager`).
    Local,
    /// Transformer Engine's `make_graphed_callables`, per layer.
    TransformerEngine,
    /// The whole forward-backward step of every micro-batch as one graph.
    FullIteration,
}

impl CudaGraphImpl {
    pub const NAMES: &'static str = "none, local, transformer_engine, full_iteration";

    /// From its name; `Err` says what is valid.
    pub fn parse(s: &str) -> Result<CudaGraphImpl, String> {
        match s {
            "none" => Ok(CudaGraphImpl::None),
            "local" => Ok(CudaGraphImpl::Local),
            "transformer_engine" => Ok(CudaGraphImpl::TransformerEngine),
            "full_iteration" => Ok(CudaGraphImpl::FullIteration),
            _ => Err(format!(
                "unknown implementation '{s}' (valid: {})",
                CudaGraphImpl::NAMES
            )),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            CudaGraphImpl::None => "none",
            CudaGraphImpl::Local => "local",
            CudaGraphImpl::TransformerEngine => "transformer_engine",
            CudaGraphImpl::FullIteration => "full_iteration",
        }
    }
}

/// The regions per-layer graphs capture (`CudaGraphModule`, megatron/core/transformer/
/// enums.py); none listed: the whole layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CudaGraphModules {
    pub attn: bool,
    pub mlp: bool,
    pub moe: bool,
    pub moe_router: bool,
    pub moe_preprocess: bool,
}

impl CudaGraphModules {
    pub const NAMES: &'static str = "attn, mlp, moe, moe_router, moe_preprocess";

    /// From Megatron's names (`full` is the deprecated spelling of the whole layer).
    pub fn parse<'a>(names: impl IntoIterator<Item = &'a str>) -> Result<Self, String> {
        let mut m = CudaGraphModules::default();
        for n in names {
            match n {
                "attn" => m.attn = true,
                "mlp" => m.mlp = true,
                "moe" => m.moe = true,
                "moe_router" => m.moe_router = true,
                "moe_preprocess" => m.moe_preprocess = true,
                "full" => {}
                other => {
                    return Err(format!(
                        "unknown CUDA graph module '{other}' (valid: {}; none for the whole layer)",
                        Self::NAMES
                    ))
                }
            }
        }
        Ok(m)
    }

    pub fn is_empty(self) -> bool {
        self == CudaGraphModules::default()
    }

    pub fn names(self) -> Vec<&'static str> {
        [
            (self.attn, "attn"),
            (self.mlp, "mlp"),
            (self.moe, "moe"),
            (self.moe_router, "moe_router"),
            (self.moe_preprocess, "moe_preprocess"),
        ]
        .into_iter()
        .filter_map(|(on, n)| on.then_some(n))
        .collect()
    }
}

/// What CUDA graphs capture of one layer (the cost model's view of the two flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CudaGraphs {
    pub implementation: CudaGraphImpl,
    pub modules: CudaGraphModules,
}

/// The regions of a layer whose launches a graph takes over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Captured {
    /// The attention block (its norm, projections, core and residual add).
    pub attention: bool,
    /// A dense layer's MLP block.
    pub mlp: bool,
    /// A MoE layer's router (and the shared experts when not overlapped).
    pub router: bool,
    /// A MoE layer's preprocessing (the dispatcher's permutation metadata).
    pub preprocess: bool,
    /// A MoE layer's dispatch, experts and combine (static shapes only).
    pub experts: bool,
}

impl CudaGraphs {
    pub fn enabled(self) -> bool {
        self.implementation != CudaGraphImpl::None
    }

    /// The modules as captured: Megatron-Core's own graphs do not tell the router from the
    /// preprocessing, and add either when the other is given.
    pub fn effective_modules(self) -> CudaGraphModules {
        let mut m = self.modules;
        if self.implementation == CudaGraphImpl::Local && (m.moe_router || m.moe_preprocess) {
            m.moe_router = true;
            m.moe_preprocess = true;
        }
        m
    }

    /// What a `moe_layer` (or a dense layer) has captured.
    pub fn captured(self, moe_layer: bool) -> Captured {
        let m = self.effective_modules();
        match self.implementation {
            CudaGraphImpl::None => Captured::default(),
            CudaGraphImpl::FullIteration => Captured {
                attention: true,
                mlp: true,
                router: true,
                preprocess: true,
                experts: true,
            },
            CudaGraphImpl::Local | CudaGraphImpl::TransformerEngine if m.is_empty() => Captured {
                attention: true,
                mlp: !moe_layer,
                router: moe_layer,
                preprocess: moe_layer,
                experts: moe_layer,
            },
            CudaGraphImpl::Local | CudaGraphImpl::TransformerEngine => Captured {
                attention: m.attn,
                mlp: !moe_layer && m.mlp,
                router: moe_layer && (m.moe || m.moe_router),
                preprocess: moe_layer && (m.moe || m.moe_preprocess),
                experts: moe_layer && m.moe,
            },
        }
    }
}

/// The model and switches the CUDA-graph and capacity rules read.
pub struct RecipeContext {
    /// Routed experts (0: a dense model).
    pub experts: u64,
    /// Whether every layer is a MoE layer (no dense MLP for `mlp` to capture).
    pub all_moe: bool,
    pub dispatcher: MoeDispatcher,
    pub capacity: Option<MoeCapacity>,
    /// Full recomputation of every layer.
    pub full_recompute: bool,
    /// `--moe-comm-overlap` (Megatron-Core `--overlap-moe-expert-parallel-comm`).
    pub ep_overlap: bool,
}

/// Megatron-Core's rules for these switches (transformer_config.py at d98e8a64, the checks
/// after `if self.cuda_graph_impl != "none"` and `if self.moe_token_dispatcher_type ==
/// "flex"`); `Err` names the flags, what is wrong and what would run.
pub fn check(g: CudaGraphs, c: &RecipeContext) -> Result<(), String> {
    if let Some(cap) = c.capacity {
        if !(cap.factor.is_finite() && cap.factor > 0.0 && cap.factor <= 1e6) {
            return Err(format!(
                "--moe-expert-capacity-factor {}: must be a positive number (1.0: each expert takes its mean share of the tokens)",
                cap.factor
            ));
        }
        if c.experts == 0 {
            return Err(
                "--moe-expert-capacity-factor: the model has no experts (omit it for a dense model)"
                    .into(),
            );
        }
        if cap.pad && c.dispatcher == MoeDispatcher::DeepEp {
            return Err("--moe-pad-expert-input-to-capacity: the flex dispatcher with DeepEP does not pad (Megatron-Core refuses it); valid: --moe-dispatcher alltoall or hybridep".into());
        }
    }
    let m = g.effective_modules();
    let modules = m.names().join(" ");
    match g.implementation {
        CudaGraphImpl::None => {
            if !m.is_empty() {
                return Err(format!("--cuda-graph-modules {modules}: needs --cuda-graph-impl local or transformer_engine"));
            }
            return Ok(());
        }
        CudaGraphImpl::FullIteration if !m.is_empty() => {
            return Err(format!("--cuda-graph-modules {modules}: must be empty with --cuda-graph-impl full_iteration (it captures everything)"));
        }
        _ => {}
    }
    let dropless = !c.capacity.is_some_and(|cap| cap.pad);
    let static_shapes =
        "give --moe-expert-capacity-factor with --moe-pad-expert-input-to-capacity (static shapes)";
    if g.implementation == CudaGraphImpl::FullIteration {
        // HybridEP sizes its buffers per rank (`--moe-expert-rank-capacity-factor`, with
        // `--moe-paged-stash` for the experts' activations), which is what lets NVIDIA's
        // DeepSeek-V3 recipes capture whole dropless iterations.
        if c.experts > 0 && dropless && c.dispatcher != MoeDispatcher::HybridEp {
            return Err(format!("--cuda-graph-impl full_iteration: a dropless MoE layer synchronises with the host for its token counts, which a graph cannot capture; {static_shapes}, use --moe-dispatcher hybridep (its per-rank buffers), or --cuda-graph-impl local with --cuda-graph-modules attn moe_router moe_preprocess"));
        }
        return Ok(());
    }
    if c.full_recompute {
        return Err(format!("--cuda-graph-impl {}: full recomputation needs --cuda-graph-impl full_iteration (Megatron-Core refuses per-layer graphs with it); valid: --recompute none or selective", g.implementation.as_str()));
    }
    if m.moe && m.moe_router {
        return Err("--cuda-graph-modules: moe and moe_router cannot both be given (moe already captures the router)".into());
    }
    if m.moe_preprocess && !m.moe_router {
        return Err("--cuda-graph-modules moe_preprocess: needs moe_router too".into());
    }
    if c.experts == 0 && (m.moe || m.moe_router || m.moe_preprocess) {
        return Err(format!(
            "--cuda-graph-modules {modules}: the moe modules need a MoE model (valid here: attn, mlp, or none for the whole layer)"
        ));
    }
    if c.experts > 0 && c.all_moe && m.mlp {
        return Err("--cuda-graph-modules mlp: every layer is a MoE layer, there is no dense MLP to capture (valid: attn, moe_router, moe_preprocess, moe)".into());
    }
    if c.experts > 0 && dropless && (m.moe || m.is_empty()) {
        return Err(format!("--cuda-graph-modules {}: capturing a dropless MoE layer's experts needs static shapes; {static_shapes}, or capture attn moe_router moe_preprocess", if m.is_empty() { "(the whole layer)".to_string() } else { modules.clone() }));
    }
    if c.experts > 0
        && !c.capacity.is_some_and(|cap| cap.pad)
        && c.capacity.is_some()
        && c.dispatcher == MoeDispatcher::AllToAll
        && m.moe_preprocess
    {
        return Err("--cuda-graph-modules moe_preprocess: the all-to-all dispatcher with a capacity factor copies token counts to the host in its preprocessing, which a graph cannot capture".into());
    }
    if c.ep_overlap && (m.is_empty() || m.moe) && c.experts > 0 {
        return Err("--moe-comm-overlap on: a graph of the whole MoE block leaves no all-to-all to overlap (Megatron-Core asserts it); valid: --cuda-graph-modules attn moe_router moe_preprocess".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx() -> RecipeContext {
        RecipeContext {
            experts: 128,
            all_moe: true,
            dispatcher: MoeDispatcher::AllToAll,
            capacity: None,
            full_recompute: false,
            ep_overlap: false,
        }
    }

    fn graphs(i: CudaGraphImpl, names: &[&str]) -> CudaGraphs {
        CudaGraphs {
            implementation: i,
            modules: CudaGraphModules::parse(names.iter().copied()).unwrap(),
        }
    }

    #[test]
    fn capacity_caps_or_pads_the_busiest_expert() {
        let drop = MoeCapacity {
            factor: 1.25,
            pad: false,
        };
        assert_eq!(drop.busiest_load(1.48), 1.25);
        assert_eq!(drop.busiest_load(1.1), 1.1);
        let pad = MoeCapacity { pad: true, ..drop };
        assert_eq!(pad.busiest_load(1.1), 1.25);
        assert_eq!(busiest_load(None, 1.48), 1.48);
    }

    #[test]
    fn megatron_cores_graph_rules() {
        let c = ctx();
        // The router and preprocessing of a dropless layer can be captured, its experts not.
        check(
            graphs(
                CudaGraphImpl::TransformerEngine,
                &["attn", "moe_router", "moe_preprocess"],
            ),
            &c,
        )
        .unwrap();
        for names in [&["attn", "moe"][..], &[]] {
            let e = check(graphs(CudaGraphImpl::Local, names), &c).unwrap_err();
            assert!(e.contains("--moe-pad-expert-input-to-capacity"), "{e}");
        }
        let padded = RecipeContext {
            capacity: Some(MoeCapacity {
                factor: 1.0,
                pad: true,
            }),
            ..ctx()
        };
        check(graphs(CudaGraphImpl::Local, &[]), &padded).unwrap();
        check(graphs(CudaGraphImpl::FullIteration, &[]), &padded).unwrap();
        assert!(check(graphs(CudaGraphImpl::FullIteration, &[]), &c).is_err());
        assert!(check(
            graphs(CudaGraphImpl::Local, &["moe", "moe_router"]),
            &padded
        )
        .is_err());
        assert!(check(graphs(CudaGraphImpl::Local, &["mlp"]), &c).is_err());
        assert!(check(graphs(CudaGraphImpl::None, &["attn"]), &c).is_err());
        let dense = RecipeContext {
            experts: 0,
            all_moe: false,
            ..ctx()
        };
        check(graphs(CudaGraphImpl::Local, &[]), &dense).unwrap();
        assert!(check(graphs(CudaGraphImpl::Local, &["moe_router"]), &dense).is_err());
        let full = RecipeContext {
            full_recompute: true,
            ..dense
        };
        assert!(check(graphs(CudaGraphImpl::Local, &[]), &full)
            .unwrap_err()
            .contains("full_iteration"));
        let deepep_pad = RecipeContext {
            dispatcher: MoeDispatcher::DeepEp,
            ..padded
        };
        assert!(check(CudaGraphs::default(), &deepep_pad).is_err());
    }

    #[test]
    fn whole_layer_graphs_capture_the_layer() {
        let g = graphs(CudaGraphImpl::Local, &[]);
        assert!(g.captured(true).experts && g.captured(false).mlp);
        let partial = graphs(CudaGraphImpl::TransformerEngine, &["attn", "moe_router"]);
        let c = partial.captured(true);
        assert!(c.attention && c.router && !c.preprocess && !c.experts);
        // Megatron-Core's own graphs take the router and the preprocessing together.
        let local = graphs(CudaGraphImpl::Local, &["attn", "moe_router"]).captured(true);
        assert!(local.router && local.preprocess && !local.experts);
        assert_eq!(CudaGraphs::default().captured(true), Captured::default());
    }
}
