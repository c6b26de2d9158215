//! `pplan predict --per-stage`: the table of each pipeline rank's layers, times and memory
//! (`plan::predict::stages`).

use pplan::plan::predict::stages::RankFigures;

/// The table after predict's own lines: a row per pipeline rank.
pub(crate) fn print_rank_table(ranks: &[RankFigures], show_experts: bool) {
    let gb = |b: u64| b as f64 / 1e9;
    println!();
    println!(
        "per stage (each pipeline rank at its own peak; ms for one micro-batch, memory in GB):"
    );
    let experts_head = if show_experts { "  expert B" } else { "" };
    println!(
        "{:>4} {:<10} {:<10} {:>6} {:>8} {:>8} {:>8}{experts_head} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}",
        "rank", "role", "stages", "layers", "fwd ms", "bwd ms", "params B", "weights", "grads", "optim", "activ", "overh", "peak"
    );
    for r in ranks {
        let stages: Vec<String> = r.stages.iter().map(|s| s.to_string()).collect();
        let m = &r.memory_breakdown;
        let experts = if show_experts {
            format!(" {:>9.2}", r.expert_params as f64 / 1e9)
        } else {
            String::new()
        };
        println!(
            "{:>4} {:<10} {:<10} {:>6} {:>8.2} {:>8.2} {:>8.2}{experts} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>8.1}",
            r.device,
            r.role,
            stages.join(","),
            r.layers,
            r.forward_ms,
            r.backward_ms,
            r.params as f64 / 1e9,
            gb(m.weights),
            gb(m.gradients),
            gb(m.optimizer),
            gb(m.activations),
            gb(m.overheads),
            gb(r.peak_memory_bytes)
        );
    }
}
