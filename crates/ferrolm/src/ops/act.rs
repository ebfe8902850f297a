//! Activation functions shared by the backends and the host-side parts of the forward pass.

use std::sync::OnceLock;

use half::f16;

/// GELU, tanh approximation.
#[inline]
pub fn gelu_tanh(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * x * (1.0 + 0.044_715 * x * x)).tanh())
}

/// GELU (tanh approximation) through a table indexed by the f16 bits of `x`, as llama.cpp's CPU
/// backend computes it: the input and the result are rounded to f16, and |x| ≥ 10 is exact.
/// Faster than `tanh` and identical to the reference's activations.
#[inline]
pub fn gelu_tanh_f16(x: f32) -> f32 {
    static TABLE: OnceLock<Vec<f16>> = OnceLock::new();
    if x <= -10.0 {
        return 0.0;
    }
    if x >= 10.0 {
        return x;
    }
    let table = TABLE.get_or_init(|| {
        (0..=u16::MAX).map(|bits| f16::from_f32(gelu_tanh(f16::from_bits(bits).to_f32()))).collect()
    });
    table[usize::from(f16::from_f32(x).to_bits())].to_f32()
}
