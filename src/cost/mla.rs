//! Multi-head latent attention (DeepSeek-V2/V3) in the cost model: its layer's GEMMs, and the
//! up-projections Megatron-Core's `mla_up_proj` recompute module runs again.

use super::compute::Gemm;
use super::stack::CostModel;

impl CostModel<'_> {
    /// [`CostModel::layer_gemms`] with multi-head latent attention (DeepSeek-V2/V3): the four
    /// projections into queries, the key/value latent and back up to keys and values are one
    /// GEMM of `K = h` whose width gives their FLOPs exactly (`2 b s` per parameter); scores
    /// over `qk_nope + qk_rope` head dimensions, values of `v_head_dim`, output projection from
    /// `a v_head_dim`.
    pub(super) fn mla_layer_gemms(&self, mla: &crate::inputs::moe::Mla, f: f64) -> [Gemm; 6] {
        let (b, s, h, a, _, t, _) = self.dims();
        let s_kv = self.model.seq_len as f64;
        let (dqk, dv) = (mla.qk_head_dim() as f64, mla.v_head_dim as f64);
        let o = a * dv * h;
        let proj = mla.params(self.model.hidden_size, self.model.num_heads) as f64 - o;
        let mlp_in = if self.model.gated_mlp { 2.0 * f } else { f };
        let g = |m, n, k, batch| Gemm { m, n, k, batch };
        [
            g(b * s, proj / h / t, h, 1.0),
            g(s, s_kv, dqk, b * a / t),
            g(s, dv, s_kv, b * a / t),
            g(b * s, h, a * dv / t, 1.0),
            g(b * s, mlp_in / t, h, 1.0),
            g(b * s, h, f / t, 1.0),
        ]
    }

    /// Latent attention's up-projections on one rank, what `mla_up_proj` recomputation runs
    /// again: the query latent to the heads' queries (`q_lora_rank` to `a (qk_nope + qk_rope)
    /// / t`) and the key/value latent to their keys and values (`kv_lora_rank` to `a
    /// (qk_nope + v_head_dim) / t`). None without latent attention, or with queries projected
    /// directly (`q_lora_rank` 0: no query up-projection).
    pub fn mla_up_proj_gemms(&self) -> Vec<Gemm> {
        let Some(mla) = &self.model.mla else {
            return Vec::new();
        };
        let (b, s, _, a, _, t, _) = self.dims();
        let tokens = b * s;
        let g = |n: f64, k: u64| Gemm {
            m: tokens,
            n: n / t,
            k: k as f64,
            batch: 1.0,
        };
        let mut v = Vec::with_capacity(2);
        if mla.q_lora_rank > 0 {
            v.push(g(a * mla.qk_head_dim() as f64, mla.q_lora_rank));
        }
        v.push(g(
            a * (mla.qk_nope_head_dim + mla.v_head_dim) as f64,
            mla.kv_lora_rank,
        ));
        v
    }

    /// FLOPs of [`CostModel::mla_up_proj_gemms`] for the whole micro-batch.
    pub fn mla_up_proj_flops(&self) -> f64 {
        self.mla_up_proj_gemms()
            .iter()
            .map(Gemm::flops)
            .sum::<f64>()
            * self.ranks_per_layer()
    }
}
