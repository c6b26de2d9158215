//! The simulator's step-level work: data-parallel reductions, the optimizer step, blocking
//! sends and the tensor-parallel stream.

use pplan::schedule::generators::{generate, GenParams, ScheduleName};
use pplan::sim::{simulate, Costs, SimOptions, Stream, TpCommNs, UnitCosts};

fn unit(p: u32, v: u32, p2p_ns: u64) -> Costs {
    Costs::uniform(
        p * v,
        p,
        UnitCosts {
            forward_ns: 10 * v as u64,
            backward_ns: 20 * v as u64,
            p2p_ns,
            ..UnitCosts::default()
        },
    )
}

#[test]
fn reductions_then_optimizer_end_the_step() {
    // 1F1B, p = 2, m = 2, F = 10, B = 20, no p2p: compute ends at 70 (device 1) and 90
    // (device 0). Each device then reduces (5) and steps (3): makespan 90 + 5 + 3.
    let s = generate(ScheduleName::OneFOneB, GenParams::new(2, 2)).unwrap();
    let mut c = unit(2, 1, 0);
    c.grad_reduce_ns = vec![5, 5];
    c.optimizer_ns = vec![3, 3];
    let r = simulate(&s, &c, SimOptions::default()).unwrap();
    assert_eq!(r.makespan_ns, 98);
    let tl = r.timeline.unwrap();
    let dp: Vec<_> = tl
        .spans
        .iter()
        .filter(|x| x.stream == Stream::DataParallel)
        .map(|x| (x.device, x.start_ns, x.end_ns, x.name()))
        .collect();
    assert_eq!(
        dp,
        vec![
            (1, 70, 75, "1REDUCE_GRAD".to_string()),
            (0, 90, 95, "0REDUCE_GRAD".to_string())
        ]
    );
    // The optimizer counts as busy compute.
    assert_eq!(r.devices[0].busy_ns, 2 * 10 + 2 * 20 + 3);
}

#[test]
fn overlapped_reduction_starts_at_the_stage_last_backward() {
    // Interleaved, p = 2, v = 2, m = 2: stage 2 (device 0) finishes its backwards before the
    // device's last action, so with overlap its reduction starts earlier and the step is no
    // longer than without.
    let s = generate(
        ScheduleName::Interleaved1F1B,
        GenParams::new(2, 2).chunks(2),
    )
    .unwrap();
    let mut c = unit(2, 2, 0);
    c.grad_reduce_ns = vec![50; 4];
    let plain = simulate(&s, &c, SimOptions::default()).unwrap();
    c.overlap_grad_reduce = true;
    let overlapped = simulate(&s, &c, SimOptions::default()).unwrap();
    assert!(overlapped.makespan_ns < plain.makespan_ns);
    let compute_end = plain
        .timeline
        .as_ref()
        .unwrap()
        .spans
        .iter()
        .filter(|x| x.stream == Stream::Compute)
        .map(|x| x.end_ns)
        .max()
        .unwrap();
    // Without overlap the last device reduces both of its stages after its compute: 2 x 50.
    assert_eq!(plain.makespan_ns, compute_end + 100);
}

#[test]
fn blocking_sends_hold_the_sender() {
    let s = generate(ScheduleName::OneFOneB, GenParams::new(4, 8)).unwrap();
    let c = unit(4, 1, 7);
    let free = simulate(&s, &c, SimOptions::default()).unwrap();
    let mut cb = c.clone();
    cb.blocking_sends = true;
    let blocked = simulate(&s, &cb, SimOptions::default()).unwrap();
    assert!(blocked.makespan_ns > free.makespan_ns);
    // Busy time is compute only; the wait is idle.
    assert_eq!(blocked.devices[0].busy_ns, free.devices[0].busy_ns);
}

#[test]
fn tensor_parallel_spans_sit_inside_their_action() {
    for overlapped in [false, true] {
        tensor_parallel_spans_inside(overlapped);
    }
}

/// At the end of their action, or from its start when they are pipelined with its GEMMs.
fn tensor_parallel_spans_inside(overlapped: bool) {
    let s = generate(ScheduleName::GPipe, GenParams::new(2, 2)).unwrap();
    let mut c = unit(2, 1, 1);
    c.tensor_parallel = vec![
        TpCommNs {
            forward_ns: 4,
            backward_ns: 6,
            overlapped,
        };
        2
    ];
    let r = simulate(&s, &c, SimOptions::default()).unwrap();
    let plain = simulate(&s, &unit(2, 1, 1), SimOptions::default()).unwrap();
    assert_eq!(r.makespan_ns, plain.makespan_ns, "TP spans add no time");
    let tl = r.timeline.unwrap();
    let tp: Vec<_> = tl
        .spans
        .iter()
        .filter(|x| x.stream == Stream::TensorParallel)
        .collect();
    assert_eq!(tp.len(), 8);
    for span in tp {
        let host = tl
            .spans
            .iter()
            .find(|x| x.stream == Stream::Compute && x.action == span.action)
            .unwrap();
        assert!(host.start_ns <= span.start_ns && span.end_ns <= host.end_ns);
        if overlapped {
            assert_eq!(span.start_ns, host.start_ns);
        } else {
            assert_eq!(span.end_ns, host.end_ns);
        }
    }
}

#[test]
fn mismatched_step_vectors_are_rejected() {
    let s = generate(ScheduleName::OneFOneB, GenParams::new(2, 2)).unwrap();
    let mut c = unit(2, 1, 0);
    c.grad_reduce_ns = vec![1];
    let e = simulate(&s, &c, SimOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("grad_reduce_ns"), "{e}");
}

/// Bucketed, overlapped gradient reduction: with n buckets the reduction starts 1/n of the way
/// into the stage's last backward and ends no earlier than a bucket's reduction after it; with
/// one bucket it starts when that backward ends. A bucket vector of the wrong length is refused.
#[test]
fn bucketed_reduction_runs_under_the_last_backward() {
    let s = generate(ScheduleName::OneFOneB, GenParams::new(2, 2)).unwrap();
    let reduce_span = |buckets: Vec<u32>| {
        let mut c = unit(2, 1, 0);
        c.grad_reduce_ns = vec![400, 400];
        c.overlap_grad_reduce = true;
        c.grad_reduce_buckets = buckets;
        let r = simulate(&s, &c, SimOptions::default()).unwrap();
        let tl = r.timeline.unwrap();
        let last_b = |stage: u32| {
            tl.spans
                .iter()
                .filter(|x| x.stream == Stream::Compute && x.action.stage == stage)
                .map(|x| (x.start_ns, x.end_ns))
                .max_by_key(|&(_, e)| e)
                .unwrap()
        };
        let red = tl
            .spans
            .iter()
            .find(|x| x.stream == Stream::DataParallel && x.action.stage == 0)
            .map(|x| (x.start_ns, x.end_ns))
            .unwrap();
        (last_b(0), red, r.makespan_ns)
    };
    let ((b0, b1), (r0, r1), one) = reduce_span(vec![1, 1]);
    assert_eq!((r0, r1), (b1, b1 + 400), "one bucket: after the backward");
    let ((_, _), (q0, q1), four) = reduce_span(vec![4, 4]);
    let len = b1 - b0;
    assert_eq!(q0, b0 + len / 4, "first bucket ready a quarter in");
    assert!(q1 >= b1 + 100 && q1 < r1, "{q1}");
    assert!(four < one);
    let mut c = unit(2, 1, 0);
    c.grad_reduce_ns = vec![400, 400];
    c.grad_reduce_buckets = vec![2];
    let e = simulate(&s, &c, SimOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("grad_reduce_buckets"), "{e}");
}

#[test]
fn deferred_weight_gradients_run_at_the_flush_before_the_reduction() {
    // 1F1B, p = 2, m = 2, F = 10, B = 20: device 1 (the last stage) ends its program at 70,
    // device 0 at 90. Deferring 15 of stage 1's weight gradients fills device 1's flush:
    // 70..85, then its overlapped reduction (5) and optimizer step (3); device 0 still ends
    // the step at 90 + 5 + 3. Deferring 30 runs to 100 and the step ends at 108.
    let s = generate(ScheduleName::OneFOneB, GenParams::new(2, 2)).unwrap();
    let mut c = unit(2, 1, 0);
    c.grad_reduce_ns = vec![5, 5];
    c.optimizer_ns = vec![3, 3];
    c.overlap_grad_reduce = true;
    c.deferred_weight_grad_ns = vec![0, 15];
    let r = simulate(&s, &c, SimOptions::default()).unwrap();
    assert_eq!(r.makespan_ns, 98);
    c.deferred_weight_grad_ns = vec![0, 30];
    let r = simulate(&s, &c, SimOptions::default()).unwrap();
    assert_eq!(r.makespan_ns, 108);
    // The deferred work is compute (busy), shown as the stage's W; the reduction waits for it.
    assert_eq!(r.devices[1].busy_ns, 2 * 10 + 2 * 20 + 30 + 3);
    let tl = r.timeline.unwrap();
    let on_1: Vec<_> = tl
        .spans
        .iter()
        .filter(|x| x.device == 1 && x.start_ns >= 70)
        .map(|x| (x.stream, x.start_ns, x.end_ns, x.name()))
        .collect();
    assert_eq!(
        on_1,
        vec![
            (Stream::Compute, 70, 100, "1W0".to_string()),
            (Stream::DataParallel, 100, 105, "1REDUCE_GRAD".to_string()),
            (Stream::Optimizer, 105, 108, "OPTIMIZER_STEP".to_string()),
        ]
    );
    // Without overlap the same order holds.
    c.overlap_grad_reduce = false;
    assert_eq!(
        simulate(&s, &c, SimOptions::default()).unwrap().makespan_ns,
        108
    );
    // A vector of the wrong length is refused.
    c.deferred_weight_grad_ns = vec![1];
    assert!(simulate(&s, &c, SimOptions::default()).is_err());
}

/// `Costs::shared_gpu`: every device's compute, deferred weight gradients and optimizer step
/// take one GPU in turn, first ready first served. Without transfers the step is the sum of
/// all work; compute spans of different devices never overlap; the order follows readiness.
#[test]
fn devices_sharing_one_gpu_take_it_in_turn() {
    for (name, v) in [
        (ScheduleName::GPipe, 1),
        (ScheduleName::OneFOneB, 1),
        (ScheduleName::Interleaved1F1B, 2),
        (ScheduleName::ZbH1, 1),
    ] {
        for p in [2u32, 4] {
            let s = generate(name, GenParams::new(p, 8).chunks(v)).unwrap();
            let mut c = unit(p, v, 0);
            c.optimizer_ns = vec![7; p as usize];
            c.shared_gpu = true;
            let r = simulate(&s, &c, SimOptions::default()).unwrap();
            // 8 micro-batches x p devices x v chunks x (F 10 + B 20) + p optimizer steps.
            let work = 8 * p as u64 * v as u64 * 30 + 7 * p as u64;
            assert_eq!(r.makespan_ns, work, "{name:?} p={p}");
            let mut busy: Vec<(u64, u64)> = r
                .timeline
                .unwrap()
                .spans
                .iter()
                .filter(|x| matches!(x.stream, Stream::Compute | Stream::Optimizer))
                .map(|x| (x.start_ns, x.end_ns))
                .collect();
            busy.sort();
            for w in busy.windows(2) {
                assert!(w[1].0 >= w[0].1, "{name:?} p={p}: {w:?} overlap");
            }
            // Without sharing the same schedule is shorter.
            c.shared_gpu = false;
            let alone = simulate(&s, &c, SimOptions::default()).unwrap();
            assert!(alone.makespan_ns < work, "{name:?} p={p}");
        }
    }
    // First ready, first served: 1F1B on 2 devices, F = 10, B = 20, no p2p. Device 0 runs F0
    // (0-10); then device 1's F0 and device 0's F1 are both ready at 10: device 1 asked first
    // (it waited for its input), device 0 asks on finishing, so 1F0 runs 10-20, then 0F1.
    let s = generate(ScheduleName::OneFOneB, GenParams::new(2, 2)).unwrap();
    let mut c = unit(2, 1, 0);
    c.shared_gpu = true;
    let tl = simulate(&s, &c, SimOptions::default())
        .unwrap()
        .timeline
        .unwrap();
    let mut order: Vec<(u64, String)> = tl
        .spans
        .iter()
        .filter(|x| x.stream == Stream::Compute)
        .map(|x| (x.start_ns, x.name()))
        .collect();
    order.sort();
    let names: Vec<&str> = order.iter().map(|(_, n)| n.as_str()).collect();
    assert_eq!(names[..3], ["0F0", "1F0", "0F1"], "{order:?}");
}
