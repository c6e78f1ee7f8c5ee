//! The CPU-slice contention model (src/testbed/uml/slices.rs) deals what it says: a
//! CPU-bound thread pinned to the sliced CPU gets its share of the CPU, period after
//! period, and the slicer keeps its phase. A timing test: one at a time, needs root
//! (SCHED_FIFO).

mod common;

use std::time::{Duration, Instant};

use common::serial;
use nix::time::{clock_gettime, ClockId};
use sbm::testbed::uml::slices::{Slicer, Slices};

fn thread_cpu() -> Duration {
    Duration::from(clock_gettime(ClockId::CLOCK_THREAD_CPUTIME_ID).unwrap())
}

/// The share of `wall` a CPU-bound thread pinned to `cpu` got.
fn cpu_bound_share(cpu: usize, wall: Duration) -> f64 {
    std::thread::spawn(move || {
        let mut set = nix::sched::CpuSet::new();
        set.set(cpu).unwrap();
        nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set).unwrap();
        let (t0, c0) = (Instant::now(), thread_cpu());
        while t0.elapsed() < wall {
            std::hint::spin_loop();
        }
        (thread_cpu() - c0).as_secs_f64() / t0.elapsed().as_secs_f64()
    })
    .join()
    .unwrap()
}

#[test]
fn a_pinned_cpu_bound_thread_gets_its_share_of_every_period() {
    let _g = serial();
    assert!(
        nix::unistd::geteuid().is_root(),
        "SCHED_FIFO needs root: run `sudo cargo test --release`"
    );
    let cpu = std::thread::available_parallelism().map_or(1, usize::from) - 1;
    // Unsliced, the thread has the CPU to itself (the control).
    let free = cpu_bound_share(cpu, Duration::from_secs(1));
    assert!(free > 0.9, "an unsliced CPU gave only {free:.3}");
    for share in [35, 70] {
        let slicer = Slicer::start(Slices::new(share, Duration::from_millis(10), cpu).unwrap())
            .expect("the slicer takes the CPU");
        let got = cpu_bound_share(cpu, Duration::from_secs(2));
        let record = slicer.stop();
        let want = f64::from(share) / 100.0;
        assert!(
            (got - want).abs() < 0.05,
            "share {share} %: the pinned thread got {got:.3} of the CPU"
        );
        assert!(
            record.periods >= 190 && record.late_periods * 20 < record.periods,
            "share {share} %: {record:?}"
        );
    }
}
