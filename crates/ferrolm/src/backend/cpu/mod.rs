//! CPU operators: matrix multiplication on quantized weights, attention, norms, RoPE,
//! activations. Parallel regions run on rayon's pool (sized by the caller).

mod attention;
mod matmul;
mod ops;

pub use attention::{AttentionShape, attention};
pub use matmul::matmul;
pub use ops::{
    add_bias_rows, add_inplace, gated_activation, gelu_tanh, rms_norm_inplace, rms_norm_rows, rope_apply,
    rope_cos_sin, silu, softcap,
};
