//! Megatron-Core's own ways of splitting the layers over pipeline stages, for the runs that
//! use them (docs/partition.md, "Megatron-Core's split rules"):
//!
//! * `--account-for-embedding-in-pipeline-split` / `--account-for-loss-in-pipeline-split`:
//!   the embedding (the loss: output layer and cross-entropy) counts as one layer when the
//!   layers are divided evenly, and the first (last) stage builds one transformer layer fewer,
//!   possibly none;
//! * `--decoder-first-pipeline-num-layers F` / `--decoder-last-pipeline-num-layers L`: the
//!   first (last) pipeline rank holds F (L) layers, the middle ranks the rest evenly.
//!
//! As `megatron/core/transformer/transformer_block.py` (`get_num_layers_to_build`) and
//! `transformer_config.py` (`__post_init__`'s checks) do it at Megatron-LM d98e8a6 (the commit
//! of `tests/data/megatron_args.txt`). Pure; no IO.

/// Which of Megatron-Core's split rules a run uses (the default: none of them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PipelineSplit {
    /// `--account-for-embedding-in-pipeline-split`.
    pub embedding: bool,
    /// `--account-for-loss-in-pipeline-split`.
    pub loss: bool,
    /// `--decoder-first-pipeline-num-layers`: layers of the first pipeline rank.
    pub first: Option<u32>,
    /// `--decoder-last-pipeline-num-layers`: layers of the last pipeline rank.
    pub last: Option<u32>,
}

impl PipelineSplit {
    /// The embedding and the loss counted as pipeline layers
    /// (`--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split`), the
    /// split of the ModelZoo's benchmarking configs and of the Llama 3 paper's pipeline.
    pub const EMBEDDING_AND_LOSS: PipelineSplit = PipelineSplit {
        embedding: true,
        loss: true,
        first: None,
        last: None,
    };

    /// Whether any rule is set.
    pub fn is_set(&self) -> bool {
        self.embedding || self.loss || self.first.is_some() || self.last.is_some()
    }

    /// The flags that set it, as Megatron-LM spells them (for messages and `emit`).
    pub fn flags(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.embedding {
            out.push("--account-for-embedding-in-pipeline-split".to_string());
        }
        if self.loss {
            out.push("--account-for-loss-in-pipeline-split".to_string());
        }
        if let Some(f) = self.first {
            out.push(format!("--decoder-first-pipeline-num-layers {f}"));
        }
        if let Some(l) = self.last {
            out.push(format!("--decoder-last-pipeline-num-layers {l}"));
        }
        out
    }

    /// Transformer layers of each of the `pp x vp` stages, in pplan's stage order (stage `s`
    /// on pipeline rank `s mod pp`, its chunk `s / pp`: Megatron-LM's placement). `v_placed`:
    /// the schedule places stages in a V (zbv, dualpipev), where a pipeline rank holds the
    /// first and the last stage, so the per-rank rules do not apply. The error names the
    /// flag and what would be valid.
    pub fn stage_layers(
        &self,
        layers: u32,
        pp: u32,
        vp: u32,
        v_placed: bool,
    ) -> Result<Vec<u32>, String> {
        let stages = pp as u64 * vp as u64;
        if pp == 0 || vp == 0 || stages > 1 << 20 {
            return Err(format!("{pp} x {vp} stages cannot be split"));
        }
        let uneven = self.first.is_some() || self.last.is_some();
        if uneven && (self.embedding || self.loss) {
            return Err(
                "--decoder-first/last-pipeline-num-layers cannot be combined with --account-for-embedding/loss-in-pipeline-split (Megatron-Core refuses both); valid: one rule or the other".into(),
            );
        }
        if uneven {
            return self.uneven(layers, pp, vp, v_placed);
        }
        // The embedding and the loss as layers of an even split (get_num_layers_to_build).
        let counted = layers as u64 + u64::from(self.embedding) + u64::from(self.loss);
        if counted % stages != 0 {
            return Err(format!(
                "{} counts {counted} layers ({layers} transformer layers{}{}), not a multiple of the {stages} stages (--pp {pp} x --chunks {vp}); valid: --pp x --chunks dividing {counted}",
                self.flags().join(" "),
                if self.embedding { " + the embedding" } else { "" },
                if self.loss { " + the loss" } else { "" },
            ));
        }
        let per = (counted / stages) as u32;
        let mut out = vec![per; stages as usize];
        for (on, at, what) in [
            (self.embedding, 0, "first"),
            (self.loss, out.len() - 1, "last"),
        ] {
            if on {
                out[at] = out[at].checked_sub(1).ok_or_else(|| {
                    format!(
                        "the {what} stage has no layer to give up for the {}",
                        if at == 0 { "embedding" } else { "loss" }
                    )
                })?;
            }
        }
        Ok(out)
    }

    /// `--decoder-first/last-pipeline-num-layers`: per pipeline rank, then per chunk.
    fn uneven(&self, layers: u32, pp: u32, vp: u32, v_placed: bool) -> Result<Vec<u32>, String> {
        let flags = self.flags().join(" ");
        if v_placed {
            return Err(format!(
                "{flags}: the schedule places stages in a V (one rank holds the first and the last stage); valid: a loop-placed schedule (1f1b, interleaved-1f1b, ...) or no per-rank counts"
            ));
        }
        if pp < 2 {
            return Err(format!("{flags} needs --pp 2 or more"));
        }
        let ends = self.first.unwrap_or(0) as u64 + self.last.unwrap_or(0) as u64;
        let middle_ranks =
            pp as u64 - u64::from(self.first.is_some()) - u64::from(self.last.is_some());
        if ends > layers as u64 {
            return Err(format!(
                "{flags} puts {ends} layers on the end ranks, more than the model's {layers}"
            ));
        }
        let rest = layers as u64 - ends;
        if (rest > 0) != (middle_ranks > 0) || (middle_ranks > 0 && rest % middle_ranks != 0) {
            return Err(format!(
                "{flags} leaves {rest} layers for {middle_ranks} middle pipeline ranks; valid: counts leaving a multiple of the middle ranks"
            ));
        }
        let middle = rest.checked_div(middle_ranks).unwrap_or(0) as u32;
        let per_rank = |r: u32| match (r, self.first, self.last) {
            (0, Some(f), _) => f,
            (r, _, Some(l)) if r + 1 == pp => l,
            _ => middle,
        };
        for r in 0..pp {
            if per_rank(r) % vp != 0 {
                return Err(format!(
                    "{flags} gives pipeline rank {r} {} layers, not a multiple of --chunks {vp}",
                    per_rank(r)
                ));
            }
        }
        Ok((0..pp * vp).map(|s| per_rank(s % pp) / vp).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(embedding: bool, loss: bool) -> PipelineSplit {
        PipelineSplit {
            embedding,
            loss,
            ..Default::default()
        }
    }

    #[test]
    fn the_embedding_and_the_loss_take_a_layer_each() {
        // Megatron-MoE-ModelZoo's Qwen3-235B at PP 32, VPP 3: 94 layers + 2 = 96 = 32 x 3, so
        // the first virtual stage holds only the embedding and the last only the loss.
        let c = split(true, true).stage_layers(94, 32, 3, false).unwrap();
        assert_eq!(c.len(), 96);
        assert_eq!((c[0], c[95]), (0, 0));
        assert!(c[1..95].iter().all(|&x| x == 1));
        // 6 layers + 2 over pp 4 x vp 2: rank 0's first chunk only embeds, rank 3's second
        // only computes the loss.
        assert_eq!(
            split(true, true).stage_layers(6, 4, 2, false).unwrap(),
            vec![0, 1, 1, 1, 1, 1, 1, 0]
        );
        assert_eq!(
            split(true, false).stage_layers(7, 4, 1, false).unwrap(),
            vec![1, 2, 2, 2]
        );
        assert_eq!(
            split(false, true).stage_layers(7, 4, 1, true).unwrap(),
            vec![2, 2, 2, 1]
        );
        let e = split(true, true).stage_layers(94, 5, 1, false).unwrap_err();
        assert!(
            e.contains("--account-for-embedding-in-pipeline-split") && e.contains("96"),
            "{e}"
        );
    }

    #[test]
    fn first_and_last_ranks_take_their_counts() {
        let s = PipelineSplit {
            first: Some(6),
            last: Some(4),
            ..Default::default()
        };
        // 30 layers, pp 4: 6 | 10 | 10 | 4.
        assert_eq!(s.stage_layers(30, 4, 1, false).unwrap(), vec![6, 10, 10, 4]);
        // With 2 chunks each rank's layers halve, in loop order.
        assert_eq!(
            s.stage_layers(30, 4, 2, false).unwrap(),
            vec![3, 5, 5, 2, 3, 5, 5, 2]
        );
        assert!(s
            .stage_layers(31, 4, 1, false)
            .unwrap_err()
            .contains("middle"));
        assert!(s.stage_layers(30, 4, 2, true).unwrap_err().contains("V"));
        let both = PipelineSplit {
            embedding: true,
            ..s
        };
        assert!(both
            .stage_layers(30, 4, 1, false)
            .unwrap_err()
            .contains("cannot be combined"));
    }
}
