//! x86_64 kernels, by instruction-set level ([`crate::Isa`]); every one is checked against the
//! portable reference ([`super::vec_dot`]) by the kernel contract test (`quant/kernel/tests.rs`).
//!
//! - [`avx2`]: register-resident bodies of the hottest [`Isa::Avx2`](crate::Isa::Avx2) dot
//!   products (Q4_0, Q4_1, Q5_0, Q8_0); the rest of that level is [`super::vec_dot`] compiled for
//!   AVX2;
//! - [`avxvnni`] (with its per-format unpacking, `avxvnni_formats`):
//!   [`Isa::AvxVnni`](crate::Isa::AvxVnni);
//! - [`avx512`] (with `avx512_formats`): [`Isa::Avx512`](crate::Isa::Avx512);
//! - [`avx512_packed`]: the AVX-512 kernel of the row-interleaved layout ([`super::packed`]);
//! - [`float`]: the AVX2 and AVX-512 kernels of float weights ([`super::FloatDot`]), checked
//!   against their portable reference by `quant/float_kernel/tests.rs`.

pub(super) mod avx2;
pub(super) mod avx512;
mod avx512_formats;
pub(super) mod avx512_packed;
pub(super) mod avxvnni;
mod avxvnni_formats;
pub(super) mod float;
