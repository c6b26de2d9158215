//! The lock of a shared GPU in `serialize` mode (`PPLAN_CUDA_SHARE=serialize`): a ticket lock,
//! so the GPU goes to the workers in the order they asked for it (first ready, first served,
//! as `pplan predict --shared-gpu` assumes), and a waiting worker spins (then yields) instead
//! of sleeping, so a handover costs microseconds rather than a thread wake-up. Waiting
//! workers are at most the pipeline devices on the GPU, each with its own host thread.

use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug, Default)]
pub struct TicketLock {
    next: AtomicU64,
    serving: AtomicU64,
}

/// Held while a worker's action runs; dropping it serves the next ticket.
#[must_use]
pub struct TicketGuard<'a>(&'a TicketLock);

impl TicketLock {
    pub fn lock(&self) -> TicketGuard<'_> {
        let ticket = self.next.fetch_add(1, Ordering::Relaxed);
        let mut spins = 0u32;
        while self.serving.load(Ordering::Acquire) != ticket {
            back_off(&mut spins);
        }
        TicketGuard(self)
    }
}

impl Drop for TicketGuard<'_> {
    fn drop(&mut self) {
        self.0.serving.fetch_add(1, Ordering::Release);
    }
}

/// Spins (then yields) until `poll` returns `Some` or `deadline` passes.
pub fn spin_until<T>(
    deadline: std::time::Instant,
    mut poll: impl FnMut() -> Option<T>,
) -> Option<T> {
    let mut spins = 0u32;
    loop {
        if let Some(v) = poll() {
            return Some(v);
        }
        if std::time::Instant::now() >= deadline {
            return None;
        }
        back_off(&mut spins);
    }
}

/// One wait step: a spin hint for the first 4096 steps, then a yield of the thread.
fn back_off(spins: &mut u32) {
    if *spins < 1 << 12 {
        std::hint::spin_loop();
        *spins += 1;
    } else {
        std::thread::yield_now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    /// Mutual exclusion: 4 threads × 500 critical sections never overlap and all run.
    #[test]
    fn one_holder_at_a_time() {
        let lock = Arc::new(TicketLock::default());
        let inside = Arc::new(AtomicU64::new(0));
        let count = Arc::new(AtomicU64::new(0));
        let hs: Vec<_> = (0..4)
            .map(|_| {
                let (lock, inside, count) = (lock.clone(), inside.clone(), count.clone());
                std::thread::spawn(move || {
                    for _ in 0..500 {
                        let _g = lock.lock();
                        assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0);
                        count.fetch_add(1, Ordering::SeqCst);
                        inside.fetch_sub(1, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(count.load(Ordering::SeqCst), 2000);
    }

    /// First come, first served: while the main thread holds the lock, three threads take
    /// tickets one after another; they get the lock in that order.
    #[test]
    fn waiters_are_served_in_arrival_order() {
        let lock = Arc::new(TicketLock::default());
        let order = Arc::new(Mutex::new(Vec::new()));
        let g = lock.lock();
        let mut hs = Vec::new();
        for i in 0..3u64 {
            let (l, o) = (lock.clone(), order.clone());
            hs.push(std::thread::spawn(move || {
                let _g = l.lock();
                o.lock().unwrap().push(i);
            }));
            // Wait until thread i holds its ticket before starting the next one.
            let want = i + 2;
            spin_until(Instant::now() + Duration::from_secs(10), || {
                (lock.next.load(Ordering::SeqCst) == want).then_some(())
            })
            .expect("ticket taken");
        }
        drop(g);
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(*order.lock().unwrap(), vec![0, 1, 2]);
    }

    #[test]
    fn spin_until_returns_the_value_or_gives_up_at_the_deadline() {
        let mut n = 0;
        assert_eq!(
            spin_until(Instant::now() + Duration::from_secs(5), || {
                n += 1;
                (n == 10).then_some(n)
            }),
            Some(10)
        );
        let t = Instant::now();
        assert_eq!(
            spin_until(t + Duration::from_millis(20), || None::<()>),
            None
        );
        assert!(t.elapsed() >= Duration::from_millis(20));
    }
}
