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
//! Results that sum over members ([`Group::all_reduce_sum`]) add in member order on every
//! member, so every member gets the same bits and replicated weights stay identical.

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

    /// `x` becomes the sum over members of their `x`, added in member order.
    pub fn all_reduce_sum(&mut self, x: &mut [f32]) -> Result<(), CommError> {
        if self.size() == 1 {
            return Ok(());
        }
        let all = self.all_gather(x)?;
        x.fill(0.0);
        for part in &all {
            assert_eq!(
                part.len(),
                x.len(),
                "all_reduce_sum: members' lengths differ"
            );
            for (a, b) in x.iter_mut().zip(part) {
                *a += b;
            }
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
    fn a_peer_that_hangs_up_is_an_error_not_a_hang() {
        let mut groups = Group::wired("expert-parallel", 2);
        drop(groups.pop());
        let err = groups[0].all_gather(&[1.0]).unwrap_err();
        assert!(err.0.contains("expert-parallel rank 1 hung up"), "{err}");
    }
}
