//! Collectives between the CPU backend's ranks: the threads that run the same pipeline device
//! for different data-parallel or context-parallel replicas.
//!
//! A [`Group`] of `n` members holds one channel per ordered pair of members. Every member of a
//! group issues the same collectives in the same order (they walk the same action list of the
//! same pipeline device), so the `k`-th message from member `i` to member `j` is the one `j`'s
//! `k`-th receive from `i` expects: channels are FIFO and sends never block. This is the
//! contract NCCL communicators have too; a member that breaks it (a peer thread that failed and
//! dropped its ends) turns into a [`CommError`] on the others instead of a hang.
//!
//! A sum over members ([`Group::all_reduce_sum`], a ring all-reduce as NCCL's) reduces each
//! chunk at one member and copies it to the others, so every member gets the same bits and
//! replicated weights stay identical.

use std::sync::mpsc::{channel, Receiver, Sender};

/// A peer of a group hung up (its thread failed); the message names the collective.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CommError(pub String);

/// One member's ends of a group's channels.
pub struct Group {
    /// What the group is for, in messages (`expert-parallel`, `context-parallel`, ...).
    name: &'static str,
    me: usize,
    /// `tx[j]`: to member `j` (None for `me`).
    tx: Vec<Option<Sender<Vec<f32>>>>,
    /// `rx[j]`: from member `j` (None for `me`).
    rx: Vec<Option<Receiver<Vec<f32>>>>,
}

impl Group {
    /// A group of one: every collective is the identity.
    pub fn solo(name: &'static str) -> Group {
        Group {
            name,
            me: 0,
            tx: vec![None],
            rx: vec![None],
        }
    }

    /// The `n` members' ends of one group, wired to each other; element `i` is member `i`'s.
    pub fn wired(name: &'static str, n: usize) -> Vec<Group> {
        let mut tx: Vec<Vec<Option<Sender<Vec<f32>>>>> =
            (0..n).map(|_| (0..n).map(|_| None).collect()).collect();
        let mut rx: Vec<Vec<Option<Receiver<Vec<f32>>>>> =
            (0..n).map(|_| (0..n).map(|_| None).collect()).collect();
        for (i, row) in tx.iter_mut().enumerate() {
            for (j, slot) in row.iter_mut().enumerate() {
                if i != j {
                    let (t, r) = channel();
                    *slot = Some(t);
                    rx[j][i] = Some(r);
                }
            }
        }
        tx.into_iter()
            .zip(rx)
            .enumerate()
            .map(|(me, (tx, rx))| Group { name, me, tx, rx })
            .collect()
    }

    pub fn size(&self) -> usize {
        self.tx.len()
    }

    pub fn rank(&self) -> usize {
        self.me
    }

    fn send(&self, to: usize, data: Vec<f32>, what: &str) -> Result<(), CommError> {
        let tx = self.tx[to].as_ref().expect("no channel to oneself");
        tx.send(data).map_err(|_| {
            CommError(format!(
                "{} rank {} hung up before the {what} from rank {}",
                self.name, to, self.me
            ))
        })
    }

    fn recv(&self, from: usize, what: &str) -> Result<Vec<f32>, CommError> {
        let rx = self.rx[from].as_ref().expect("no channel from oneself");
        rx.recv().map_err(|_| {
            CommError(format!(
                "{} rank {} hung up before its part of the {what} to rank {}",
                self.name, from, self.me
            ))
        })
    }

    /// Member `i` sends `parts[j]` to member `j`; returns what each member sent to this one,
    /// by sender (`parts[me]` stays local).
    pub fn all_to_all(&mut self, mut parts: Vec<Vec<f32>>) -> Result<Vec<Vec<f32>>, CommError> {
        let n = self.size();
        assert_eq!(parts.len(), n, "all_to_all: one part per member");
        let own = std::mem::take(&mut parts[self.me]);
        for (j, p) in parts.into_iter().enumerate() {
            if j != self.me {
                self.send(j, p, "all-to-all")?;
            }
        }
        (0..n)
            .map(|j| {
                if j == self.me {
                    Ok(own.clone())
                } else {
                    self.recv(j, "all-to-all")
                }
            })
            .collect()
    }

    /// Every member's `x`, by member.
    pub fn all_gather(&mut self, x: &[f32]) -> Result<Vec<Vec<f32>>, CommError> {
        self.all_to_all(vec![x.to_vec(); self.size()])
    }

    /// `x` becomes the sum over members of their `x`, as NCCL's ring all-reduce does it: `x` cut
    /// into `n` chunks, a reduce-scatter round the ring (`n − 1` steps, each member adding the
    /// chunk it receives to its own) and an all-gather (`n − 1` steps, each member copying the
    /// reduced chunk it receives), so each member sends `2 (n − 1) / n` of `x`. Each chunk is
    /// reduced in one order at one member and then copied, so every member ends with the same
    /// bits.
    pub fn all_reduce_sum(&mut self, x: &mut [f32]) -> Result<(), CommError> {
        let n = self.size();
        if n == 1 {
            return Ok(());
        }
        let len = x.len();
        let chunk = |c: usize| c * len / n..(c + 1) * len / n;
        let me = self.me;
        // Reduce-scatter: at step s send chunk me − s, add the received chunk me − s − 1.
        for s in 0..n - 1 {
            let got = self.shift(x[chunk((me + n - s) % n)].to_vec())?;
            let dst = &mut x[chunk((me + 2 * n - s - 1) % n)];
            assert_eq!(
                got.len(),
                dst.len(),
                "all_reduce_sum: members' lengths differ"
            );
            for (a, b) in dst.iter_mut().zip(&got) {
                *a += b;
            }
        }
        // Member me now holds chunk me + 1 reduced; all-gather: send chunk me + 1 − s, keep
        // the received chunk me − s.
        for s in 0..n - 1 {
            let got = self.shift(x[chunk((me + 1 + n - s) % n)].to_vec())?;
            x[chunk((me + n - s) % n)].copy_from_slice(&got);
        }
        Ok(())
    }

    /// One step of a ring: sends `x` to member `me + 1` and returns what member `me − 1` sent
    /// (both mod n).
    pub fn shift(&mut self, x: Vec<f32>) -> Result<Vec<f32>, CommError> {
        let n = self.size();
        if n == 1 {
            return Ok(x);
        }
        self.send((self.me + 1) % n, x, "ring step")?;
        self.recv((self.me + n - 1) % n, "ring step")
    }
}

/// The groups one CPU rank takes part in besides its pipeline links.
pub struct Comms {
    /// The ranks that hold the other parts of the same sequences (context parallelism).
    pub cp: Group,
    /// The ranks whose experts this rank's tokens are dispatched to (expert parallelism).
    pub ep: Group,
    /// Every replica of this pipeline device (data × context parallel): non-expert gradients
    /// are summed over it.
    pub dp: Group,
    /// The replicas holding the same experts (expert data parallelism): expert gradients are
    /// summed over it.
    pub edp: Group,
}

impl Comms {
    /// One rank alone: every collective is the identity.
    pub fn solo() -> Comms {
        Comms {
            cp: Group::solo("context-parallel"),
            ep: Group::solo("expert-parallel"),
            dp: Group::solo("data-parallel"),
            edp: Group::solo("expert-data-parallel"),
        }
    }
}

/// A replica layout the model cannot take, by the rule it breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplicaMismatch {
    /// Context parallelism cuts each sequence into `2·cp` equal chunks: `seq` must divide.
    CpChunks,
    /// Expert parallelism must divide the experts (there must be some) and the `dp·cp` ranks
    /// its groups are formed from.
    Ep,
}

/// Which rule `dp · cp` replicas with expert parallelism `ep` break on a model of `seq`
/// tokens a sequence and `experts` routed experts (0: dense), if any.
pub fn replica_mismatch(
    seq: u64,
    experts: u64,
    dp: u64,
    cp: u64,
    ep: u64,
) -> Option<ReplicaMismatch> {
    if cp > 1 && seq % (2 * cp) != 0 {
        return Some(ReplicaMismatch::CpChunks);
    }
    if ep > 1 && (experts == 0 || experts % ep != 0 || (dp * cp) % ep != 0) {
        return Some(ReplicaMismatch::Ep);
    }
    None
}

/// The groups of one pipeline device's `dp · cp` replicas, by replica `r = dp_rank · cp +
/// cp_rank` (Megatron-Core's rank order with tp = 1: context-parallel ranks next to each other,
/// then data-parallel ones): context-parallel groups of the `cp` consecutive replicas,
/// expert-parallel groups of `ep` consecutive ones (`ep` divides `dp · cp`), expert-data-parallel
/// groups of the replicas with the same `r mod ep`, and one data-parallel group of all.
pub fn replica_comms(dp: usize, cp: usize, ep: usize) -> Vec<Comms> {
    let replicas = dp * cp;
    assert!(
        ep >= 1 && replicas % ep == 0,
        "replica_comms: ep {ep} must divide dp·cp = {replicas}"
    );
    let mut cps = (0..dp).flat_map(|_| Group::wired("context-parallel", cp));
    let mut eps = (0..replicas / ep).flat_map(|_| Group::wired("expert-parallel", ep));
    let mut edps: Vec<Option<Group>> = (0..replicas).map(|_| None).collect();
    for q in 0..ep {
        for (i, g) in Group::wired("expert-data-parallel", replicas / ep)
            .into_iter()
            .enumerate()
        {
            edps[i * ep + q] = Some(g);
        }
    }
    Group::wired("data-parallel", replicas)
        .into_iter()
        .zip(edps)
        .map(|(dp, edp)| Comms {
            cp: cps.next().expect("one context-parallel end per replica"),
            ep: eps.next().expect("one expert-parallel end per replica"),
            dp,
            edp: edp.expect("one expert-data-parallel end per replica"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collectives_on_three_threads() {
        let groups = Group::wired("test", 3);
        let handles: Vec<_> = groups
            .into_iter()
            .map(|mut g| {
                std::thread::spawn(move || {
                    let me = g.rank() as f32;
                    let parts = (0..3).map(|j| vec![me * 10.0 + j as f32]).collect();
                    let got = g.all_to_all(parts).unwrap();
                    let mut x = vec![me, 1.0];
                    g.all_reduce_sum(&mut x).unwrap();
                    let ring = g.shift(vec![me]).unwrap();
                    (got, x, ring)
                })
            })
            .collect();
        for (i, h) in handles.into_iter().enumerate() {
            let (got, x, ring) = h.join().unwrap();
            let want: Vec<Vec<f32>> = (0..3).map(|j| vec![j as f32 * 10.0 + i as f32]).collect();
            assert_eq!(got, want);
            assert_eq!(x, vec![3.0, 3.0]);
            assert_eq!(ring, vec![((i + 2) % 3) as f32]);
        }
    }

    #[test]
    fn ring_all_reduce_sums_every_chunk_and_agrees_bit_for_bit() {
        for (n, len) in [(2, 5), (3, 7), (4, 7), (4, 2)] {
            let groups = Group::wired("test", n);
            let input = move |r: usize| -> Vec<f32> {
                (0..len)
                    .map(|i| 0.1 * (r * len + i) as f32 + 1.0 / 3.0)
                    .collect()
            };
            let handles: Vec<_> = groups
                .into_iter()
                .map(|mut g| {
                    std::thread::spawn(move || {
                        let mut x = input(g.rank());
                        g.all_reduce_sum(&mut x).unwrap();
                        x
                    })
                })
                .collect();
            let got: Vec<Vec<f32>> = handles.into_iter().map(|h| h.join().unwrap()).collect();
            for (i, &x) in got[0].iter().enumerate() {
                let want: f32 = (0..n).map(|r| input(r)[i]).sum();
                assert!((x - want).abs() < 1e-5, "n {n} element {i}: {x} vs {want}");
            }
            assert!(got.iter().all(|g| g == &got[0]), "n {n}: members differ");
        }
    }

    #[test]
    fn replicas_are_grouped_in_megatron_cores_rank_order() {
        // dp = 2, cp = 2, ep = 2: replicas 0..4 = (dp 0, cp 0), (0, 1), (1, 0), (1, 1).
        let c = replica_comms(2, 2, 2);
        let ranks: Vec<_> = c
            .iter()
            .map(|c| {
                (
                    c.cp.rank(),
                    c.cp.size(),
                    c.ep.rank(),
                    c.edp.rank(),
                    c.dp.rank(),
                )
            })
            .collect();
        assert_eq!(
            ranks,
            vec![
                (0, 2, 0, 0, 0),
                (1, 2, 1, 0, 1),
                (0, 2, 0, 1, 2),
                (1, 2, 1, 1, 3)
            ]
        );
        assert!(c
            .iter()
            .all(|c| c.ep.size() == 2 && c.edp.size() == 2 && c.dp.size() == 4));
    }

    #[test]
    fn a_peer_that_hangs_up_is_an_error_not_a_hang() {
        let mut groups = Group::wired("expert-parallel", 2);
        drop(groups.pop());
        let err = groups[0].all_gather(&[1.0]).unwrap_err();
        assert!(err.0.contains("expert-parallel rank 1 hung up"), "{err}");
    }
}
