//! The GPU matmul and gather kernels (on OpenCL) against the CPU backend.

use ferrolm_kernels::quant;
use half::f16;

use super::test_util::{backend, rand_vec, rel_err};
use super::{Arg, Device, DeviceView};
use crate::GgmlType;
use crate::backend::{Backend, BackendError, CpuBackend};
use crate::ops::Weight;

/// Every weight type the OpenCL backend multiplies.
const TYPES: &[GgmlType] = crate::backend::compare::WEIGHT_TYPES;

/// Largest relative error allowed between the OpenCL and CPU products (summation order differs).
const MATMUL_TOL: f32 = 1e-4;

/// Largest relative error allowed between a gathered row and `Weight::dequantize_row`.
const GATHER_TOL: f32 = 1e-6;

/// Deterministic pseudo-random bytes.
fn rand_bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut s = seed ^ 0x9e37_79b9_7f4a_7c15;
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (s >> 56) as u8
        })
        .collect()
}

/// Random valid blocks of a type the CPU cannot quantize: random bytes with finite f16 scales.
fn random_blocks(ty: GgmlType, rows: usize, cols: usize, seed: u64) -> Vec<u8> {
    let blocks = rows * cols / ty.block_size();
    let mut bytes = rand_bytes(blocks * ty.type_size(), seed);
    let scales = rand_vec(blocks, seed + 1);
    match ty {
        GgmlType::Q6_K => {
            // [blocks] of 210 bytes: ql [128], qh [64], scales [16] i8, d f16.
            for (b, s) in bytes.chunks_exact_mut(210).zip(&scales) {
                b[208..210].copy_from_slice(&f16::from_f32(0.002 * (1.0 + s.abs())).to_le_bytes());
            }
        }
        GgmlType::Q2_K => {
            // [blocks] of 84 bytes: scales [16], qs [64], d f16, dmin f16.
            for (b, s) in bytes.chunks_exact_mut(84).zip(&scales) {
                b[80..82].copy_from_slice(&f16::from_f32(0.01 * (1.0 + s.abs())).to_le_bytes());
                b[82..84].copy_from_slice(&f16::from_f32(0.005 * (1.0 - s.abs())).to_le_bytes());
            }
        }
        GgmlType::Q3_K => {
            // [blocks] of 110 bytes: hmask [32], qs [64], scales [12], d f16.
            for (b, s) in bytes.chunks_exact_mut(110).zip(&scales) {
                b[108..110].copy_from_slice(&f16::from_f32(0.004 * (1.0 + s.abs())).to_le_bytes());
            }
        }
        GgmlType::Q5_K => {
            // [blocks] of 176 bytes: d f16, dmin f16, scales [12], qh [32], qs [128].
            for (b, s) in bytes.chunks_exact_mut(176).zip(&scales) {
                b[0..2].copy_from_slice(&f16::from_f32(0.001 * (1.0 + s.abs())).to_le_bytes());
                b[2..4].copy_from_slice(&f16::from_f32(0.002 * (1.0 - s.abs())).to_le_bytes());
            }
        }
        _ => panic!("no random block generator for {ty}"),
    }
    bytes
}

/// A random `[rows, cols]` weight of type `ty`: random rows quantized with the CPU's reference
/// quantizer where there is one, else random valid blocks.
fn random_weight(ty: GgmlType, rows: usize, cols: usize, seed: u64) -> Weight {
    let rb = ty.row_bytes(cols as u64).expect("whole blocks") as usize;
    let bytes = if quant::supports_quantize(ty) {
        let x = rand_vec(rows * cols, seed); // [rows, cols]
        let mut bytes = vec![0u8; rows * rb]; // [rows, rb]
        for (xr, br) in x.chunks_exact(cols).zip(bytes.chunks_exact_mut(rb)) {
            quant::quantize_row(ty, xr, br).expect("quantize");
        }
        bytes
    } else {
        random_blocks(ty, rows, cols, seed)
    };
    Weight::owned(ty, rows, cols, bytes)
}

/// Random activations `[n, cols]` with a few exact ties for the rounding and, in the first
/// token, an all-zero first super-block.
fn activations(n: usize, cols: usize, seed: u64) -> Vec<f32> {
    let mut x = rand_vec(n * cols, seed); // [n, cols]
    if cols >= 512 {
        x[..256].fill(0.0);
    }
    // A block whose largest value is 127 quantizes with id = 1: these are exact halves.
    if let Some(b) = x.get_mut(n * cols - 32..) {
        b[0] = 127.0;
        for (i, v) in b[1..].iter_mut().enumerate() {
            *v = i as f32 - 15.5;
        }
    }
    x
}

/// OpenCL vs CPU `out [n, w.rows]` for `w`; returns the relative error.
fn compare_matmul(w: &Weight, n: usize, seed: u64) -> f32 {
    let Some(b) = backend() else { return 0.0 };
    let x = activations(n, w.cols, seed);
    let mut want = vec![0f32; n * w.rows]; // [n, rows]
    let mut got = vec![f32::NAN; n * w.rows]; // [n, rows]
    CpuBackend.matmul(w, &x, n, &mut want).expect("cpu matmul");
    b.matmul(w, &x, n, &mut got).expect("opencl matmul");
    assert!(got.iter().all(|v| v.is_finite()), "{w:?} n={n}: non-finite results");
    rel_err(&got, &want)
}

#[test]
fn matmul_matches_cpu_for_every_type() {
    if backend().is_none() {
        return;
    }
    for (i, ty) in TYPES.iter().copied().enumerate() {
        let mut worst = 0f32;
        for (j, (rows, cols)) in [(67, 256), (64, 512), (33, 2304)].into_iter().enumerate() {
            let w = random_weight(ty, rows, cols, (10 * i + j) as u64);
            for n in [1, 3, 17] {
                let e = compare_matmul(&w, n, 1000 + n as u64);
                assert!(e <= MATMUL_TOL, "{ty} [{rows} x {cols}] n={n}: relative error {e}");
                worst = worst.max(e);
            }
        }
        eprintln!("matmul {ty}: max relative error {worst:e}");
    }
}

#[test]
fn tiled_kernels_give_each_token_the_bits_of_the_one_token_kernels() {
    let Some(b) = backend() else { return };
    for (i, ty) in TYPES.iter().copied().enumerate() {
        let w = random_weight(ty, 37, 512, 700 + i as u64);
        // 19 tokens: two whole tiles of 8 and a partial one.
        let n = 19;
        let x = activations(n, w.cols, 5 + i as u64);
        let mut tiled = vec![f32::NAN; n * w.rows]; // [n, rows]
        b.matmul(&w, &x, n, &mut tiled).expect("tiled matmul");
        for (t, xt) in x.chunks_exact(w.cols).enumerate() {
            let mut one = vec![f32::NAN; w.rows]; // [1, rows]
            b.matmul(&w, xt, 1, &mut one).expect("one-token matmul");
            let row = &tiled[t * w.rows..(t + 1) * w.rows];
            let same = row.iter().zip(&one).all(|(a, c)| a.to_bits() == c.to_bits());
            assert!(same, "{ty} token {t}: tiled {:?} vs one {:?}", &row[..4], &one[..4]);
        }
    }
}

#[test]
fn matmul_of_a_row_block_reads_its_own_rows() {
    if backend().is_none() {
        return;
    }
    for (i, ty) in TYPES.iter().copied().enumerate() {
        let w = random_weight(ty, 40, 512, 500 + i as u64);
        let part = w.row_block(7, 29);
        let e = compare_matmul(&part, 3, 77);
        assert!(e <= MATMUL_TOL, "{ty} rows 7..36: relative error {e}");
    }
}

#[test]
fn activation_quantizers_match_cpu_bit_for_bit() {
    let Some(b) = backend() else { return };
    let (n, cols) = (3, 512);
    let x = activations(n, cols, 42); // [n, cols]
    for (wty, kernel, block) in [
        (GgmlType::Q4_0, "q_act_q8_0", 32),
        (GgmlType::Q4_1, "q_act_q8_1", 32),
        (GgmlType::Q4_K, "q_act_q8_k", 256),
    ] {
        let rb = quant::act_row_bytes(wty, cols).expect("act bytes");
        let mut want = vec![0u8; n * rb]; // [n, rb]
        for (xr, o) in x.chunks_exact(cols).zip(want.chunks_exact_mut(rb)) {
            quant::quantize_activations(wty, xr, o).expect("cpu quantize");
        }
        let mut got = vec![0xaau8; n * rb]; // [n, rb]
        {
            let cl = b.dev();
            let xv = cl.view(&x).expect("view");
            let ov = cl.view_mut(&mut got).expect("view");
            let blocks = n * cols / block;
            let args = [Arg::Mem(xv.mem()), Arg::Mem(ov.mem()), Arg::U32(blocks as u32)];
            cl.run(kernel, &args, &[blocks], None).expect("run");
            cl.sync(&ov).expect("sync");
        }
        let diff = got.iter().zip(&want).position(|(a, b)| a != b);
        assert_eq!(diff, None, "{kernel}: first differing byte");
    }
}

#[test]
fn gather_matches_dequantize() {
    let Some(b) = backend() else { return };
    for (i, ty) in TYPES.iter().copied().enumerate() {
        let (rows, cols) = (23, 512);
        let table = random_weight(ty, rows, cols, 300 + i as u64);
        let ids = [0u32, 5, 22, 5, 17];
        let mut worst = 0f32;
        for scale in [1.0f32, 0.37] {
            let mut want = vec![0f32; ids.len() * cols]; // [ids, cols]
            let mut got = vec![f32::NAN; ids.len() * cols]; // [ids, cols]
            CpuBackend.gather(&table, &ids, scale, &mut want).expect("cpu gather");
            b.gather(&table, &ids, scale, &mut got).expect("opencl gather");
            let e = rel_err(&got, &want);
            assert!(e <= GATHER_TOL, "{ty} scale {scale}: relative error {e}");
            worst = worst.max(e);
        }
        eprintln!("gather {ty}: max relative error {worst:e}");
    }
}

#[test]
fn gather_rejects_out_of_range_ids() {
    let Some(b) = backend() else { return };
    let table = random_weight(GgmlType::Q8_0, 4, 64, 9);
    let mut out = vec![0f32; 2 * 64];
    let r = b.gather(&table, &[1, 4], 1.0, &mut out);
    assert!(matches!(r, Err(BackendError::Unsupported { .. })), "{r:?}");
    let r = b.gather(&table, &[1], 1.0, &mut out);
    assert!(matches!(r, Err(BackendError::Unsupported { .. })), "wrong output length: {r:?}");
}

#[test]
fn unsupported_types_and_shapes_are_errors() {
    let Some(b) = backend() else { return };
    let w = Weight::owned(GgmlType::IQ4_NL, 2, 256, vec![0; 2 * 8 * 18]);
    assert!(!b.supports_weight(GgmlType::IQ4_NL));
    let mut out = vec![0f32; 2];
    match b.matmul(&w, &[0.0; 256], 1, &mut out) {
        Err(BackendError::Unsupported { backend, what }) => {
            assert_eq!((backend, what.as_str()), ("opencl", "IQ4_NL weights"));
        }
        r => panic!("expected Unsupported, got {r:?}"),
    }
    assert!(TYPES.iter().all(|&t| b.supports_weight(t)));
    let w = random_weight(GgmlType::Q4_0, 2, 64, 1);
    let r = b.matmul(&w, &[0.0; 63], 1, &mut out);
    assert!(matches!(r, Err(BackendError::Unsupported { .. })), "short activations: {r:?}");
}
