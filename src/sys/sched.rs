//! Real-time scheduling of the calling thread (the CPU-slice contention model): nix covers
//! CPU affinity but not the scheduling policy.

use super::SysError;

/// Makes the calling thread SCHED_FIFO at `priority` (1..=99).
pub fn set_fifo(priority: i32) -> Result<(), SysError> {
    let param = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: `param` is a valid, initialised sched_param that outlives the call; pid 0
    // names the calling thread, and the kernel only reads the struct.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
    if rc != 0 {
        return Err(SysError::last(
            "sched_setscheduler",
            format!("SCHED_FIFO, priority {priority}"),
        ));
    }
    Ok(())
}
