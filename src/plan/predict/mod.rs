//! `pplan predict`: the time, throughput and memory of one training step of a
//! (model, hardware, t, p, d, b, schedule, v, recompute) configuration.
//!
//! The whole step is simulated, not computed by a closed formula: the cost model gives the
//! per-stage durations of every forward and backward (with tensor-parallel collectives inside),
//! the point-to-point transfers between stages, each stage's data-parallel gradient reduction
//! and each device's optimizer step; the discrete-event simulator runs the schedule's action
//! lists over one pipeline (all data-parallel replicas and tensor-parallel ranks behave alike)
//! and reports the makespan, the bubble and the peak memory per device.
//!
//! No IO; the caller loads the model and hardware.
//!
//! Files: [`request`] (the request, its checks, the prediction and errors), [`step`] (a
//! step's costs: the stage split chosen here, the costs asked of [`crate::cost::step`] in one
//! call and converted for the simulator), [`figures`] (the simulation and the figures
//! reported), [`balance`] (the balanced split), [`pipeline_split`] (Megatron-Core's split
//! rules), [`layout`] (Megatron-Core's layout strings), [`best`] (`--micro-batch auto`),
//! [`state`] (each stage's layers and each device's model state floor), [`mtp`] (the stage of
//! the multi-token prediction block), [`stages`] (each pipeline rank's layers, times and
//! memory: `--per-stage`).

pub mod balance;
pub mod best;
pub mod figures;
pub mod layout;
pub mod mtp;
pub mod pipeline_split;
pub mod request;
pub mod stages;
pub mod state;
pub mod step;

pub use balance::*;
pub use best::best_micro_batch_and_chunks;
pub use figures::{predict, prediction_from};
pub use layout::{parse_layout, Layout};
pub use pipeline_split::PipelineSplit;
pub use request::*;
pub use state::{model_state_floor, stage_layers_for};
pub use step::*;
