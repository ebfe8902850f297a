//! What a benchmark ran on: the build, the CPU, the device, the model, and when.

use std::collections::BTreeMap;
use std::path::Path;

use ferrolm::GgmlType;
use ferrolm::model::Model;

/// The ferrolm build.
#[derive(Clone, Debug)]
pub struct BuildInfo {
    /// Crate version.
    pub version: &'static str,
    /// Short git commit (set by build.rs), or "unknown".
    pub commit: &'static str,
}

impl BuildInfo {
    /// This binary's build.
    pub fn current() -> Self {
        Self { version: env!("CARGO_PKG_VERSION"), commit: env!("FERROLM_GIT_COMMIT") }
    }
}

/// The CPU's model name from /proc/cpuinfo, or the architecture where that is not readable.
pub fn cpu_info() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| cpuinfo_model_name(&s))
        .unwrap_or_else(|| std::env::consts::ARCH.to_string())
}

/// The name results are filed under when `--device-name` is not given: the host name
/// (`/proc/sys/kernel/hostname`, else `$HOSTNAME`), or "unknown".
pub fn default_device_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".to_string())
}

fn cpuinfo_model_name(cpuinfo: &str) -> Option<String> {
    cpuinfo.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        let value = value.trim();
        (key.trim() == "model name" && !value.is_empty()).then(|| value.to_string())
    })
}

/// A model's description, as llama-bench reports it.
#[derive(Clone, Debug)]
pub struct ModelInfo {
    /// The path it was loaded from.
    pub filename: String,
    /// The file (or folder) name alone.
    pub short_name: String,
    /// Architecture name (`llama`, `gemma3`, …).
    pub arch: &'static str,
    /// Bytes of tensor data.
    pub size: u64,
    /// Number of parameters (tensor elements).
    pub n_params: u64,
    /// Weight types present with their bytes, largest first.
    pub types: Vec<(GgmlType, u64)>,
    /// The file's declared quantization mix (GGUF `general.file_type`, named as llama.cpp does).
    pub file_type: Option<&'static str>,
}

impl ModelInfo {
    /// Describes `model`, loaded from `path`.
    pub fn new(path: &Path, model: &Model) -> Self {
        let mut by_type: BTreeMap<u32, (GgmlType, u64)> = BTreeMap::new();
        let (mut size, mut n_params) = (0u64, 0u64);
        for (_, t) in model.tensors().iter() {
            let bytes = t.range.len() as u64;
            size += bytes;
            n_params += t.n_elements();
            by_type.entry(t.ty.id()).or_insert((t.ty, 0)).1 += bytes;
        }
        let mut types: Vec<_> = by_type.into_values().collect();
        types.sort_by_key(|&(_, b)| std::cmp::Reverse(b));
        let short_name =
            path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into());
        Self {
            filename: path.display().to_string(),
            short_name,
            arch: model.config().arch.name(),
            size,
            n_params,
            types,
            file_type: model.gguf().opt_u64("general.file_type").ok().flatten().and_then(file_type_name),
        }
    }

    /// `size` like llama-bench: MiB, or GiB from 1 GiB on.
    pub fn size_label(&self) -> String {
        const MIB: f64 = 1024.0 * 1024.0;
        if self.size < 1 << 30 {
            format!("{:.2} MiB", self.size as f64 / MIB)
        } else {
            format!("{:.2} GiB", self.size as f64 / MIB / 1024.0)
        }
    }

    /// `params` like llama-bench: millions, or billions from 1 B on.
    pub fn params_label(&self) -> String {
        if self.n_params < 1_000_000_000 {
            format!("{:.2} M", self.n_params as f64 / 1e6)
        } else {
            format!("{:.2} B", self.n_params as f64 / 1e9)
        }
    }

    /// `arch params file-type`, e.g. `llama 134.52M Q4_1`, like llama-bench's `model_type`
    /// (the weight type with the most bytes when the file does not declare its type).
    pub fn model_type(&self) -> String {
        let main = self.file_type.or_else(|| self.types.first().map(|(t, _)| t.name())).unwrap_or("?");
        format!("{} {} {main}", self.arch, self.params_label().replace(' ', ""))
    }

    /// The weight types present, largest share first (`Q4_1 80.1%, Q6_K 15.2%, F32 0.1%`).
    pub fn types_label(&self) -> String {
        let total = self.size.max(1) as f64;
        let parts: Vec<String> = self
            .types
            .iter()
            .map(|(t, b)| format!("{} {:.1}%", t.name(), 100.0 * *b as f64 / total))
            .collect();
        parts.join(", ")
    }
}

/// llama.cpp's name of a GGUF `general.file_type` (`llama_ftype`) value.
fn file_type_name(id: u64) -> Option<&'static str> {
    Some(match id {
        0 => "all F32",
        1 => "F16",
        2 => "Q4_0",
        3 => "Q4_1",
        7 => "Q8_0",
        8 => "Q5_0",
        9 => "Q5_1",
        10 => "Q2_K - Medium",
        11 => "Q3_K - Small",
        12 => "Q3_K - Medium",
        13 => "Q3_K - Large",
        14 => "Q4_K - Small",
        15 => "Q4_K - Medium",
        16 => "Q5_K - Small",
        17 => "Q5_K - Medium",
        18 => "Q6_K",
        19 => "IQ2_XXS - 2.0625 bpw",
        20 => "IQ2_XS - 2.3125 bpw",
        21 => "Q2_K - Small",
        22 => "IQ3_XS - 3.3 bpw",
        23 => "IQ3_XXS - 3.0625 bpw",
        24 => "IQ1_S - 1.5625 bpw",
        25 => "IQ4_NL - 4.5 bpw",
        26 => "IQ3_S - 3.4375 bpw",
        27 => "IQ3_S mix - 3.66 bpw",
        28 => "IQ2_S - 2.5 bpw",
        29 => "IQ2_M - 2.7 bpw",
        30 => "IQ4_XS - 4.25 bpw",
        31 => "IQ1_M - 1.75 bpw",
        32 => "BF16",
        36 => "TQ1_0 - 1.69 bpw ternary",
        37 => "TQ2_0 - 2.06 bpw ternary",
        38 => "MXFP4 MoE",
        _ => return None,
    })
}

/// The current UTC time in RFC 3339 (`2025-01-31T12:34:56Z`), as llama-bench's `test_time`.
pub fn rfc3339_now() -> String {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    rfc3339(secs)
}

fn rfc3339(unix_secs: u64) -> String {
    let days = (unix_secs / 86_400) as i64;
    let rem = unix_secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// Year, month and day of a count of days since 1970-01-01 (H. Hinnant's `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        // 2000-02-29 (a leap day in a century year) 23:59:59.
        assert_eq!(rfc3339(951_868_799), "2000-02-29T23:59:59Z");
        assert_eq!(rfc3339(1_735_689_600), "2025-01-01T00:00:00Z");
        assert_eq!(rfc3339(4_107_542_400), "2100-03-01T00:00:00Z");
    }

    #[test]
    fn file_type_names() {
        assert_eq!(file_type_name(3), Some("Q4_1"));
        assert_eq!(file_type_name(15), Some("Q4_K - Medium"));
        assert_eq!(file_type_name(4), None); // removed from llama.cpp
    }

    #[test]
    fn cpu_model_name_is_the_first_one() {
        let s = "processor\t: 0\nvendor_id\t: X\nmodel name\t: Some CPU @ 2.0GHz\n\nprocessor\t: 1\nmodel name\t: Other\n";
        assert_eq!(cpuinfo_model_name(s).as_deref(), Some("Some CPU @ 2.0GHz"));
        assert_eq!(cpuinfo_model_name("processor: 0\n"), None);
    }
}
