//! What this machine offers sbm's BPF programs, asked before choosing one of them over a
//! path without BPF (`sbm-send --timestamps auto`).

use std::path::Path;

/// The kfunc the tracer's program marks a write's skb with for TX timestamps (Linux 6.15+).
const TX_TSTAMP_KFUNC: &str = "bpf_sock_ops_enable_tx_tstamp";
const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

/// Whether BPF TX timestamping can run here (root, and the kernel has the kfunc): Err says
/// why not. The program itself loads on older kernels too (the kfunc is weak), and only
/// the connection would find the kernel refusing, too late to choose: hence this probe.
pub fn tx_timestamping() -> Result<(), String> {
    if !nix::unistd::geteuid().is_root() {
        return Err("not root: BPF programs need it".into());
    }
    tx_timestamping_in(Path::new(VMLINUX_BTF))
}

fn tx_timestamping_in(btf_path: &Path) -> Result<(), String> {
    let btf = std::fs::read(btf_path).map_err(|e| {
        format!(
            "the kernel's BTF ({}) cannot be read: {e}",
            btf_path.display()
        )
    })?;
    if btf_has_name(&btf, TX_TSTAMP_KFUNC) {
        Ok(())
    } else {
        Err(format!(
            "this kernel has no BPF TX timestamping: no {TX_TSTAMP_KFUNC} in its BTF (Linux 6.15+)"
        ))
    }
}

/// Whether `name` is one of the strings of a BTF blob: its string section holds every
/// type's and function's name, each following a NUL and ended by one.
fn btf_has_name(btf: &[u8], name: &str) -> bool {
    let name = name.as_bytes();
    btf.windows(name.len() + 2)
        .any(|w| w[0] == 0 && w[name.len() + 1] == 0 && &w[1..=name.len()] == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_counts_only_whole() {
        let blob = b"\0int\0bpf_sock_ops_enable_tx_tstamp\0xyz\0";
        assert!(btf_has_name(blob, "bpf_sock_ops_enable_tx_tstamp"));
        assert!(btf_has_name(blob, "int"));
        // A prefix or a suffix of a name is not the name.
        assert!(!btf_has_name(blob, "bpf_sock_ops_enable_tx"));
        assert!(!btf_has_name(blob, "sock_ops_enable_tx_tstamp"));
        assert!(!btf_has_name(
            b"\0bpf_sock_ops_enable_tx_tstamp_v2\0",
            TX_TSTAMP_KFUNC
        ));
    }

    #[test]
    fn a_kernel_without_the_kfunc_or_its_btf_is_said() {
        let dir = std::env::temp_dir().join(format!("sbm-probe-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let old = dir.join("vmlinux");
        std::fs::write(&old, b"\0bpf_setsockopt\0").unwrap();
        let why = tx_timestamping_in(&old).unwrap_err();
        assert!(why.contains("no bpf_sock_ops_enable_tx_tstamp"), "{why}");
        let why = tx_timestamping_in(&dir.join("absent")).unwrap_err();
        assert!(why.contains("cannot be read"), "{why}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
