//! What the host is: kernel release, the sysctls that shape a TCP sender, privileges.
//! Recorded in every summary so that a result says what it ran on.

use std::collections::BTreeMap;

/// The sysctls that change what sbm measures (buffer limits, defaults, autocorking).
pub const RELEVANT_SYSCTLS: &[&str] = &[
    "net/core/wmem_max",
    "net/core/rmem_max",
    "net/core/default_qdisc",
    "net/ipv4/tcp_wmem",
    "net/ipv4/tcp_rmem",
    "net/ipv4/tcp_congestion_control",
    "net/ipv4/tcp_notsent_lowat",
    "net/ipv4/tcp_autocorking",
    "net/ipv4/tcp_limit_output_bytes",
    "net/ipv4/tcp_slow_start_after_idle",
    "net/ipv4/tcp_no_metrics_save",
    // sbm's lab kernel (kernel/patches): absent elsewhere, and then not recorded.
    "net/ipv4/tcp_replenish_submss",
    "net/ipv4/tcp_replenish_estimator",
    "net/ipv4/tcp_bbr_inflight_gain",
    "net/ipv4/tcp_pacing_catchup_us",
];

/// Reads one sysctl by its /proc/sys path, trimmed; None if the kernel has no such key.
pub fn sysctl(path: &str) -> Option<String> {
    std::fs::read_to_string(format!("/proc/sys/{path}"))
        .ok()
        .map(|s| s.split_whitespace().collect::<Vec<_>>().join(" "))
}

/// A sysctl holding one integer.
pub fn sysctl_u64(path: &str) -> Option<u64> {
    sysctl(path)?.parse().ok()
}

/// A sysctl setting written `NAME=VALUE` (a guest's `--sysctl`, a matrix config's
/// `guest_sysctls`).
pub fn parse_sysctl(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() && !k.contains(char::is_whitespace) => {
            Ok((k.to_string(), v.to_string()))
        }
        _ => Err(format!(
            "'{s}': expected NAME=VALUE, e.g. net.ipv4.tcp_replenish_submss=0"
        )),
    }
}

/// The relevant sysctls, keyed by their dotted names (`net.ipv4.tcp_wmem`).
pub fn relevant_sysctls() -> BTreeMap<String, String> {
    RELEVANT_SYSCTLS
        .iter()
        .filter_map(|p| sysctl(p).map(|v| (p.replace('/', "."), v)))
        .collect()
}

/// `uname -r`.
pub fn kernel_release() -> String {
    nix::sys::utsname::uname()
        .map(|u| u.release().to_string_lossy().into_owned())
        .unwrap_or_else(|_| "unknown".into())
}

/// Whether the process may use SO_SNDBUFFORCE / SO_RCVBUFFORCE (CAP_NET_ADMIN; root here).
pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// This host's boot id: equal boot ids mean shared clocks.
pub fn boot_id() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .map(|s| s.trim().to_string())
}
