//! Which CPUs the worker threads run on.
//!
//! Phones and many boards mix fast ("big", "prime") and slow ("little") cores. A matmul split
//! evenly over all of them waits for the slowest, so by default the workers run on the
//! performance cores only: the CPUs whose highest frequency (`cpufreq/cpuinfo_max_freq` in
//! sysfs) is above the lowest one among the CPUs this process may use ([`performance_cores`]).
//! Where every core has the same top frequency, or sysfs does not say, nothing is restricted.
//! A [`CpuSet`] given by the user (llama.cpp's `--cpu-mask` / `--cpu-range`) overrides the
//! choice.
//!
//! The set is applied with `sched_setaffinity` to the calling thread before the worker pool is
//! (re)built ([`crate::threads::configure`]); Linux threads inherit their creator's mask, so
//! every worker runs on the set. Elsewhere than Linux and Android the set is refused.

use std::path::Path;

use crate::{Error, Result};

/// A set of CPUs, by their kernel numbers (`cpuN` in sysfs), ascending, without repeats.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuSet(Vec<usize>);

/// CPU numbers accepted in a mask or a range (Linux's default `CONFIG_NR_CPUS` limit order).
const MAX_CPUS: usize = 1024;

impl CpuSet {
    /// The CPUs `cpus` (sorted and deduplicated); an error when empty or a number is too large.
    pub fn new(mut cpus: Vec<usize>) -> Result<CpuSet> {
        cpus.sort_unstable();
        cpus.dedup();
        match cpus.last() {
            None => Err(Error::InvalidInput("the CPU set is empty".into())),
            Some(&c) if c >= MAX_CPUS => {
                Err(Error::InvalidInput(format!("CPU {c} is out of range (at most {})", MAX_CPUS - 1)))
            }
            Some(_) => Ok(CpuSet(cpus)),
        }
    }

    /// A hexadecimal mask, bit `i` for CPU `i`, as llama.cpp's `--cpu-mask` (`0xF0`, `f0`,
    /// `0x1_0000_0000`: an optional `0x`, `_` separators allowed, any length).
    pub fn from_mask(mask: &str) -> Result<CpuSet> {
        let bad = || {
            Error::InvalidInput(format!("bad CPU mask {mask:?}: expected hexadecimal digits such as 0xF0"))
        };
        let t = mask.trim();
        let digits = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")).unwrap_or(t);
        let mut cpus = Vec::new();
        let mut bit = 0;
        for ch in digits.chars().rev().filter(|&c| c != '_') {
            let v = ch.to_digit(16).ok_or_else(bad)? as usize;
            cpus.extend((0..4).filter(|b| v >> b & 1 == 1).map(|b| bit + b));
            bit += 4;
        }
        if bit == 0 {
            return Err(bad());
        }
        CpuSet::new(cpus)
    }

    /// A range `lo-hi` (both included), as llama.cpp's `--cpu-range`, or a list of ranges and
    /// numbers as `taskset -c` takes them (`0-3,6`).
    pub fn from_list(list: &str) -> Result<CpuSet> {
        let bad = |part: &str| {
            Error::InvalidInput(format!(
                "bad CPU list {list:?} at {part:?}: expected numbers and ranges such as 4-7"
            ))
        };
        let mut cpus = Vec::new();
        for part in list.split(',').map(str::trim) {
            let num = |s: &str| s.trim().parse::<usize>().map_err(|_| bad(part));
            match part.split_once('-') {
                Some((lo, hi)) => {
                    let (lo, hi) = (num(lo)?, num(hi)?);
                    if lo > hi || hi >= MAX_CPUS {
                        return Err(bad(part));
                    }
                    cpus.extend(lo..=hi);
                }
                None => cpus.push(num(part)?),
            }
        }
        CpuSet::new(cpus)
    }

    /// The CPU numbers, ascending.
    pub fn cpus(&self) -> &[usize] {
        &self.0
    }

    /// Number of CPUs.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Always false: a set holds at least one CPU.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The CPUs of both sets.
    fn intersect(&self, other: &CpuSet) -> Option<CpuSet> {
        let v: Vec<usize> = self.0.iter().copied().filter(|c| other.0.contains(c)).collect();
        CpuSet::new(v).ok()
    }
}

impl std::fmt::Display for CpuSet {
    /// Ranges, as `taskset -c` lists them: `0-3,6`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut i = 0;
        while i < self.0.len() {
            let mut j = i;
            while j + 1 < self.0.len() && self.0[j + 1] == self.0[j] + 1 {
                j += 1;
            }
            let sep = if i == 0 { "" } else { "," };
            match j > i {
                true => write!(f, "{sep}{}-{}", self.0[i], self.0[j])?,
                false => write!(f, "{sep}{}", self.0[i])?,
            }
            i = j + 1;
        }
        Ok(())
    }
}

/// The performance cores among the CPUs this process may use: those whose top frequency is
/// above the lowest top frequency among them. `None` when all have the same top frequency, or
/// the frequencies or the allowed CPUs cannot be read (then no restriction is right).
pub fn performance_cores() -> Option<CpuSet> {
    performance_cores_in(Path::new("/sys/devices/system/cpu"), &allowed_cpus()?)
}

/// [`performance_cores`] reading `<root>/cpuN/cpufreq/cpuinfo_max_freq` for the CPUs of
/// `allowed` (a CPU whose file is missing or unreadable counts as unknown: then `None`).
pub fn performance_cores_in(root: &Path, allowed: &CpuSet) -> Option<CpuSet> {
    let freq = |cpu: usize| -> Option<u64> {
        let p = root.join(format!("cpu{cpu}/cpufreq/cpuinfo_max_freq"));
        std::fs::read_to_string(p).ok()?.trim().parse().ok()
    };
    let freqs: Vec<(usize, u64)> =
        allowed.cpus().iter().map(|&c| freq(c).map(|f| (c, f))).collect::<Option<_>>()?;
    let lowest = freqs.iter().map(|&(_, f)| f).min()?;
    let fast: Vec<usize> = freqs.iter().filter(|&&(_, f)| f > lowest).map(|&(c, _)| c).collect();
    if fast.is_empty() {
        return None;
    }
    allowed.intersect(&CpuSet::new(fast).ok()?)
}

/// The CPUs the calling thread may run on (`sched_getaffinity`); `None` where unknown.
pub fn allowed_cpus() -> Option<CpuSet> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        // SAFETY: an all-zero `cpu_set_t` is a valid (empty) set.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: `set` is a writable `cpu_set_t` of the size passed; pid 0 is this thread.
        let rc = unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
        if rc != 0 {
            return None;
        }
        let n = 8 * std::mem::size_of::<libc::cpu_set_t>();
        // SAFETY: `set` is initialised and `c` is below its capacity in bits.
        let cpus = (0..n).filter(|&c| unsafe { libc::CPU_ISSET(c, &set) }).collect();
        CpuSet::new(cpus).ok()
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    {
        None
    }
}

/// Restricts the calling thread (and the threads it creates from now on) to `set`.
pub fn pin_current_thread(set: &CpuSet) -> Result<()> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        // SAFETY: an all-zero `cpu_set_t` is a valid (empty) set.
        let mut mask: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        let capacity = 8 * std::mem::size_of::<libc::cpu_set_t>();
        for &c in set.cpus() {
            if c >= capacity {
                return Err(Error::InvalidInput(format!("CPU {c} is beyond this system's CPU set size")));
            }
            // SAFETY: `c` is below the set's capacity in bits (checked above).
            unsafe { libc::CPU_SET(c, &mut mask) };
        }
        // SAFETY: `mask` is an initialised `cpu_set_t` of the size passed; pid 0 is this thread.
        let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mask) };
        if rc != 0 {
            let e = std::io::Error::last_os_error();
            return Err(Error::InvalidInput(format!("cannot run on CPUs {set}: {e}")));
        }
        Ok(())
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    {
        Err(Error::InvalidInput(format!("choosing CPUs ({set}) is only supported on Linux and Android")))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn set(v: &[usize]) -> CpuSet {
        CpuSet::new(v.to_vec()).unwrap()
    }

    #[test]
    fn masks_as_llama_cpp_reads_them() {
        assert_eq!(CpuSet::from_mask("0xF0").unwrap(), set(&[4, 5, 6, 7]));
        assert_eq!(CpuSet::from_mask("f0").unwrap(), set(&[4, 5, 6, 7]));
        assert_eq!(CpuSet::from_mask("0x1").unwrap(), set(&[0]));
        assert_eq!(CpuSet::from_mask("0x1_0000_0001").unwrap(), set(&[0, 32]));
        for bad in ["", "0x", "0xG", "0x0", "-1", "12 34"] {
            assert!(CpuSet::from_mask(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn lists_and_ranges() {
        assert_eq!(CpuSet::from_list("4-7").unwrap(), set(&[4, 5, 6, 7]));
        assert_eq!(CpuSet::from_list("0-2, 6,1").unwrap(), set(&[0, 1, 2, 6]));
        for bad in ["", "7-4", "a", "1-", "0-5000", "1,,2"] {
            assert!(CpuSet::from_list(bad).is_err(), "{bad:?}");
        }
        assert_eq!(set(&[0, 1, 2, 3, 6, 8, 9]).to_string(), "0-3,6,8-9");
    }

    /// A fake sysfs with the given top frequency per CPU (`None`: no cpufreq file).
    fn sysfs(freqs: &[Option<u64>]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (c, f) in freqs.iter().enumerate() {
            let d = dir.path().join(format!("cpu{c}/cpufreq"));
            std::fs::create_dir_all(&d).unwrap();
            if let Some(f) = f {
                std::fs::write(d.join("cpuinfo_max_freq"), format!("{f}\n")).unwrap();
            }
        }
        dir
    }

    #[test]
    fn performance_cores_leave_out_the_slowest_cluster() {
        // A phone: four little cores, three big ones, one prime core.
        let little_big_prime =
            [1_800_000, 1_800_000, 1_800_000, 1_800_000, 2_400_000, 2_400_000, 2_400_000, 3_000_000];
        let root = sysfs(&little_big_prime.map(Some));
        let all = set(&[0, 1, 2, 3, 4, 5, 6, 7]);
        assert_eq!(performance_cores_in(root.path(), &all), Some(set(&[4, 5, 6, 7])));
        // Only the allowed CPUs count: among 0-5 the big ones are 4 and 5.
        assert_eq!(performance_cores_in(root.path(), &set(&[0, 1, 4, 5])), Some(set(&[4, 5])));
        // Allowed only little ones, or only big ones: all equal, no restriction.
        assert_eq!(performance_cores_in(root.path(), &set(&[0, 1])), None);
        assert_eq!(performance_cores_in(root.path(), &set(&[4, 5])), None);
    }

    #[test]
    fn no_restriction_when_cores_are_equal_or_unknown() {
        let same = sysfs(&[Some(3_000_000); 4]);
        assert_eq!(performance_cores_in(same.path(), &set(&[0, 1, 2, 3])), None);
        let partly = sysfs(&[Some(1_000_000), None, Some(2_000_000)]);
        assert_eq!(performance_cores_in(partly.path(), &set(&[0, 1, 2])), None);
    }

    #[cfg(any(target_os = "linux", target_os = "android"))]
    #[test]
    fn pinning_a_thread_restricts_it() {
        let allowed = allowed_cpus().expect("sched_getaffinity");
        let first = set(&allowed.cpus()[..1]);
        // A thread of its own, so that the test's other threads keep their mask.
        std::thread::spawn(move || {
            pin_current_thread(&first).unwrap();
            assert_eq!(allowed_cpus(), Some(first.clone()));
            // Threads created from now on inherit the mask.
            let child = std::thread::spawn(allowed_cpus).join().unwrap();
            assert_eq!(child, Some(first));
            // A CPU this machine does not have is a clear error.
            let e = pin_current_thread(&set(&[MAX_CPUS - 1])).unwrap_err();
            assert!(e.to_string().contains("cannot run on CPUs 1023"), "{e}");
        })
        .join()
        .unwrap();
    }
}
