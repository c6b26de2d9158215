//! The runner's failure handling: a worker that fails on one device ends the run with a message
//! naming that device and action, and the other devices (blocked on it) do not hang.

mod common;

use common::*;
use pplan::schedule::generators::ScheduleName;
use pplan_exec::backend::{BackwardPart, DeviceWorker, ExecError, RunOptions, Span};
use pplan_exec::run::{run, RunConfig};
use std::time::Duration;

/// A CPU worker that fails when it reaches `stage`'s forward of micro-batch `mb`.
struct Failing {
    inner: Box<dyn DeviceWorker>,
    at: Option<(u32, u32)>,
    panic: bool,
}

impl DeviceWorker for Failing {
    fn device(&self) -> u32 {
        self.inner.device()
    }
    fn forward(&mut self, stage: u32, mb: u32, spans: &mut Vec<Span>) -> Result<(), ExecError> {
        if self.at == Some((stage, mb)) {
            if self.panic {
                panic!("injected panic");
            }
            return Err(ExecError::Backend("injected failure".into()));
        }
        self.inner.forward(stage, mb, spans)
    }
    fn backward(
        &mut self,
        s: u32,
        mb: u32,
        p: BackwardPart,
        spans: &mut Vec<Span>,
    ) -> Result<(), ExecError> {
        self.inner.backward(s, mb, p, spans)
    }
    fn optimizer_step(&mut self, spans: &mut Vec<Span>) -> Result<(), ExecError> {
        self.inner.optimizer_step(spans)
    }
    fn synchronize(&mut self) -> Result<(), ExecError> {
        self.inner.synchronize()
    }
    fn weights(&mut self) -> Result<Vec<(u32, Vec<f32>)>, ExecError> {
        self.inner.weights()
    }
    fn take_loss(&mut self) -> f64 {
        self.inner.take_loss()
    }
}

fn run_failing(device: u32, stage: u32, mb: u32, panic: bool) -> pplan_exec::run::RunError {
    let plan = plan(ScheduleName::OneFOneB, 4, 4, 1);
    let sch = plan.schedule_ir().unwrap();
    let workers: Vec<Box<dyn DeviceWorker>> =
        pplan_exec::cpu::workers(&plan, &RunOptions::default())
            .unwrap()
            .into_iter()
            .map(|w| {
                let at = (w.device() == device).then_some((stage, mb));
                Box::new(Failing {
                    inner: w,
                    at,
                    panic,
                }) as Box<dyn DeviceWorker>
            })
            .collect();
    let cfg = RunConfig {
        steps: 1,
        minibatches_per_pass: 1,
        // A guard only: the run must end on its own through the hang-ups, long before this.
        timeout: Some(Duration::from_secs(120)),
    };
    run(&sch, workers, &cfg).unwrap_err()
}

#[test]
fn a_failing_device_ends_the_run_and_is_named() {
    let e = run_failing(2, 2, 1, false);
    assert_eq!(e.device, 2);
    assert_eq!(e.action, "2F1");
    assert!(matches!(e.error, ExecError::Backend(_)), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("device 2") && msg.contains("2F1") && msg.contains("injected"),
        "{msg}"
    );
}

#[test]
fn a_panicking_device_ends_the_run_and_is_named() {
    let e = run_failing(1, 1, 0, true);
    assert_eq!(e.device, 1);
    assert!(
        e.to_string().contains("injected panic") && e.action.starts_with("1F0"),
        "{e}"
    );
}

/// A process of a multi-process launch runs only its own device's worker; the others are in
/// other processes. With no process behind device 1 (its worker dropped, hanging up its
/// channels), device 0 reports the hang-up of its peer instead of the runner refusing a
/// partial set of workers (it asserted one worker for every device before). A worker for a
/// device the schedule does not have is refused by name.
#[test]
fn a_process_runs_its_own_devices_only() {
    let two = plan(ScheduleName::OneFOneB, 2, 4, 1);
    let sch = two.schedule_ir().unwrap();
    let cfg = RunConfig {
        steps: 1,
        minibatches_per_pass: 1,
        timeout: Some(Duration::from_secs(120)),
    };
    let own: Vec<Box<dyn DeviceWorker>> = pplan_exec::cpu::workers(&two, &RunOptions::default())
        .unwrap()
        .into_iter()
        .filter(|w| w.device() == 0)
        .collect();
    assert_eq!(own.len(), 1);
    let e = run(&sch, own, &cfg).unwrap_err();
    assert_eq!(e.device, 0);
    assert!(matches!(e.error, ExecError::Peer { .. }), "{e}");

    let wider = plan(ScheduleName::OneFOneB, 4, 4, 1);
    let too_many = pplan_exec::cpu::workers(&wider, &RunOptions::default()).unwrap();
    let e = run(&sch, too_many, &cfg).unwrap_err();
    assert!(matches!(e.error, ExecError::Plan(_)), "{e}");
    assert!(e.to_string().contains("schedule has 2 device(s)"), "{e}");
    let e = run(&sch, Vec::new(), &cfg).unwrap_err();
    assert!(e.to_string().contains("no worker"), "{e}");
}
