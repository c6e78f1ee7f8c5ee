//! TCP_REPLENISH_TIME, in one place: the rule, who applies it, and the kernel's view of it.
//!
//! - [`rule`]: the report's §3 rule as pure decisions over tcp_info (threshold = drain
//!   rate × T, wake at half of it, the sub-MSS clause, the drain-rate estimators).
//! - [`gate`]: who decides when sbm-send writes in a run (the kernel's EPOLLOUT, or the
//!   emulation as a state machine whose actions the send loop carries out, or the kernel
//!   with a BPF program setting its lowat: `crate::bpf::replenish`), chosen once by
//!   [`setup`]; the run's [`PolicyReport`].
//! - [`kernel`]: the patched kernel's option — its number, setting it, and its own view
//!   of the rule (`struct tcp_replenish_info`).
//!
//! Below `send` and `report`, which both use it; it uses only `sys`, `sockopt`,
//! `tcpinfo`, `sysinfo` and (to know the BPF program runs) `bpf`.

pub mod gate;
pub mod kernel;
pub mod rule;

pub use gate::{
    check_lowat_combination, setup, Action, EmulatedGate, Gate, GateError, PolicyReport,
    ReplenishConfig, ReplenishImpl,
};
pub use kernel::{kernel_replenish_info, optname_from_env, KernelReplenishInfo};
pub use rule::{Decision, Observation, RateEstimator, Replenish, ThresholdTest};
