//! How much memory the system has left, for the memory-pressure trigger of the
//! [`super::CacheManager`].

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// A source of the memory still available to this process.
pub trait SystemMonitor: Send + Sync + std::fmt::Debug {
    /// Bytes that can still be allocated before the system (or the process's cgroup) runs out,
    /// if known.
    fn available_bytes(&self) -> Option<u64>;
}

/// Reads `/proc/meminfo` (`MemAvailable`) and, when the process runs in a cgroup with a memory
/// limit, that limit minus the cgroup's usage; the smaller wins.
#[derive(Debug, Clone, Default)]
pub struct ProcMonitor;

impl SystemMonitor for ProcMonitor {
    fn available_bytes(&self) -> Option<u64> {
        let system = std::fs::read_to_string("/proc/meminfo").ok().and_then(|s| mem_available(&s));
        let cgroup = cgroup_available(Path::new("/sys/fs/cgroup"), "/proc/self/cgroup");
        match (system, cgroup) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// `MemAvailable` of a `/proc/meminfo` text, in bytes.
fn mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Limit minus usage of the process's cgroup (v2, or v1's memory controller), if it has a
/// limit.
fn cgroup_available(root: &Path, self_cgroup: &str) -> Option<u64> {
    let membership = std::fs::read_to_string(self_cgroup).ok()?;
    for line in membership.lines() {
        // v2: "0::/path"; v1: "N:memory:/path" (or a list of controllers containing memory).
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let rel = path.trim_start_matches('/');
        if controllers.is_empty() {
            let dir = root.join(rel);
            if let Some(avail) = limit_minus_usage(&dir.join("memory.max"), &dir.join("memory.current")) {
                return Some(avail);
            }
        } else if controllers.split(',').any(|c| c == "memory") {
            let dir = root.join("memory").join(rel);
            let limit = dir.join("memory.limit_in_bytes");
            if let Some(avail) = limit_minus_usage(&limit, &dir.join("memory.usage_in_bytes")) {
                return Some(avail);
            }
        }
    }
    None
}

/// `limit - usage` from two files holding one number each; `None` when there is no limit
/// (`max`, or v1's huge sentinel) or a file is missing.
fn limit_minus_usage(limit: &Path, usage: &Path) -> Option<u64> {
    let limit: u64 = std::fs::read_to_string(limit).ok()?.trim().parse().ok()?;
    if limit >= 1 << 60 {
        return None;
    }
    let usage: u64 = std::fs::read_to_string(usage).ok()?.trim().parse().ok()?;
    Some(limit.saturating_sub(usage))
}

/// A monitor reporting a value set by hand: for tests, and for embedders with their own view of
/// memory. Clones share the value.
#[derive(Debug, Clone)]
pub struct FixedMonitor(Arc<AtomicU64>);

impl FixedMonitor {
    /// A monitor reporting `bytes` available.
    pub fn new(bytes: u64) -> Self {
        Self(Arc::new(AtomicU64::new(bytes)))
    }

    /// Changes the reported value.
    pub fn set(&self, bytes: u64) {
        self.0.store(bytes, Ordering::Relaxed);
    }
}

impl SystemMonitor for FixedMonitor {
    fn available_bytes(&self) -> Option<u64> {
        Some(self.0.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_meminfo() {
        let s = "MemTotal:       24000000 kB\nMemFree:  100 kB\nMemAvailable:   1234 kB\n";
        assert_eq!(mem_available(s), Some(1234 * 1024));
        assert_eq!(mem_available("MemTotal: 1 kB\n"), None);
    }

    #[test]
    fn reads_cgroup_v2_and_v1_limits() {
        let dir = std::env::temp_dir().join(format!("ferrolm-cgroup-test-{}", std::process::id()));
        let v2 = dir.join("user.slice/app");
        std::fs::create_dir_all(&v2).expect("mkdir");
        std::fs::write(v2.join("memory.max"), "1000000\n").expect("write");
        std::fs::write(v2.join("memory.current"), "250000\n").expect("write");
        let cg = dir.join("self_cgroup");
        std::fs::write(&cg, "0::/user.slice/app\n").expect("write");
        let cg_s = cg.to_string_lossy().into_owned();
        assert_eq!(cgroup_available(&dir, &cg_s), Some(750000));
        std::fs::write(v2.join("memory.max"), "max\n").expect("write");
        assert_eq!(cgroup_available(&dir, &cg_s), None);

        let v1 = dir.join("memory/docker/x");
        std::fs::create_dir_all(&v1).expect("mkdir");
        std::fs::write(v1.join("memory.limit_in_bytes"), "2000\n").expect("write");
        std::fs::write(v1.join("memory.usage_in_bytes"), "500\n").expect("write");
        std::fs::write(&cg, "5:cpu,cpuacct:/docker/x\n4:memory:/docker/x\n").expect("write");
        assert_eq!(cgroup_available(&dir, &cg_s), Some(1500));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_real_monitor_reports_something_on_linux() {
        if cfg!(target_os = "linux") {
            let a = ProcMonitor.available_bytes().expect("MemAvailable");
            assert!(a > 0);
        }
    }
}
