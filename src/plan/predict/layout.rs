//! Megatron-Core's pipeline layout strings (`--pipeline-model-parallel-layout`, pplan's
//! `--pipeline-layout`): which layers each of the p·v stages holds, written out, e.g.
//! `Et*3|(t*4|)*30t*3L` (`E` the embedding, `t` a transformer layer, `m` a multi-token
//! prediction layer, `L` the loss, `|` between stages in stage order; `x*n` and `(...)*n`
//! repeat; commas are cosmetic). The grammar of `PipelineParallelLayerLayout.parse_str_to_list`
//! and the checks of its `validate_layer_layout` (megatron/core/transformer/
//! pipeline_parallel_layer_layout.py at d98e8a6): the embedding once, the first layer, in the
//! first stage; the loss once, the last layer, in the last stage; as many multi-token
//! prediction layers as the model trains, all in one stage, after every transformer layer, in
//! the last virtual stage of its pipeline rank (the last stage, or a stage of its own before
//! it: Megatron-Core's "standalone" MTP). Pure; no IO.

/// A parsed layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// Transformer layers of each stage, in stage order.
    pub layers: Vec<u32>,
    /// Stages that hold the embedding (`E`), the loss (`L`) and multi-token prediction layers
    /// (`m`, one entry per layer).
    pub embedding: Vec<usize>,
    pub loss: Vec<usize>,
    pub mtp: Vec<usize>,
}

/// Parse a layout string (see the module docs). The error says where and what.
pub fn parse_layout(s: &str) -> Result<Layout, String> {
    let mut text: String = s
        .chars()
        .filter(|&c| c != ',' && !c.is_whitespace())
        .collect();
    if text.is_empty() {
        return Err("the layout is empty".into());
    }
    // Unroll `(group)*n`, innermost first, then `x*n`.
    let repeat = |text: &str, open: usize, close: usize| -> Result<(String, usize), String> {
        let rest = &text[close + 1..];
        let Some(digits) = rest.strip_prefix('*') else {
            return Err(format!("'(' at {open} without '*n' after its ')'"));
        };
        let len = digits.chars().take_while(char::is_ascii_digit).count();
        let n: usize = digits[..len]
            .parse()
            .map_err(|_| format!("'*' without a count at {}", close + 1))?;
        if n > 100_000 {
            return Err(format!("repeat count {n} is too large"));
        }
        Ok((text[open + 1..close].repeat(n), close + 2 + len))
    };
    while let Some(close) = text.find(')') {
        let open = text[..close]
            .rfind('(')
            .ok_or_else(|| format!("')' at {close} without '('"))?;
        let (unrolled, end) = repeat(&text, open, close)?;
        text = format!("{}{}{}", &text[..open], unrolled, &text[end..]);
        if text.len() > 10_000_000 {
            return Err("the unrolled layout is too long".into());
        }
    }
    let mut out = Layout {
        layers: vec![0],
        embedding: Vec::new(),
        loss: Vec::new(),
        mtp: Vec::new(),
    };
    let mut chars = text.chars().peekable();
    let mut last: Option<char> = None;
    // The layers in order (`flatten_layout`): the embedding first, the loss last, no
    // transformer layer after a multi-token prediction layer.
    let mut seen_layer = false;
    while let Some(c) = chars.next() {
        let stage = out.layers.len() - 1;
        if matches!(c, 't' | 'm' | 'E' | 'L') {
            if c == 'E' && seen_layer {
                return Err("the embedding 'E' must be the first layer".into());
            }
            if !out.loss.is_empty() {
                return Err(format!(
                    "'{c}' after the loss 'L': the loss must be the last layer"
                ));
            }
            if c == 't' && !out.mtp.is_empty() {
                return Err("'t' after 'm': Megatron-Core places every transformer layer before the multi-token prediction layers".into());
            }
            seen_layer = true;
        }
        match c {
            '|' => {
                out.layers.push(0);
                last = None;
            }
            'E' => {
                out.embedding.push(stage);
                last = Some(c);
            }
            'L' => {
                out.loss.push(stage);
                last = Some(c);
            }
            'm' => {
                out.mtp.push(stage);
                last = Some(c);
            }
            't' => {
                out.layers[stage] += 1;
                last = Some('t');
            }
            '*' => {
                let mut digits = String::new();
                while let Some(d) = chars.peek().filter(|d| d.is_ascii_digit()) {
                    digits.push(*d);
                    chars.next();
                }
                let n: u32 = digits
                    .parse()
                    .map_err(|_| "'*' without a count".to_string())?;
                match last {
                    Some('t') => out.layers[stage] = out.layers[stage] - 1 + n,
                    Some('m') => {
                        out.mtp.pop();
                        out.mtp.extend(std::iter::repeat_n(stage, n as usize));
                    }
                    _ => return Err(format!("'*{n}' repeats something other than 't' or 'm'")),
                }
            }
            '(' | ')' => return Err("unbalanced parentheses".into()),
            other => {
                return Err(format!(
                    "layer type '{other}' is not in Megatron-Core's layouts (valid: E embedding, t transformer layer, m multi-token prediction layer, L loss, | between stages)"
                ))
            }
        }
    }
    Ok(out)
}

impl Layout {
    /// Check the layout against a model of `layers` transformer layers and `mtp_layers`
    /// multi-token prediction layers run on `pp` pipeline ranks with `v` chunks each
    /// (Megatron-Core's `validate_layer_layout`). The error names the flag and what holds.
    pub fn check(&self, layers: u32, mtp_layers: u32, pp: u64, v: u64) -> Result<(), String> {
        let flag = "--pipeline-layout";
        let stages = self.layers.len() as u64;
        let last = self.layers.len() - 1;
        if stages != pp * v {
            return Err(format!(
                "{flag} has {stages} stages, but --pp {pp} x --chunks {v} = {}; valid: a layout of {} stages, or --pp and --chunks whose product is {stages}",
                pp * v,
                pp * v
            ));
        }
        let total: u64 = self.layers.iter().map(|&x| x as u64).sum();
        if total != layers as u64 {
            return Err(format!(
                "{flag} places {total} transformer layers ('t'), but the model has {layers}"
            ));
        }
        if self.embedding != [0] {
            return Err(format!(
                "{flag} must hold the embedding 'E' once, in the first stage (it has it in stages {:?})",
                self.embedding
            ));
        }
        if self.loss != [last] {
            return Err(format!(
                "{flag} must hold the loss 'L' once, in the last stage ({last}; it has it in stages {:?})",
                self.loss
            ));
        }
        if self.mtp.len() as u32 != mtp_layers {
            return Err(format!(
                "{flag} places {} multi-token prediction layers ('m'), but the model has {mtp_layers}{}",
                self.mtp.len(),
                if mtp_layers == 0 {
                    " (set --mtp-num-layers)".to_string()
                } else {
                    format!("; valid: 'm' written {mtp_layers} times in one stage, or --mtp-num-layers {}", self.mtp.len())
                }
            ));
        }
        if let Some(s) = self.mtp_stage() {
            if self.mtp.iter().any(|&x| x != s) {
                return Err(format!(
                    "{flag} places multi-token prediction layers in stages {:?}: Megatron-Core builds them all in one stage",
                    self.mtp
                ));
            }
            // A stage's virtual index is s / pp: the MTP block in a rank's last virtual stage.
            let first_allowed = (v - 1) * pp;
            if (s as u64) < first_allowed {
                return Err(format!(
                    "{flag} places the multi-token prediction layers in stage {s}, not in the last virtual stage of its rank (stages {first_allowed} to {last} with --pp {pp} x --chunks {v}), as Megatron-Core requires"
                ));
            }
        }
        Ok(())
    }

    /// The stage that holds the multi-token prediction layers, if any.
    pub fn mtp_stage(&self) -> Option<usize> {
        self.mtp.first().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_parse_and_check_as_megatron_core_does() {
        // DeepSeek-V3's layout in Megatron-Bridge's B200 recipe: 61 layers and one MTP layer
        // over PP 8 x VP 2 = 16 stages.
        let l = parse_layout("Et*4|(t*4|)*14tmL").unwrap();
        assert_eq!(l.layers.len(), 16);
        assert_eq!(l.layers.iter().sum::<u32>(), 61);
        assert_eq!((l.layers[0], l.layers[15]), (4, 1));
        assert_eq!(
            (l.embedding.clone(), l.loss.clone(), l.mtp.clone()),
            (vec![0], vec![15], vec![15])
        );
        assert!(l.check(61, 1, 8, 2).is_ok());
        assert!(l
            .check(61, 0, 8, 2)
            .unwrap_err()
            .contains("--mtp-num-layers"));
        assert!(l.check(61, 1, 4, 2).unwrap_err().contains("16 stages"));
        assert!(l.check(60, 1, 8, 2).unwrap_err().contains("61"));
        let wrong = parse_layout("|EtL").unwrap();
        assert!(wrong.check(1, 0, 2, 1).unwrap_err().contains("first stage"));
        assert!(parse_layout("Et*2m*2|L").unwrap().mtp.len() == 2);
        // Megatron-Bridge's PP 4 x VP 4 layout for DeepSeek-V3 with its MTP layer in the last
        // stage, and a standalone MTP stage before the loss's own.
        let bridge = parse_layout("Et*3|(t*4|)*13t*3|t*3mL").unwrap();
        assert_eq!((bridge.mtp_stage(), bridge.layers.len()), (Some(15), 16));
        assert!(bridge.check(61, 1, 4, 4).is_ok());
        let standalone = parse_layout("Et*3|t*3|tm|L").unwrap();
        assert_eq!(standalone.mtp_stage(), Some(2));
        assert!(standalone.check(7, 1, 4, 1).is_ok());
        // Not in a rank's last virtual stage (stages 4..7 with p 4, v 2), in two stages, a
        // layer after 'm', anything after 'L', the embedding not first.
        let early = parse_layout("Et|tm||||||L").unwrap();
        assert!(early
            .check(2, 1, 4, 2)
            .unwrap_err()
            .contains("last virtual stage"));
        let split = parse_layout("Et|m|mL").unwrap();
        assert!(split.check(1, 2, 3, 1).unwrap_err().contains("one stage"));
        assert!(parse_layout("Etmt|L").unwrap_err().contains("before"));
        assert!(parse_layout("EtLm").unwrap_err().contains("last layer"));
        assert!(parse_layout("tE|L").unwrap_err().contains("first layer"));
        assert!(parse_layout("Etx|L").unwrap_err().contains("'x'"));
        assert!(parse_layout("").is_err());
    }
}
