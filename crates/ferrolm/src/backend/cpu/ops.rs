//! Element-wise and row-wise operators.

use crate::ops::{Activation, RopeParams, RopeStyle};

/// Rows normalised together ([`ferrolm_kernels::rows::RMS_GROUP`]): callers that split rows
/// over threads split them in whole groups.
pub(crate) const RMS_GROUP: usize = ferrolm_kernels::rows::RMS_GROUP;

/// RMSNorm of each `w.len()`-wide row of `x` into `out`: `out = x / rms(x) * w`, computed as GGML
/// does (squares in f32, summed in f64 in element order, the rest in f32), so that activations
/// quantized after the norm round the same way as llama.cpp's ([`ferrolm_kernels::rows`]: the
/// same bits on every instruction set).
pub fn rms_norm_rows(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    ferrolm_kernels::rows::rms_norm_rows(x, w, eps, out);
}

/// RMSNorm of each `w.len()`-wide row of `x`, in place (as [`rms_norm_rows`]).
pub fn rms_norm_inplace(x: &mut [f32], w: &[f32], eps: f32) {
    ferrolm_kernels::rows::rms_norm_inplace(x, w, eps);
}

/// The `(cos, sin)` of every rotated pair (`rope_dims / 2` of them) at logical position `pos`,
/// following ggml's `rope_yarn`: per-pair frequency factors divide the angle, `freq_scale`
/// interpolates it, YaRN blends interpolated and extrapolated angles by a ramp over the pairs,
/// and `attn_factor` scales the magnitude.
pub fn rope_cos_sin(
    pos: u32,
    rope_dims: usize,
    p: &RopeParams,
    factors: Option<&[f32]>,
    out: &mut [(f32, f32)],
) {
    let n_dims = rope_dims as f32;
    let [lo, hi] = yarn_corr_dims(rope_dims, p);
    for (i, c) in out.iter_mut().enumerate().take(rope_dims / 2) {
        let inv_freq = p.base.powf(-((2 * i) as f32) / n_dims);
        let ff = factors.and_then(|f| f.get(i)).copied().unwrap_or(1.0);
        let theta_extrap = pos as f32 * inv_freq / ff;
        let theta_interp = p.freq_scale * theta_extrap;
        let theta = if p.ext_factor != 0.0 {
            let y = (i as f32 - lo) / (hi - lo).max(0.001);
            let mix = (1.0 - y.clamp(0.0, 1.0)) * p.ext_factor;
            theta_interp * (1.0 - mix) + theta_extrap * mix
        } else {
            theta_interp
        };
        let (s, co) = theta.sin_cos();
        *c = (co * p.attn_factor, s * p.attn_factor);
    }
}

/// [`rope_cos_sin`] at each of `positions`, one row of `max(rope_dims / 2, 1)` pairs each
/// in `out`: a batch's RoPE angle table.
pub fn rope_table(
    positions: &[u32],
    rope_dims: usize,
    p: &RopeParams,
    factors: Option<&[f32]>,
    out: &mut [(f32, f32)],
) {
    for (&pos, row) in positions.iter().zip(out.chunks_exact_mut((rope_dims / 2).max(1))) {
        rope_cos_sin(pos, rope_dims, p, factors, row);
    }
}

/// YaRN's correction range: the pairs between which rotation switches from extrapolation to
/// interpolation (ggml's `ggml_rope_yarn_corr_dims`).
fn yarn_corr_dims(rope_dims: usize, p: &RopeParams) -> [f32; 2] {
    if p.ext_factor == 0.0 {
        return [0.0, 0.0];
    }
    let n_dims = rope_dims as f32;
    let corr = |n_rot: f32| {
        n_dims * (p.n_ctx_orig as f32 / (n_rot * 2.0 * std::f32::consts::PI)).ln() / (2.0 * p.base.ln())
    };
    let (start, end) = (corr(p.beta_fast), corr(p.beta_slow));
    let (start, end) = if p.yarn_truncate { (start.floor(), end.ceil()) } else { (start, end) };
    [start.max(0.0), end.min(n_dims - 1.0)]
}

/// Rotates the first `2 * cs.len()` dimensions of each `head_dim`-wide head in `x`
/// (`[n_heads, head_dim]`) by the angles of [`rope_cos_sin`]: `(x0, x1) -> (x0·c - x1·s,
/// x0·s + x1·c)`, unfused ([`ferrolm_kernels::rows`]: the same bits on every instruction set).
pub fn rope_apply(x: &mut [f32], head_dim: usize, cs: &[(f32, f32)], style: RopeStyle) {
    match style {
        RopeStyle::Interleaved => ferrolm_kernels::rows::rope_interleaved(x, head_dim, cs),
        RopeStyle::Neox => ferrolm_kernels::rows::rope_neox(x, head_dim, cs),
    }
}

/// `x / (1 + e^-x)`.
#[inline]
pub fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

pub use crate::ops::{gelu_tanh, gelu_tanh_f16};

/// `gate = act(gate) * up`, element-wise. With `exact`, GELU is computed in f32 instead of
/// through llama.cpp's f16 table.
pub fn gated_activation(gate: &mut [f32], up: &[f32], act: Activation, exact: bool) {
    match (act, exact) {
        (Activation::Silu, _) => ferrolm_kernels::simd_attn::AttnKernels::best().silu_mul(gate, up),
        (Activation::GeluTanh, false) => {
            gate.iter_mut().zip(up).for_each(|(g, &u)| *g = gelu_tanh_f16(*g) * u)
        }
        (Activation::GeluTanh, true) => gate.iter_mut().zip(up).for_each(|(g, &u)| *g = gelu_tanh(*g) * u),
        (Activation::SwigluOai, _) => gate.iter_mut().zip(up).for_each(|(g, &u)| *g = swiglu_oai(*g, u)),
    }
}

/// gpt-oss's clamped SwiGLU of one gate and up value ([`Activation::SwigluOai`]).
#[inline]
pub fn swiglu_oai(gate: f32, up: f32) -> f32 {
    const ALPHA: f32 = 1.702;
    const LIMIT: f32 = 7.0;
    let g = gate.min(LIMIT);
    let u = up.clamp(-LIMIT, LIMIT);
    g / (1.0 + (-ALPHA * g).exp()) * (u + 1.0)
}

/// Adds `bias` to each `bias.len()`-wide row of `x`.
pub fn add_bias_rows(x: &mut [f32], bias: &[f32]) {
    for row in x.chunks_exact_mut(bias.len()) {
        add_inplace(row, bias);
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

    fn rope_inplace(x: &mut [f32], hd: usize, dims: usize, pos: u32, p: RopeParams, style: RopeStyle) {
        let mut cs = vec![(0.0, 0.0); dims / 2];
        rope_cos_sin(pos, dims, &p, None, &mut cs);
        rope_apply(x, hd, &cs, style);
    }

    #[test]
    fn rope_preserves_norm_and_is_identity_at_zero() {
        let p = RopeParams::plain(10000.0);
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
        let p = RopeParams::plain(10000.0);
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
    fn rope_scaling_variants() {
        let dims = 16;
        let mut plain = vec![(0.0, 0.0); dims / 2];
        let mut other = plain.clone();
        let p = RopeParams::plain(10000.0);
        rope_cos_sin(7, dims, &p, None, &mut plain);
        // Frequency factors of 2 equal a linear scale of 1/2.
        let linear = RopeParams { freq_scale: 0.5, ..p };
        rope_cos_sin(7, dims, &p, Some(&[2.0; 8]), &mut other);
        let mut lin = plain.clone();
        rope_cos_sin(7, dims, &linear, None, &mut lin);
        for (a, b) in other.iter().zip(&lin) {
            assert!((a.0 - b.0).abs() < 1e-6 && (a.1 - b.1).abs() < 1e-6);
        }
        // YaRN: the fastest pairs are extrapolated (unscaled angle), the slowest interpolated, and
        // the magnitude follows attn_factor.
        let yarn = RopeParams { freq_scale: 0.25, ext_factor: 1.0, attn_factor: 1.2, n_ctx_orig: 64, ..p };
        let mut y = plain.clone();
        rope_cos_sin(7, dims, &yarn, None, &mut y);
        let angle = |c: (f32, f32)| c.1.atan2(c.0);
        assert!((angle(y[0]) - angle(plain[0])).abs() < 1e-5);
        assert!((angle(y[7]) - angle(lin[7]) * 0.5).abs() < 1e-5);
        for c in &y {
            assert!(((c.0 * c.0 + c.1 * c.1).sqrt() - 1.2).abs() < 1e-5);
        }
        // Untruncated (Hugging Face's `"truncate": false`): the ramp ends at the exact correction
        // dimension (2.016 pairs here), not at the next whole pair (3).
        let hi = 16.0 * (64.0 / (2.0 * std::f32::consts::PI)).ln() / (2.0 * 10000f32.ln());
        for (truncate, end) in [(true, 3.0), (false, hi)] {
            let mut e = plain.clone();
            rope_cos_sin(7, dims, &RopeParams { yarn_truncate: truncate, ..yarn }, None, &mut e);
            for (i, c) in e.iter().enumerate().take(3) {
                let theta = 7.0 * 10000f32.powf(-((2 * i) as f32) / 16.0);
                let mix = 1.0 - (i as f32 / end).clamp(0.0, 1.0);
                let want = theta * (0.25 * (1.0 - mix) + mix);
                let (co, si) = (1.2 * want.cos(), 1.2 * want.sin());
                assert!((c.0 - co).abs() < 1e-5 && (c.1 - si).abs() < 1e-5, "pair {i}, truncate {truncate}");
            }
        }
    }

    #[test]
    fn activations() {
        assert!((silu(1.0) - 0.731_058_6).abs() < 1e-6);
        // gpt-oss: the gate is capped at 7 from above only, the up value clamped to ±7.
        assert!((swiglu_oai(1.0, 0.5) - 1.5 / (1.0 + (-1.702f32).exp())).abs() < 1e-6);
        assert_eq!(swiglu_oai(9.0, 20.0), swiglu_oai(7.0, 7.0));
        assert_eq!(swiglu_oai(-9.0, -20.0), -9.0 / (1.0 + (1.702f32 * 9.0).exp()) * -6.0);
        assert!((gelu_tanh(1.0) - 0.841_192).abs() < 1e-5);
        assert_eq!(gelu_tanh(0.0), 0.0);
        for x in [-12.0f32, -3.3, -0.5, 0.0, 0.123, 1.0, 2.5, 9.9, 11.0] {
            let (a, b) = (gelu_tanh_f16(x), gelu_tanh(x));
            assert!((a - b).abs() <= 2e-3 * b.abs().max(1.0), "{x}: {a} vs {b}");
        }
    }
}
