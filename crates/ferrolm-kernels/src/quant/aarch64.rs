//! aarch64 kernels, by instruction-set level ([`crate::Isa`]); every one is checked against the
//! portable reference ([`super::vec_dot`]) by the kernel contract test (`quant/kernel/tests.rs`).
//!
//! - [`neon`] (with the K-quant kernels in `neon/kquants.rs`): [`Isa::Neon`](crate::Isa::Neon)
//!   and [`Isa::NeonDotprod`](crate::Isa::NeonDotprod), built when NEON is enabled at compile
//!   time (the aarch64 baseline).

#[cfg(target_feature = "neon")]
pub(super) mod neon;
