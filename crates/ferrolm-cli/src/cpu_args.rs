//! `--cpu-mask` / `--cpu-range`: which CPUs the worker threads run on (llama.cpp's flags).

use anyhow::Context;
use ferrolm::threads::affinity::CpuSet;

/// The CPUs to run on. Without them, the performance cores of a CPU that mixes fast and slow
/// cores (a phone's big cores), else all cores.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct CpuArgs {
    /// Run on these CPUs: a hexadecimal mask, bit i for CPU i (0xF0: CPUs 4-7). Default: the
    /// performance cores where fast and slow cores are mixed (highest cpufreq maximum), else
    /// all cores.
    #[arg(short = 'C', long = "cpu-mask", conflicts_with = "cpu_range")]
    pub cpu_mask: Option<String>,
    /// Run on these CPUs: a range lo-hi, or a list as taskset -c takes it (0-3,6).
    #[arg(long = "cpu-range")]
    pub cpu_range: Option<String>,
}

impl CpuArgs {
    /// The set asked for, if any.
    pub fn set(&self) -> anyhow::Result<Option<CpuSet>> {
        match (&self.cpu_mask, &self.cpu_range) {
            (Some(m), _) => CpuSet::from_mask(m).map(Some).context("--cpu-mask"),
            (None, Some(r)) => CpuSet::from_list(r).map(Some).context("--cpu-range"),
            (None, None) => Ok(None),
        }
    }

    /// Chooses the CPUs and sizes the worker pool (`threads`: `None` for one per CPU used).
    pub fn apply(&self, threads: Option<usize>) -> anyhow::Result<()> {
        ferrolm::threads::configure(threads, self.set()?)?;
        Ok(())
    }
}
