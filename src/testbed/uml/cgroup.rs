//! A CPU quota for the whole guest: every host process of the UML kernel runs in one cgroup
//! whose CFS bandwidth limit plays the hypervisor taking CPU time from a vCPU. cgroup v2
//! (cpu.max) where the host's unified hierarchy has the cpu controller, else v1
//! (cpu.cfs_quota_us / cpu.cfs_period_us). The throttling counters prove the quota held.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("no cgroup cpu controller: neither /sys/fs/cgroup/cgroup.controllers lists cpu nor is a v1 cpu hierarchy mounted")]
    NoController,
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("CPU quota {0}% is outside 1..=100 (one UML guest runs on one CPU)")]
    BadQuota(u32),
    #[error("CPU period {0:?} is outside 1 ms..=1 s")]
    BadPeriod(Duration),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Version {
    V1,
    V2,
}

/// A quota: `pct` percent of one CPU in every `period`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quota {
    pub pct: u32,
    pub period: Duration,
}

impl Quota {
    pub fn new(pct: u32, period: Duration) -> Result<Quota, CgroupError> {
        if !(1..=100).contains(&pct) {
            return Err(CgroupError::BadQuota(pct));
        }
        if period < Duration::from_millis(1) || period > Duration::from_secs(1) {
            return Err(CgroupError::BadPeriod(period));
        }
        Ok(Quota { pct, period })
    }

    pub fn period_us(&self) -> u64 {
        self.period.as_micros() as u64
    }

    pub fn quota_us(&self) -> u64 {
        self.period_us() * u64::from(self.pct) / 100
    }
}

/// The counters a cgroup keeps about its CPU use and throttling, normalised to µs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuStat {
    pub nr_periods: u64,
    pub nr_throttled: u64,
    pub throttled_us: u64,
    /// CPU time used by the group (v2 usage_usec; v1 cpuacct.usage when mounted).
    pub usage_us: Option<u64>,
}

/// Parses cpu.stat of either version (v1 reports throttled_time in ns).
pub fn parse_cpu_stat(text: &str) -> CpuStat {
    let mut s = CpuStat::default();
    for line in text.lines() {
        let mut it = line.split_whitespace();
        let (Some(k), Some(v)) = (it.next(), it.next().and_then(|v| v.parse::<u64>().ok())) else {
            continue;
        };
        match k {
            "nr_periods" => s.nr_periods = v,
            "nr_throttled" => s.nr_throttled = v,
            "throttled_usec" => s.throttled_us = v,
            "throttled_time" => s.throttled_us = v / 1000,
            "usage_usec" => s.usage_us = Some(v),
            _ => {}
        }
    }
    s
}

/// One cgroup made for one guest; removed on drop.
#[derive(Debug)]
pub struct GuestCgroup {
    pub version: Version,
    pub dir: PathBuf,
    pub quota: Quota,
    /// v1 only: the cpuacct group beside it, when cpuacct is a separate hierarchy.
    acct_dir: Option<PathBuf>,
}

fn write(path: &Path, value: &str) -> Result<(), CgroupError> {
    fs::write(path, value).map_err(|source| CgroupError::Io {
        path: path.to_path_buf(),
        source,
    })
}

fn read(path: &Path) -> Result<String, CgroupError> {
    fs::read_to_string(path).map_err(|source| CgroupError::Io {
        path: path.to_path_buf(),
        source,
    })
}

const ROOT: &str = "/sys/fs/cgroup";

fn v2_has_cpu() -> bool {
    fs::read_to_string(Path::new(ROOT).join("cgroup.controllers"))
        .is_ok_and(|t| t.split_whitespace().any(|c| c == "cpu"))
}

fn v1_cpu_root() -> Option<PathBuf> {
    ["cpu", "cpu,cpuacct"]
        .iter()
        .map(|d| Path::new(ROOT).join(d))
        .find(|p| p.join("cpu.cfs_quota_us").exists())
}

impl GuestCgroup {
    /// Creates `name` with the quota set, in whichever hierarchy has the cpu controller.
    pub fn create(name: &str, quota: Quota) -> Result<GuestCgroup, CgroupError> {
        if v2_has_cpu() {
            let root = Path::new(ROOT);
            // The controller must be enabled for the root's children.
            let control = root.join("cgroup.subtree_control");
            if !read(&control)?.split_whitespace().any(|c| c == "cpu") {
                write(&control, "+cpu")?;
            }
            let dir = root.join(name);
            mkdir(&dir)?;
            let cg = GuestCgroup {
                version: Version::V2,
                dir,
                quota,
                acct_dir: None,
            };
            write(
                &cg.dir.join("cpu.max"),
                &format!("{} {}", quota.quota_us(), quota.period_us()),
            )?;
            return Ok(cg);
        }
        let cpu_root = v1_cpu_root().ok_or(CgroupError::NoController)?;
        let dir = cpu_root.join(name);
        mkdir(&dir)?;
        let acct_root = Path::new(ROOT).join("cpuacct");
        let acct_dir = (acct_root.join("cpuacct.usage").exists() && acct_root != cpu_root)
            .then(|| acct_root.join(name));
        let cg = GuestCgroup {
            version: Version::V1,
            dir,
            quota,
            acct_dir,
        };
        if let Some(a) = &cg.acct_dir {
            mkdir(a)?;
        }
        // Period first: the kernel checks quota against the current period.
        write(
            &cg.dir.join("cpu.cfs_period_us"),
            &quota.period_us().to_string(),
        )?;
        write(
            &cg.dir.join("cpu.cfs_quota_us"),
            &quota.quota_us().to_string(),
        )?;
        Ok(cg)
    }

    /// The files a process writes its PID into to join the group (all of them).
    pub fn procs_files(&self) -> Vec<PathBuf> {
        let mut v = vec![self.dir.join("cgroup.procs")];
        if let Some(a) = &self.acct_dir {
            v.push(a.join("cgroup.procs"));
        }
        v
    }

    pub fn stat(&self) -> Result<CpuStat, CgroupError> {
        let mut s = parse_cpu_stat(&read(&self.dir.join("cpu.stat"))?);
        if self.version == Version::V1 {
            let acct = self.acct_dir.as_ref().unwrap_or(&self.dir);
            s.usage_us = read(&acct.join("cpuacct.usage"))
                .ok()
                .and_then(|t| t.trim().parse::<u64>().ok())
                .map(|ns| ns / 1000);
        }
        Ok(s)
    }
}

fn mkdir(dir: &Path) -> Result<(), CgroupError> {
    match fs::create_dir(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(source) => Err(CgroupError::Io {
            path: dir.to_path_buf(),
            source,
        }),
    }
}

impl Drop for GuestCgroup {
    fn drop(&mut self) {
        // Only empty groups can be removed; the guest has exited by now.
        let _ = fs::remove_dir(&self.dir);
        if let Some(a) = &self.acct_dir {
            let _ = fs::remove_dir(a);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quota_in_microseconds() {
        let q = Quota::new(35, Duration::from_millis(10)).unwrap();
        assert_eq!((q.quota_us(), q.period_us()), (3500, 10_000));
        assert!(Quota::new(0, Duration::from_millis(10)).is_err());
        assert!(Quota::new(101, Duration::from_millis(10)).is_err());
        assert!(Quota::new(50, Duration::from_micros(500)).is_err());
    }

    #[test]
    fn both_versions_of_cpu_stat() {
        let v2 = "usage_usec 2500000\nuser_usec 1\nsystem_usec 2\nnr_periods 1000\nnr_throttled 640\nthrottled_usec 4200000\n";
        assert_eq!(
            parse_cpu_stat(v2),
            CpuStat {
                nr_periods: 1000,
                nr_throttled: 640,
                throttled_us: 4_200_000,
                usage_us: Some(2_500_000),
            }
        );
        let v1 = "nr_periods 50\nnr_throttled 7\nthrottled_time 123456789\n";
        assert_eq!(
            parse_cpu_stat(v1),
            CpuStat {
                nr_periods: 50,
                nr_throttled: 7,
                throttled_us: 123_456,
                usage_us: None,
            }
        );
    }
}
