//! pplan's own Chrome traces (the simulator's prediction, the executor's measurement) in the
//! measured model: one [`RankTrace`] per device (`pid`), every event a "kernel" classified by
//! its name (the action's text form), compute actions also as [`ActionSpan`]s, and `args.step`
//! as step windows.

use super::timeline::{
    ActionSpan, Collective, Dim, Kernel, KernelClass, MeasuredError, RankTrace, StepWindow,
};
use crate::schedule::ir::{Action, CommKind, Kind, Token};
use std::collections::BTreeMap;

/// One complete event of a pplan trace.
#[derive(Debug, Clone, PartialEq)]
pub struct PplanEvent {
    /// Position in the file's event array.
    pub index: usize,
    pub name: String,
    pub start_ns: i64,
    pub dur_ns: i64,
    pub device: u32,
    pub stream: u32,
    pub stage: Option<u32>,
    pub microbatch: Option<u32>,
    pub kind: Option<String>,
    pub step: Option<u32>,
}

/// What a pplan event is: `0F1` compute, `SEND_F`/`RECV_B` pipeline transfers, `REDUCE_GRAD`
/// the data-parallel reduction, `UNSHARD`/`RESHARD` sharded-data-parallel gathers, `3TP_F1` a
/// tensor-parallel collective inside `3F1`, the optimizer step; the compute action, if any.
pub fn classify(name: &str) -> (KernelClass, Option<Action>) {
    match name.parse::<Token>() {
        Ok(Token::Compute(a)) => (KernelClass::OtherCompute, Some(a)),
        Ok(Token::Overlap(v)) => (KernelClass::OtherCompute, v.first().copied()),
        Ok(Token::Comm { kind, .. }) => {
            let class = match kind {
                CommKind::SendF
                | CommKind::RecvF
                | CommKind::SendB
                | CommKind::RecvB
                | CommKind::WaitSendF
                | CommKind::WaitSendB => KernelClass::Comm(Collective::SendRecv, Dim::Pp),
                CommKind::ReduceGrad | CommKind::WaitReduceGrad => {
                    KernelClass::Comm(Collective::AllReduce, Dim::Dp)
                }
                CommKind::Unshard => KernelClass::Comm(Collective::AllGather, Dim::Dp),
                CommKind::Reshard => KernelClass::Comm(Collective::ReduceScatter, Dim::Dp),
            };
            (class, None)
        }
        Err(_) => match name.split_once("TP_") {
            Some((stage, rest)) if format!("{stage}{rest}").parse::<Action>().is_ok() => {
                (KernelClass::Comm(Collective::AllReduce, Dim::Tp), None)
            }
            _ => (KernelClass::OtherCompute, None),
        },
    }
}

/// The action an event's `args` name (`stage`, `microbatch`, `kind`), if complete.
fn args_action(e: &PplanEvent) -> Option<Action> {
    let kind = match e.kind.as_deref()? {
        "F" => Kind::F,
        "B" => Kind::B,
        "I" => Kind::I,
        "W" => Kind::W,
        _ => return None,
    };
    Some(Action::new(e.stage?, kind, e.microbatch?))
}

/// Split a pplan trace into one [`RankTrace`] per device. If any event carries `args.step`,
/// every event must (a trace of several steps marks them all).
pub fn build(events: Vec<PplanEvent>, file: &str) -> Result<Vec<RankTrace>, MeasuredError> {
    let any_step = events.iter().any(|e| e.step.is_some());
    if let Some(e) = events.iter().find(|e| any_step && e.step.is_none()) {
        return Err(MeasuredError::new(
            file,
            format!(
                "traceEvents[{}] ('{}') has no args.step, but other events do; a trace of several steps must mark every event",
                e.index, e.name
            ),
        ));
    }
    // Step windows: the span of each step's events over all devices.
    let mut windows: BTreeMap<u32, (i64, i64)> = BTreeMap::new();
    for e in &events {
        let w = windows
            .entry(e.step.unwrap_or(0))
            .or_insert((i64::MAX, i64::MIN));
        w.0 = w.0.min(e.start_ns);
        w.1 = w.1.max(e.start_ns + e.dur_ns);
    }
    let step_index: BTreeMap<u32, u32> = windows
        .keys()
        .enumerate()
        .map(|(i, &s)| (s, i as u32))
        .collect();
    // A trace without `args.step` (a prediction) is one step: its window spans every device,
    // so the step time is the makespan, as the simulator reports it.
    let steps: Vec<StepWindow> = windows
        .iter()
        .map(|(&id, &(s, e))| StepWindow {
            id: id as u64,
            start_ns: s,
            end_ns: e,
        })
        .collect();
    let mut ranks: BTreeMap<u32, RankTrace> = BTreeMap::new();
    let mut name_ids: BTreeMap<(u32, String), u32> = BTreeMap::new();
    for e in events {
        let r = ranks.entry(e.device).or_insert_with(|| RankTrace {
            rank: e.device,
            file: file.to_string(),
            steps: steps.clone(),
            ..RankTrace::default()
        });
        let (class, action) = classify(&e.name);
        let step = step_index[&e.step.unwrap_or(0)];
        let end_ns = e.start_ns + e.dur_ns;
        // A transfer's args name the action it carries (`1RECV_B0` has kind B, stage 1):
        // only compute events are actions.
        let from_args = match class {
            KernelClass::Comm(..) => None,
            _ => args_action(&e),
        };
        if let Some(a) = from_args.or(action) {
            r.actions.push(ActionSpan {
                action: a,
                start_ns: e.start_ns,
                end_ns,
                step,
            });
        }
        let next = r.names.len() as u32;
        let name = *name_ids.entry((e.device, e.name.clone())).or_insert(next);
        if name == next {
            r.names.push(e.name);
        }
        r.kernels.push(Kernel {
            start_ns: e.start_ns,
            end_ns,
            stream: e.stream,
            class,
            name,
            step,
            group_size: None,
        });
    }
    let mut out: Vec<RankTrace> = ranks.into_values().collect();
    for r in &mut out {
        r.kernels
            .sort_by_key(|k| (k.start_ns, k.end_ns, k.stream, k.name));
        r.actions.sort_by_key(|a| (a.start_ns, a.end_ns, a.action));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(name: &str, start: i64, dur: i64, device: u32, step: Option<u32>) -> PplanEvent {
        PplanEvent {
            index: 0,
            name: name.into(),
            start_ns: start,
            dur_ns: dur,
            device,
            stream: 0,
            stage: None,
            microbatch: None,
            kind: None,
            step,
        }
    }

    #[test]
    fn classifies_pplan_names() {
        assert_eq!(classify("0F1").1, Some(Action::new(0, Kind::F, 1)));
        assert_eq!(
            classify("1SEND_F0").0,
            KernelClass::Comm(Collective::SendRecv, Dim::Pp)
        );
        assert_eq!(
            classify("0REDUCE_GRAD").0,
            KernelClass::Comm(Collective::AllReduce, Dim::Dp)
        );
        assert_eq!(
            classify("3TP_F1").0,
            KernelClass::Comm(Collective::AllReduce, Dim::Tp)
        );
        assert_eq!(
            classify("OPTIMIZER_STEP"),
            (KernelClass::OtherCompute, None)
        );
    }

    #[test]
    fn transfers_are_not_actions() {
        // The executor's receive on device 0 carries the action it belongs to (stage 1).
        let mut recv = ev("0RECV_B0", 5, 1, 0, None);
        recv.stage = Some(1);
        recv.microbatch = Some(0);
        recv.kind = Some("B".into());
        let r = build(vec![ev("0F0", 0, 5, 0, None), recv], "m.json").unwrap();
        assert_eq!(r[0].actions.len(), 1);
        assert_eq!(r[0].actions[0].action, Action::new(0, Kind::F, 0));
        assert_eq!(r[0].kernels.len(), 2);
    }

    #[test]
    fn splits_devices_and_steps() {
        let r = build(
            vec![
                ev("0F0", 0, 10, 0, Some(0)),
                ev("1F0", 10, 10, 1, Some(0)),
                ev("0F0", 100, 10, 0, Some(1)),
            ],
            "m.json",
        )
        .unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].steps.len(), 2);
        assert_eq!((r[0].steps[0].start_ns, r[0].steps[0].end_ns), (0, 20));
        assert_eq!(r[0].actions.len(), 2);
        assert_eq!(r[0].names, vec!["0F0".to_string()]);
        assert_eq!(r[0].kernels[1].step, 1);
        let e = build(
            vec![ev("0F0", 0, 1, 0, Some(0)), ev("0F1", 1, 1, 0, None)],
            "m.json",
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("traceEvents[0] ('0F1') has no args.step"),
            "{e}"
        );
    }
}
