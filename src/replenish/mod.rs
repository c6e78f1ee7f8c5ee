//! TCP_REPLENISH_TIME, in one place: the rule, who applies it, and the kernel's view of it.
//!
//! - [`rule`]: the report's §3 rule as pure decisions over tcp_info (threshold = drain
//!   rate × T, wake at half of it, the sub-MSS clause, the drain-rate estimators).
//! - [`gate`]: who decides when sbm-send writes in a run (the kernel's EPOLLOUT, or the
//!   emulation as a state machine whose actions the send loop carries out, or the kernel
//!   with a program setting its lowat), chosen once by [`setup`]; the run's [`PolicyReport`].
//! - [`program`]: the rule kept per socket by a program outside the loop (the BPF program,
//!   passed in as a [`SocketRule`] by whoever started it) and its view of a socket.
//! - [`kernel`]: the patched kernel's option — its number, setting it, and its own view
//!   of the rule (`struct tcp_replenish_info`).
//!
//! Below `send`, `report` and `bpf`, which use it; it uses only `sys`, `sockopt`, `ne` and
//! `sysinfo`.

pub mod gate;
pub mod kernel;
pub mod program;
pub mod rule;

pub use gate::{
    check_lowat_combination, setup, Action, EmulatedGate, Gate, GateError, PolicyReport,
    ReplenishConfig, ReplenishImpl,
};
pub use kernel::{
    detect_optname, kernel_replenish_info, optname_from_env, set_kernel_option, KernelReplenishInfo,
};
pub use program::{BpfSocketState, SocketRule};
pub use rule::{Decision, Observation, RateEstimator, Replenish, ThresholdTest};
