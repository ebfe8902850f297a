//! CPU operators: matrix multiplication on quantized weights, attention, norms, RoPE,
//! activations, and the repacked weight copies the matrix multiplication reads. Parallel
//! regions run on the worker pool of [`crate::threads`].

mod attention;
mod matmul;
mod ops;
mod repack;

pub use attention::attention;
// The operator types and the reference attention statistics, under their former paths.
pub use crate::kv::attention_mass;
pub use crate::ops::{AttentionShape, MatmulJob};
pub use matmul::{matmul, matmul_many};
pub(crate) use ops::RMS_GROUP;
pub use ops::{
    add_bias_rows, add_inplace, gated_activation, gelu_tanh, rms_norm_inplace, rms_norm_rows, rope_apply,
    rope_cos_sin, rope_table, silu, softcap,
};
pub use repack::{pack_weights, packed};
