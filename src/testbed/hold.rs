//! `sbm-testbed shape hold`: shaping that lives exactly as long as the one who asked for it.
//! It installs the bottleneck, says `shaped` on stdout, and removes it when its stdin
//! reaches end-of-file or it gets SIGINT, SIGTERM or SIGHUP. Run over ssh, the end of the
//! connection — the run finished, was interrupted, or the link died — is that end-of-file,
//! so a remote host is never left shaped.

use std::io::Read;
use std::os::fd::AsFd;

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};

use super::plan::Bottleneck;
use super::shape;

/// The line a holder prints once the bottleneck is installed.
pub const SHAPED: &str = "shaped";
/// The line it prints once the bottleneck is gone again.
pub const CLEARED: &str = "cleared";

/// Shapes `dev`, waits, clears. Exit status 0 when both worked.
pub fn hold(dev: &str, b: &Bottleneck, ingress: bool) -> Result<i32, String> {
    let mut set = SigSet::empty();
    for s in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        set.add(s);
    }
    set.thread_block()
        .map_err(|e| format!("blocking signals: {e}"))?;
    let signals = SignalFd::with_flags(&set, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)
        .map_err(|e| format!("signalfd: {e}"))?;
    for c in shape::apply_commands(dev, b, ingress, None) {
        if let Err(e) = c.run() {
            // Half a bottleneck is worse than none.
            let left = clear(dev, ingress);
            return Err(format!(
                "{e}{}",
                left.map_or(String::new(), |l| format!("; {l}"))
            ));
        }
    }
    crate::say!(
        "{SHAPED} {dev}{}: {} b/s, {} B queue",
        if ingress { " (ingress)" } else { "" },
        b.rate_bps,
        b.limit_bytes()
    );
    let stdin = std::io::stdin();
    let mut buf = [0u8; 512];
    loop {
        let mut fds = [
            PollFd::new(stdin.as_fd(), PollFlags::POLLIN),
            PollFd::new(signals.as_fd(), PollFlags::POLLIN),
        ];
        match poll(&mut fds, PollTimeout::NONE) {
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => {
                eprintln!("sbm-testbed: poll: {e}; clearing");
                break;
            }
            Ok(_) => {}
        }
        if fds[1].any().unwrap_or(false) {
            break;
        }
        if fds[0].any().unwrap_or(false) {
            // Anything read is ignored; end-of-file (or an error) is the signal to clear.
            match stdin.lock().read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
    }
    match clear(dev, ingress) {
        None => {
            crate::say!("{CLEARED} {dev}");
            Ok(0)
        }
        Some(e) => Err(e),
    }
}

/// Removes the bottleneck; the error names the manual fallback.
fn clear(dev: &str, ingress: bool) -> Option<String> {
    let failed: Vec<String> = shape::clear_commands(dev, ingress)
        .iter()
        .filter_map(|c| c.run().err().map(|e| e.to_string()))
        .collect();
    (!failed.is_empty()).then(|| {
        format!(
            "clearing {dev} failed ({}): run `testbed/shape clear {dev}{}` there",
            failed.join("; "),
            if ingress { " --ingress" } else { "" }
        )
    })
}
