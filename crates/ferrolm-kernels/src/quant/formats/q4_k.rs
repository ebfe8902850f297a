//! Q4_K: 256-value super-blocks of eight 32-value sub-blocks, 4-bit values, with 6-bit sub-block
//! scales and minimums relative to two f16 super-block factors.
//!
//! Layout (144 bytes): `d: f16`, `dmin: f16`, `scales: [u8; 12]`, `qs: [u8; 128]`.
//!
//! `scales` packs eight 6-bit scales `sc[j]` and eight 6-bit minimums `m[j]`:
//!
//! ```text
//! byte  0..4 : sc[0..4] in bits 0..6, bits 4..6 of sc[4..8] in bits 6..8
//! byte  4..8 : m[0..4]  in bits 0..6, bits 4..6 of m[4..8]  in bits 6..8
//! byte 8..12 : low nibble = bits 0..4 of sc[4..8], high nibble = bits 0..4 of m[4..8]
//! ```
//!
//! `qs` holds four 32-byte chunks; chunk `c`'s low nibbles are sub-block `2c`, its high nibbles
//! sub-block `2c + 1`. Element `i` of sub-block `j` is `(d · sc[j]) · q - (dmin · m[j])`.
//!
//! [`BlockQ4K::quantize`] is GGML's reference quantizer (`quantize_row_q4_K_ref`), used to
//! quantize f32 weights at load time.

use half::f16;

use super::fp16::f16_to_f32;
use super::q8_act::nearest_int;
use crate::GgmlType;
use crate::quant::{QK_K, QuantError, impl_quant_block, quantize_row_blocks};

/// Bytes of packed scales and minimums in a Q4_K block.
pub const K_SCALE_SIZE: usize = 12;

/// One Q4_K super-block, laid out as in GGML.
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(C)]
pub struct BlockQ4K {
    /// Super-block scale for the sub-block scales.
    pub d: f16,
    /// Super-block scale for the sub-block minimums.
    pub dmin: f16,
    /// Packed 6-bit sub-block scales and minimums (see the module docs).
    pub scales: [u8; K_SCALE_SIZE],
    /// Packed nibbles, four chunks of 32 bytes (see the module docs).
    pub qs: [u8; QK_K / 2],
}

const _: () = assert!(size_of::<BlockQ4K>() == 144);
impl_quant_block!(BlockQ4K, QK_K, 144, quantize);

/// Unpacks the 6-bit scale and minimum of sub-block `j` (0..8) from the 12 packed bytes
/// (`get_scale_min_k4` in GGML).
#[inline(always)]
pub fn scale_min_k4(j: usize, s: &[u8; K_SCALE_SIZE]) -> (u8, u8) {
    if j < 4 {
        (s[j] & 63, s[j + 4] & 63)
    } else {
        let sc = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
        let m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
        (sc, m)
    }
}

impl BlockQ4K {
    /// Parses a super-block from its 144 little-endian bytes.
    #[inline(always)]
    pub fn from_bytes(b: &[u8; 144]) -> Self {
        let mut scales = [0u8; K_SCALE_SIZE];
        scales.copy_from_slice(&b[4..16]);
        let mut qs = [0u8; QK_K / 2];
        qs.copy_from_slice(&b[16..144]);
        Self { d: f16::from_le_bytes([b[0], b[1]]), dmin: f16::from_le_bytes([b[2], b[3]]), scales, qs }
    }

    /// The super-block's 144 bytes, as stored in GGUF files.
    pub fn to_bytes(&self) -> [u8; 144] {
        let mut out = [0u8; 144];
        out[0..2].copy_from_slice(&self.d.to_le_bytes());
        out[2..4].copy_from_slice(&self.dmin.to_le_bytes());
        out[4..16].copy_from_slice(&self.scales);
        out[16..144].copy_from_slice(&self.qs);
        out
    }

    /// Dequantizes the super-block into 256 values.
    #[inline(always)]
    pub fn dequantize(&self, out: &mut [f32; QK_K]) {
        let d = f16_to_f32(self.d);
        let dmin = f16_to_f32(self.dmin);
        // out: [4 chunks][2 sub-blocks][32]; qs: [4 chunks][32 bytes].
        for (c, (q, y)) in self.qs.chunks_exact(32).zip(out.chunks_exact_mut(64)).enumerate() {
            let (sc0, m0) = scale_min_k4(2 * c, &self.scales);
            let (sc1, m1) = scale_min_k4(2 * c + 1, &self.scales);
            let (d0, min0) = (d * f32::from(sc0), dmin * f32::from(m0));
            let (d1, min1) = (d * f32::from(sc1), dmin * f32::from(m1));
            let (lo, hi) = y.split_at_mut(32);
            for l in 0..32 {
                lo[l] = d0 * f32::from(q[l] & 0x0f) - min0;
                hi[l] = d1 * f32::from(q[l] >> 4) - min1;
            }
        }
    }
}

impl BlockQ4K {
    /// GGML's reference quantizer (`quantize_row_q4_K_ref`, no importance matrix):
    ///
    /// 1. each 32-value sub-block gets a scale and a minimum from GGML's `make_qkx2_quants` (weights
    ///    `rms(sub-block) + |x|`, 15 levels, a 21-step search of the scale);
    /// 2. the eight scales and eight minimums are quantized to 6 bits relative to the super-block
    ///    factors `d = max scale / 63` and `dmin = max minimum / 63` (f16);
    /// 3. every value is requantized against its sub-block's rounded scale and minimum:
    ///    `q = clamp(nearest_int((x + dmin · m) / (d · sc)), 0, 15)`.
    ///
    /// All arithmetic is plain f32 in GGML's operation order (no fused multiply-adds).
    pub fn quantize(x: &[f32; QK_K]) -> Self {
        let mut l = [0u8; QK_K];
        let mut laux = [0u8; 32];
        let mut weights = [0f32; 32];
        let mut mins = [0f32; QK_K / 32];
        let mut scales = [0f32; QK_K / 32];
        let (mut max_scale, mut max_min) = (0f32, 0f32);
        for (j, (xs, ls)) in x.chunks_exact(32).zip(l.chunks_exact_mut(32)).enumerate() {
            let mut sum_x2 = 0f32;
            for &v in xs {
                sum_x2 += v * v;
            }
            let av_x = (sum_x2 / 32.0).sqrt();
            for (w, &v) in weights.iter_mut().zip(xs) {
                *w = av_x + v.abs();
            }
            let (scale, min) = make_qkx2_quants(15, xs, &weights, ls, &mut laux, -1.0, 0.1, 20, false);
            scales[j] = scale;
            mins[j] = min;
            if scale > max_scale {
                max_scale = scale;
            }
            if min > max_min {
                max_min = min;
            }
        }

        let inv_scale = if max_scale > 0.0 { 63.0 / max_scale } else { 0.0 };
        let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
        let mut packed = [0u8; K_SCALE_SIZE];
        for j in 0..QK_K / 32 {
            // As in C: the int is converted to uint8_t (modulo 256), then capped at 63.
            let ls = (nearest_int(inv_scale * scales[j]) as u8).min(63);
            let lm = (nearest_int(inv_min * mins[j]) as u8).min(63);
            if j < 4 {
                packed[j] = ls;
                packed[j + 4] = lm;
            } else {
                packed[j + 4] = (ls & 0x0f) | ((lm & 0x0f) << 4);
                packed[j - 4] |= (ls >> 4) << 6;
                packed[j] |= (lm >> 4) << 6;
            }
        }
        let d = f16::from_f32(max_scale / 63.0);
        let dmin = f16::from_f32(max_min / 63.0);

        let (df, dminf) = (f16_to_f32(d), f16_to_f32(dmin));
        for (j, (xs, ls)) in x.chunks_exact(32).zip(l.chunks_exact_mut(32)).enumerate() {
            let (sc, m) = scale_min_k4(j, &packed);
            let dl = df * f32::from(sc);
            if dl == 0.0 {
                continue;
            }
            let dm = dminf * f32::from(m);
            for (q, &v) in ls.iter_mut().zip(xs) {
                *q = nearest_int((v + dm) / dl).clamp(0, 15) as u8;
            }
        }

        let mut qs = [0u8; QK_K / 2];
        for (q, lc) in qs.chunks_exact_mut(32).zip(l.chunks_exact(64)) {
            for i in 0..32 {
                q[i] = lc[i] | (lc[i + 32] << 4);
            }
        }
        Self { d, dmin, scales: packed, qs }
    }
}

/// Quantizes a row (a multiple of 256 values) with [`BlockQ4K::quantize`].
pub fn quantize_row_q4_k(x: &[f32]) -> Result<Vec<BlockQ4K>, QuantError> {
    quantize_row_blocks(GgmlType::Q4_K, x)
}

/// GGML's `make_qkx2_quants`: an affine quantization `x ≈ scale · L + min` (`min <= 0`) of
/// `x` to levels `L` in `0..=nmax`, minimizing the `weights`-weighted squared (or, with
/// `use_mad`, absolute) error.
///
/// Starts from the min/max fit, then for `is` in `0..=nstep` tries `iscale = (rmin + rdelta · is
/// + nmax) / (max - min)`: rounds, solves the weighted least-squares scale and minimum for those
/// levels (the minimum capped at 0) and keeps the best. Writes the levels into `l` (`laux` is
/// scratch of the same length) and returns `(scale, -min)`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn make_qkx2_quants(
    nmax: i32,
    x: &[f32],
    weights: &[f32],
    l: &mut [u8],
    laux: &mut [u8],
    rmin: f32,
    rdelta: f32,
    nstep: i32,
    use_mad: bool,
) -> (f32, f32) {
    let n = x.len();
    let (x, weights, l, laux) = (&x[..n], &weights[..n], &mut l[..n], &mut laux[..n]);
    let err = |diff: f32| if use_mad { diff.abs() } else { diff * diff };
    let mut min = x[0];
    let mut max = x[0];
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..n {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        let w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        l.fill(0);
        return (0.0, -min);
    }
    let fmax = nmax as f32;
    let level = |iscale: f32, v: f32, min: f32| nearest_int(iscale * (v - min)).clamp(0, nmax) as u8;
    let mut iscale = fmax / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0f32;
    for i in 0..n {
        l[i] = level(iscale, x[i], min);
        let diff = scale * f32::from(l[i]) + min - x[i];
        best_error += weights[i] * err(diff);
    }
    if nstep < 1 {
        return (scale, -min);
    }
    for is in 0..=nstep {
        iscale = (rmin + rdelta * is as f32 + fmax) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0f32, 0f32, 0f32);
        for i in 0..n {
            let q = level(iscale, x[i], min);
            laux[i] = q;
            let (w, q) = (weights[i], f32::from(q));
            sum_l += w * q;
            sum_l2 += w * q * q;
            sum_xl += w * q * x[i];
        }
        let det = sum_w * sum_l2 - sum_l * sum_l;
        if det > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut cur_error = 0f32;
            for i in 0..n {
                let diff = this_scale * f32::from(laux[i]) + this_min - x[i];
                cur_error += weights[i] * err(diff);
            }
            if cur_error < best_error {
                l.copy_from_slice(laux);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

#[cfg(test)]
mod tests {
    use rand::{Rng, SeedableRng, rngs::StdRng};

    use super::*;

    /// Standard normal samples (Box-Muller).
    fn gaussian(n: usize, rng: &mut StdRng) -> Vec<f32> {
        (0..n)
            .map(|_| {
                let (u, v) = (rng.random_range(f64::EPSILON..1.0), rng.random_range(0.0..1.0));
                ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()) as f32
            })
            .collect()
    }

    fn round_trip(x: &[f32]) -> Vec<f32> {
        let mut out = vec![0f32; x.len()];
        for (b, o) in quantize_row_q4_k(x).expect("whole blocks").iter().zip(out.chunks_exact_mut(QK_K)) {
            b.dequantize(o.try_into().expect("256 values"));
        }
        out
    }

    /// `rms(x - y) / rms(x)`.
    fn rel_rmse(x: &[f32], y: &[f32]) -> f64 {
        let e: f64 = x.iter().zip(y).map(|(&a, &b)| f64::from(a - b).powi(2)).sum();
        let s: f64 = x.iter().map(|&a| f64::from(a).powi(2)).sum();
        (e / s).sqrt()
    }

    /// On gaussian data the reference algorithm reaches a relative RMSE of about 0.071 (4 bits
    /// with per-32 scales and minimums), independent of the data's scale.
    #[test]
    fn gaussian_round_trip_error() {
        let mut rng = StdRng::seed_from_u64(21);
        for scale in [1e-3f32, 1.0, 300.0] {
            let x: Vec<f32> = gaussian(64 * QK_K, &mut rng).iter().map(|v| v * scale).collect();
            let err = rel_rmse(&x, &round_trip(&x));
            assert!((0.06..0.08).contains(&err), "scale {scale}: relative RMSE {err}");
        }
    }

    #[test]
    fn deterministic_and_blockwise() {
        let mut rng = StdRng::seed_from_u64(22);
        let x = gaussian(4 * QK_K, &mut rng);
        let a = quantize_row_q4_k(&x).expect("whole blocks");
        let b = quantize_row_q4_k(&x).expect("whole blocks");
        assert_eq!(a, b);
        for (blk, xs) in a.iter().zip(x.chunks_exact(QK_K)) {
            assert_eq!(*blk, BlockQ4K::quantize(xs.try_into().expect("256 values")));
        }
        assert!(quantize_row_q4_k(&x[..100]).is_err());
    }

    #[test]
    fn representable_values_survive() {
        let mut rng = StdRng::seed_from_u64(23);
        for _ in 0..50 {
            // Sub-block scales and minimums in 1..=63 (one of each 63), every sub-block using
            // levels 0 and 15: the min/max fit of each sub-block is exact, `d` and `dmin` come back
            // as `63 · d / 63` and the 6-bit scales round back to themselves, so the quantizer
            // returns the very block the values came from.
            let mut sc: [u8; 8] = std::array::from_fn(|_| rng.random_range(1..=63));
            let mut m: [u8; 8] = std::array::from_fn(|_| rng.random_range(1..=63));
            sc[rng.random_range(0..8)] = 63;
            m[rng.random_range(0..8)] = 63;
            let mut packed = [0u8; K_SCALE_SIZE];
            for j in 0..8 {
                if j < 4 {
                    packed[j] = sc[j];
                    packed[j + 4] = m[j];
                } else {
                    packed[j + 4] = (sc[j] & 0x0f) | ((m[j] & 0x0f) << 4);
                    packed[j - 4] |= (sc[j] >> 4) << 6;
                    packed[j] |= (m[j] >> 4) << 6;
                }
            }
            for j in 0..8 {
                assert_eq!(scale_min_k4(j, &packed), (sc[j], m[j]));
            }
            let mut q = [0u8; QK_K];
            for (j, sub) in q.chunks_exact_mut(32).enumerate() {
                for v in sub.iter_mut() {
                    *v = rng.random_range(0..16);
                }
                sub[j % 32] = 0;
                sub[(j + 7) % 32] = 15;
            }
            let mut qs = [0u8; QK_K / 2];
            for (c, chunk) in qs.chunks_exact_mut(32).enumerate() {
                for l in 0..32 {
                    chunk[l] = q[64 * c + l] | (q[64 * c + 32 + l] << 4);
                }
            }
            let blk = BlockQ4K {
                d: f16::from_f32(rng.random_range(1e-3..0.05)),
                dmin: f16::from_f32(rng.random_range(1e-3..0.05)),
                scales: packed,
                qs,
            };
            let mut x = [0f32; QK_K];
            blk.dequantize(&mut x);
            let again = BlockQ4K::quantize(&x);
            assert_eq!(again, blk);
            let mut y = [0f32; QK_K];
            again.dequantize(&mut y);
            assert_eq!(x, y);
        }
    }
}
