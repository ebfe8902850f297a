//! Instruction-set levels the kernels are written for, and run-time detection of the best one.
//!
//! Every quantized kernel has a portable [`Isa::Scalar`] reference; the others are chosen at run
//! time when the CPU has the features. `FERROLM_ISA=<name>` caps the choice (for comparisons and
//! tests): the best level at or below the named one that this CPU supports is used.

use std::sync::OnceLock;

/// An instruction-set level, from the portable reference up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Isa {
    /// Portable Rust, no target-specific intrinsics: the reference every other level is tested
    /// against.
    Scalar,
    /// x86-64 AVX2 with FMA and F16C (256-bit integer `maddubs` dot products).
    Avx2,
    /// x86-64 AVX-VNNI (256-bit `vpdpbusd`) on top of [`Isa::Avx2`].
    AvxVnni,
    /// x86-64 AVX-512 F/BW/VL/DQ with VNNI and VBMI (512-bit `vpdpbusd`, byte permutes).
    Avx512,
    /// aarch64 Advanced SIMD (NEON).
    Neon,
    /// aarch64 NEON with the `dotprod` extension (`sdot`).
    NeonDotprod,
}

impl Isa {
    /// Every level, portable first.
    pub const ALL: [Isa; 6] =
        [Isa::Scalar, Isa::Avx2, Isa::AvxVnni, Isa::Avx512, Isa::Neon, Isa::NeonDotprod];

    /// A short lowercase name (`scalar`, `avx2`, `avx-vnni`, `avx512`, `neon`, `neon-dotprod`).
    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
            Isa::AvxVnni => "avx-vnni",
            Isa::Avx512 => "avx512",
            Isa::Neon => "neon",
            Isa::NeonDotprod => "neon-dotprod",
        }
    }

    /// The level named `name` (as [`Isa::name`] prints it, case-insensitive).
    pub fn from_name(name: &str) -> Option<Isa> {
        Isa::ALL.into_iter().find(|i| i.name().eq_ignore_ascii_case(name.trim()))
    }

    /// Whether this CPU can run kernels of this level.
    pub fn is_supported(self) -> bool {
        match self {
            Isa::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => {
                is_x86_feature_detected!("avx2")
                    && is_x86_feature_detected!("fma")
                    && is_x86_feature_detected!("f16c")
            }
            #[cfg(target_arch = "x86_64")]
            Isa::AvxVnni => {
                // The test-only `avx-vnni-as-avx512` feature runs this level's kernels with the
                // EVEX form of the same instruction.
                let evex = cfg!(feature = "avx-vnni-as-avx512")
                    && is_x86_feature_detected!("avx512f")
                    && is_x86_feature_detected!("avx512vnni")
                    && is_x86_feature_detected!("avx512vl");
                Isa::Avx2.is_supported() && (is_x86_feature_detected!("avxvnni") || evex)
            }
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => {
                Isa::Avx2.is_supported()
                    && is_x86_feature_detected!("avx512f")
                    && is_x86_feature_detected!("avx512bw")
                    && is_x86_feature_detected!("avx512vl")
                    && is_x86_feature_detected!("avx512dq")
                    && is_x86_feature_detected!("avx512vnni")
                    && is_x86_feature_detected!("avx512vbmi")
            }
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => std::arch::is_aarch64_feature_detected!("neon"),
            #[cfg(target_arch = "aarch64")]
            Isa::NeonDotprod => {
                std::arch::is_aarch64_feature_detected!("neon")
                    && std::arch::is_aarch64_feature_detected!("dotprod")
            }
            #[allow(unreachable_patterns)]
            _ => false,
        }
    }

    /// Every level this CPU supports, portable first.
    pub fn supported() -> Vec<Isa> {
        Isa::ALL.into_iter().filter(|i| i.is_supported()).collect()
    }

    /// The best supported level, capped by `FERROLM_ISA` when set to a known name (detected once,
    /// then cached). An unknown `FERROLM_ISA` is reported with a warning naming the valid values
    /// and ignored; the chosen level is logged once at `info`.
    pub fn best() -> Isa {
        static BEST: OnceLock<Isa> = OnceLock::new();
        *BEST.get_or_init(|| {
            let cap = match std::env::var("FERROLM_ISA") {
                Ok(v) => Isa::parse_cap(&v).unwrap_or_else(|e| {
                    tracing::warn!("{e}; using the best level this CPU supports");
                    None
                }),
                Err(_) => None,
            };
            let best = Isa::best_up_to(cap);
            tracing::info!(isa = best.name(), cap = cap.map(Isa::name), "CPU kernels instruction set");
            best
        })
    }

    /// Parses a `FERROLM_ISA` value: `Ok(None)` when empty (no cap), `Ok(Some(level))` for a
    /// known name, and an error naming the valid values otherwise.
    pub fn parse_cap(value: &str) -> Result<Option<Isa>, UnknownIsa> {
        if value.trim().is_empty() {
            return Ok(None);
        }
        Isa::from_name(value).map(Some).ok_or_else(|| UnknownIsa(value.to_string()))
    }

    /// The best supported level not above `cap` (any level when `None`). The x86 and aarch64
    /// levels are separate ladders; `Scalar` is below both.
    pub fn best_up_to(cap: Option<Isa>) -> Isa {
        Isa::supported().into_iter().filter(|&i| cap.is_none_or(|c| i.within(c))).max().unwrap_or(Isa::Scalar)
    }

    /// Whether `self` is at or below `cap` on the same ladder (scalar is within every cap).
    fn within(self, cap: Isa) -> bool {
        let arm = |i: Isa| matches!(i, Isa::Neon | Isa::NeonDotprod);
        self == Isa::Scalar || (arm(self) == arm(cap) && self <= cap)
    }
}

/// A `FERROLM_ISA` value that names no instruction-set level.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown FERROLM_ISA value '{0}' (valid values: scalar, avx2, avx-vnni, avx512, neon, neon-dotprod)")]
pub struct UnknownIsa(pub String);

impl std::fmt::Display for Isa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for i in Isa::ALL {
            assert_eq!(Isa::from_name(i.name()), Some(i));
        }
        assert_eq!(Isa::from_name("AVX2"), Some(Isa::Avx2));
        assert_eq!(Isa::from_name("sse9"), None);
    }

    #[test]
    fn unknown_isa_values_are_reported() {
        assert_eq!(Isa::parse_cap("avx2"), Ok(Some(Isa::Avx2)));
        assert_eq!(Isa::parse_cap(" "), Ok(None));
        let err = Isa::parse_cap("avx3").expect_err("avx3 is no level");
        assert_eq!(err, UnknownIsa("avx3".into()));
        let msg = err.to_string();
        for i in Isa::ALL {
            assert!(msg.contains(i.name()), "{msg} lacks {}", i.name());
        }
    }

    #[test]
    fn caps_stay_on_their_ladder() {
        assert_eq!(Isa::best_up_to(Some(Isa::Scalar)), Isa::Scalar);
        let best = Isa::best_up_to(None);
        assert!(best.is_supported());
        assert!(Isa::supported().contains(&Isa::Scalar));
        // Capping at a level of the other architecture leaves only the portable kernels.
        #[cfg(target_arch = "x86_64")]
        assert_eq!(Isa::best_up_to(Some(Isa::NeonDotprod)), Isa::Scalar);
        #[cfg(target_arch = "aarch64")]
        assert_eq!(Isa::best_up_to(Some(Isa::Avx512)), Isa::Scalar);
    }
}
