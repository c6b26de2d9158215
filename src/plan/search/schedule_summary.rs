//! A schedule reduced to what the search needs of it: per device, the Pareto-maximal vectors of
//! activations held over the action order, from which a candidate's peak memory follows
//! exactly (as the simulator would report it) and a proven lower bound on its makespan.

use crate::schedule::ir::{Kind, Placement, Schedule};
use crate::sim::Costs;
use std::collections::BTreeSet;

/// What the search needs of one device's action order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceSummary {
    /// The stages this device holds, ascending.
    pub stages: Vec<u32>,
    /// Pareto-maximal held-activation vectors at the starts of `F` actions, flattened: each
    /// point is `2 * stages.len()` numbers: per local stage the micro-batches holding their full
    /// activations (F started, B/I not finished), then those holding only the weight-gradient
    /// share (I finished, W not).
    pub frontier: Vec<u32>,
    /// Per local stage, how many F, B, I and W actions the device runs.
    pub counts: Vec<[u64; 4]>,
    /// Of those, how many run without a partner ([`crate::sim::lone_actions`]).
    pub lone_counts: Vec<[u64; 4]>,
    /// The stage of the device's last B or I in program order.
    pub last_backward_stage: Option<u32>,
    /// Per local stage, the W actions after that last B or I.
    pub trailing_w: Vec<u64>,
}

/// A schedule reduced to what memory feasibility and the lower bound need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleSummary {
    pub num_stages: u32,
    pub placement: Placement,
    pub devices: Vec<DeviceSummary>,
}

impl ScheduleSummary {
    pub fn new(s: &Schedule) -> ScheduleSummary {
        let p = s.num_devices();
        let lone = crate::sim::lone_actions(s);
        let devices = s
            .devices
            .iter()
            .enumerate()
            .map(|(r, acts)| {
                let stages: Vec<u32> = (0..s.num_stages)
                    .filter(|&st| s.placement.device_of(st, p) == r as u32)
                    .collect();
                let k = stages.len();
                let mut local_of = vec![0usize; s.num_stages as usize];
                for (j, &st) in stages.iter().enumerate() {
                    local_of[st as usize] = j;
                }
                let local = |st: u32| local_of.get(st as usize).copied().unwrap_or(0);
                let mut held = vec![0u32; 2 * k];
                let mut points: BTreeSet<Vec<u32>> = BTreeSet::new();
                let mut counts = vec![[0u64; 4]; k];
                let mut lone_counts = vec![[0u64; 4]; k];
                let mut last_bi = None;
                let mut last_point: Vec<u32> = Vec::new();
                for (i, a) in acts.iter().enumerate() {
                    let j = local(a.stage);
                    counts[j][a.kind as usize] += 1;
                    if lone[r][i] {
                        lone_counts[j][a.kind as usize] += 1;
                    }
                    match a.kind {
                        Kind::F => {
                            held[j] += 1;
                            // Only local maxima matter: an F followed by another F is
                            // dominated by the next point. Steady states repeat the same
                            // point, so skip a repeat of the last one recorded.
                            let next_is_f = acts.get(i + 1).is_some_and(|n| n.kind == Kind::F);
                            if !next_is_f && last_point != held {
                                if !points.contains(&held[..]) {
                                    points.insert(held.clone());
                                }
                                last_point.clone_from(&held);
                            }
                        }
                        Kind::B => held[j] = held[j].saturating_sub(1),
                        Kind::I => {
                            held[j] = held[j].saturating_sub(1);
                            held[k + j] += 1;
                            last_bi = Some(i);
                        }
                        Kind::W => held[k + j] = held[k + j].saturating_sub(1),
                    }
                    if a.kind == Kind::B {
                        last_bi = Some(i);
                    }
                }
                let mut trailing_w = vec![0u64; k];
                let last_backward_stage = last_bi.map(|i| {
                    for a in &acts[i + 1..] {
                        if a.kind == Kind::W {
                            trailing_w[local(a.stage)] += 1;
                        }
                    }
                    acts[i].stage
                });
                // Keep the points no other point dominates; a dominator has a larger sum, so
                // visiting by decreasing sum only compares against kept points.
                let mut pts: Vec<Vec<u32>> = points.into_iter().collect();
                pts.sort_by(|a, b| {
                    let sa: u64 = a.iter().map(|&x| x as u64).sum();
                    let sb: u64 = b.iter().map(|&x| x as u64).sum();
                    sb.cmp(&sa).then(a.cmp(b))
                });
                let mut kept: Vec<Vec<u32>> = Vec::new();
                for q in pts {
                    if !kept.iter().any(|k| k.iter().zip(&q).all(|(x, y)| x >= y)) {
                        kept.push(q);
                    }
                }
                DeviceSummary {
                    stages,
                    frontier: kept.concat(),
                    counts,
                    lone_counts,
                    last_backward_stage,
                    trailing_w,
                }
            })
            .collect();
        ScheduleSummary {
            num_stages: s.num_stages,
            placement: s.placement,
            devices,
        }
    }

    /// Peak memory per device, exactly as [`simulate`](crate::sim::simulate) reports it for these costs: static
    /// bytes plus the largest sum of held activations at the start of any `F`.
    pub fn peak_memory_bytes(&self, costs: &Costs) -> Vec<u64> {
        self.devices
            .iter()
            .enumerate()
            .map(|(r, d)| {
                let k = d.stages.len();
                // Per local stage: a micro-batch's full activations, and the share an I
                // leaves until its W.
                let bytes = |j: usize| {
                    let c = &costs.stages[d.stages[j] as usize];
                    (
                        c.activation_bytes,
                        c.weight_grad_bytes.min(c.activation_bytes),
                    )
                };
                let held = if k == 0 {
                    0
                } else {
                    d.frontier
                        .chunks_exact(2 * k)
                        .map(|pt| {
                            (0..k).fold(0u64, |acc, j| {
                                let (full, part) = bytes(j);
                                acc.saturating_add(
                                    (pt[j] as u64)
                                        .saturating_mul(full)
                                        .saturating_add((pt[k + j] as u64).saturating_mul(part)),
                                )
                            })
                        })
                        .max()
                        .unwrap_or(0)
                };
                costs.static_bytes[r].saturating_add(held)
            })
            .collect()
    }

    /// A proven lower bound on the simulated makespan with these costs (docs/search.md):
    /// the maximum over devices of
    /// (a) the earliest start of its first action (the forward chain up to its lowest stage),
    ///     plus its compute and blocking sends, plus its gradient reductions (when not
    ///     overlapped) and optimizer step;
    /// (b) that earliest start, plus its work up to and including its last B/I, plus the
    ///     backward chain from that stage down to stage 0, plus stage 0's device's reductions
    ///     and optimizer step.
    pub fn lower_bound_ns(&self, costs: &Costs) -> u64 {
        let ns = self.num_stages as usize;
        let p = self.devices.len() as u32;
        let dev = |s: usize| self.placement.device_of(s as u32, p);
        // Transfer times the simulator charges: zero between stages on one device.
        let xf = |s: usize| {
            if s + 1 < ns && dev(s) != dev(s + 1) {
                costs.send_forward_ns[s]
            } else {
                0
            }
        };
        // Gradient from stage s+1 down to stage s.
        let xb = |s: usize| {
            if s + 1 < ns && dev(s) != dev(s + 1) {
                costs.send_backward_ns[s]
            } else {
                0
            }
        };
        let mut head = vec![0u64; ns];
        let mut chain = vec![0u64; ns];
        for s in 1..ns {
            let c = &costs.stages[s - 1];
            head[s] = head[s - 1] + c.forward_ns + xf(s - 1);
            chain[s] = chain[s - 1] + xb(s - 1) + c.backward_ns.min(c.backward_input_ns);
        }
        let post = |r: usize| -> u64 {
            let opt = costs.optimizer_ns.get(r).copied().unwrap_or(0);
            let red: u64 = if costs.overlap_grad_reduce || costs.grad_reduce_ns.is_empty() {
                0
            } else {
                self.devices[r]
                    .stages
                    .iter()
                    .map(|&s| costs.grad_reduce_ns[s as usize])
                    .sum()
            };
            opt + red
        };
        let post0 = post(dev(0) as usize);
        let mut lb = 0u64;
        for (r, d) in self.devices.iter().enumerate() {
            let Some(&first) = d.stages.first() else {
                continue;
            };
            let fill = head[first as usize];
            let mut occupied = 0u64;
            for (j, &s) in d.stages.iter().enumerate() {
                let s = s as usize;
                let c = &costs.stages[s];
                let [nf, nb, ni, nw] = d.counts[j];
                occupied += nf * c.forward_ns
                    + nb * c.backward_ns
                    + ni * c.backward_input_ns
                    + nw * c.backward_weight_ns;
                // A lone action's exposed all-to-all (weight gradients' left out: the bound
                // below subtracts trailing ones at their base cost).
                if let Some(e) = costs.unpaired_extra.get(s) {
                    let [lf, lb, li, _] = d.lone_counts[j];
                    occupied += lf * e.forward_ns + lb * e.backward_ns + li * e.backward_input_ns;
                }
                if costs.blocking_sends {
                    occupied += nf * xf(s);
                    if s > 0 {
                        occupied += (nb + ni) * xb(s - 1);
                    }
                }
            }
            lb = lb.max(fill + occupied + post(r));
            if let Some(sl) = d.last_backward_stage {
                let sl = sl as usize;
                let trailing: u64 = d
                    .stages
                    .iter()
                    .zip(&d.trailing_w)
                    .map(|(&s, &n)| n * costs.stages[s as usize].backward_weight_ns)
                    .sum();
                let own_send = if costs.blocking_sends && sl > 0 {
                    xb(sl - 1)
                } else {
                    0
                };
                let upto = occupied - trailing - own_send;
                lb = lb.max(fill + upto + chain[sl] + post0);
            }
        }
        lb
    }
}
