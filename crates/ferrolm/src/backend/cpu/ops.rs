//! Element-wise and row-wise operators.

use std::sync::OnceLock;

use half::f16;

use crate::model::config::{Activation, RopeParams, RopeStyle};

/// RMSNorm of each `w.len()`-wide row of `x` into `out`: `out = x / rms(x) * w`.
pub fn rms_norm_rows(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let n = w.len();
    for (xr, or) in x.chunks_exact(n).zip(out.chunks_exact_mut(n)) {
        let scale = inv_rms(xr, eps);
        for ((o, &xv), &wv) in or.iter_mut().zip(xr).zip(w) {
            *o = xv * scale * wv;
        }
    }
}

/// RMSNorm of each `w.len()`-wide row of `x`, in place.
pub fn rms_norm_inplace(x: &mut [f32], w: &[f32], eps: f32) {
    let n = w.len();
    for xr in x.chunks_exact_mut(n) {
        let scale = inv_rms(xr, eps);
        for (xv, &wv) in xr.iter_mut().zip(w) {
            *xv *= scale * wv;
        }
    }
}

/// `1 / sqrt(mean(x²) + eps)`, computed as GGML does (squares in f32, summed in f64, the rest in
/// f32), so that activations quantized after the norm round the same way as llama.cpp's.
fn inv_rms(x: &[f32], eps: f32) -> f32 {
    let ss: f64 = x.iter().map(|&v| f64::from(v * v)).sum();
    let mean = (ss / x.len().max(1) as f64) as f32;
    1.0 / (mean + eps).sqrt()
}

/// Rotates the first `rope_dims` dimensions of each `head_dim`-wide head in `x` (`[n_heads,
/// head_dim]`) for logical position `pos`.
pub fn rope_inplace(
    x: &mut [f32],
    head_dim: usize,
    rope_dims: usize,
    pos: u32,
    p: RopeParams,
    style: RopeStyle,
) {
    let half = rope_dims / 2;
    let theta_pos = pos as f32 * p.freq_scale;
    // One (cos, sin) per rotated pair, shared by every head.
    let mut cs = [(0.0f32, 0.0f32); 512];
    let cs = &mut cs[..half.min(512)];
    for (i, c) in cs.iter_mut().enumerate() {
        let inv_freq = p.base.powf(-((2 * i) as f32) / rope_dims as f32);
        let (s, co) = (theta_pos * inv_freq).sin_cos();
        *c = (co, s);
    }
    for head in x.chunks_exact_mut(head_dim) {
        for (i, &(c, s)) in cs.iter().enumerate() {
            let (a, b) = match style {
                RopeStyle::Interleaved => (2 * i, 2 * i + 1),
                RopeStyle::Neox => (i, i + half),
            };
            let (x0, x1) = (head[a], head[b]);
            head[a] = x0 * c - x1 * s;
            head[b] = x0 * s + x1 * c;
        }
    }
}

/// `x / (1 + e^-x)`.
#[inline]
pub fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

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

/// `gate = act(gate) * up`, element-wise.
pub fn gated_activation(gate: &mut [f32], up: &[f32], act: Activation) {
    match act {
        Activation::Silu => gate.iter_mut().zip(up).for_each(|(g, &u)| *g = silu(*g) * u),
        Activation::GeluTanh => gate.iter_mut().zip(up).for_each(|(g, &u)| *g = gelu_tanh_f16(*g) * u),
    }
}

/// `x += y`.
pub fn add_inplace(x: &mut [f32], y: &[f32]) {
    x.iter_mut().zip(y).for_each(|(a, &b)| *a += b);
}

/// `x = cap * tanh(x / cap)`.
pub fn softcap(x: &mut [f32], cap: f32) {
    x.iter_mut().for_each(|v| *v = cap * (*v / cap).tanh());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rms_norm_unit_rows() {
        let x = [3.0, 4.0, 0.0, 0.0];
        let mut out = [0.0; 4];
        rms_norm_rows(&x, &[1.0, 1.0], 1e-6, &mut out);
        let r = (12.5f32 + 1e-6).sqrt();
        assert!((out[0] - 3.0 / r).abs() < 1e-6 && (out[1] - 4.0 / r).abs() < 1e-6);
        assert_eq!(&out[2..], &[0.0, 0.0]);
    }

    #[test]
    fn rope_preserves_norm_and_is_identity_at_zero() {
        let p = RopeParams { base: 10000.0, freq_scale: 1.0 };
        for style in [RopeStyle::Interleaved, RopeStyle::Neox] {
            let orig: Vec<f32> = (0..16).map(|i| i as f32 * 0.3 - 2.0).collect();
            let mut x = orig.clone();
            rope_inplace(&mut x, 8, 8, 0, p, style);
            assert_eq!(x, orig);
            rope_inplace(&mut x, 8, 8, 17, p, style);
            let n0: f32 = orig.iter().map(|v| v * v).sum();
            let n1: f32 = x.iter().map(|v| v * v).sum();
            assert!((n0 - n1).abs() < 1e-3);
        }
    }

    #[test]
    fn rope_relative_property() {
        // <rope(q, m), rope(k, n)> depends only on m - n.
        let p = RopeParams { base: 10000.0, freq_scale: 1.0 };
        let q: Vec<f32> = (0..8).map(|i| (i as f32).sin()).collect();
        let k: Vec<f32> = (0..8).map(|i| (i as f32 * 0.7).cos()).collect();
        let dot_at = |m: u32, n: u32| {
            let (mut a, mut b) = (q.clone(), k.clone());
            rope_inplace(&mut a, 8, 8, m, p, RopeStyle::Neox);
            rope_inplace(&mut b, 8, 8, n, p, RopeStyle::Neox);
            a.iter().zip(&b).map(|(x, y)| x * y).sum::<f32>()
        };
        assert!((dot_at(5, 2) - dot_at(13, 10)).abs() < 1e-4);
    }

    #[test]
    fn activations() {
        assert!((silu(1.0) - 0.731_058_6).abs() < 1e-6);
        assert!((gelu_tanh(1.0) - 0.841_192).abs() < 1e-5);
        assert_eq!(gelu_tanh(0.0), 0.0);
        for x in [-12.0f32, -3.3, -0.5, 0.0, 0.123, 1.0, 2.5, 9.9, 11.0] {
            let (a, b) = (gelu_tanh_f16(x), gelu_tanh(x));
            assert!((a - b).abs() <= 2e-3 * b.abs().max(1.0), "{x}: {a} vs {b}");
        }
    }
}
