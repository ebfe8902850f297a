//! The element-wise and row operators against the CPU backend on random inputs.

use half::f16;

use super::test_util::{backend, rand_vec, rel_err};
use crate::backend::{Backend, CpuBackend};
use crate::ops::{Activation, RopeStyle};

/// Asserts `rel_err(got, want) <= tol` and prints the error.
fn assert_close(what: &str, got: &[f32], want: &[f32], tol: f32) {
    let err = rel_err(got, want);
    eprintln!("{what}: max relative error {err:.3e}");
    assert!(err <= tol, "{what}: relative error {err} > {tol}");
}

/// Random values in [-scale, scale).
fn scaled(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    rand_vec(n, seed).into_iter().map(|x| x * scale).collect()
}

#[test]
fn rms_norm_matches_cpu() {
    let Some(cl) = backend() else { return };
    for (rows, cols, seed) in [(1, 576, 1), (7, 1000, 2), (3, 64, 3), (2, 5, 4), (4, 2048, 5)] {
        let x = scaled(rows * cols, seed, 3.0);
        let w = rand_vec(cols, seed + 100);
        let mut want = vec![0f32; x.len()];
        CpuBackend.rms_norm(&x, &w, 1e-6, &mut want).expect("cpu");
        let mut got = vec![f32::NAN; x.len()];
        cl.rms_norm(&x, &w, 1e-6, &mut got).expect("opencl");
        assert_close(&format!("rms_norm {rows}x{cols}"), &got, &want, 1e-5);

        let (mut want, mut got) = (x.clone(), x.clone());
        CpuBackend.rms_norm_inplace(&mut want, &w, 1e-5).expect("cpu");
        cl.rms_norm_inplace(&mut got, &w, 1e-5).expect("opencl");
        assert_close(&format!("rms_norm_inplace {rows}x{cols}"), &got, &want, 1e-5);
    }
}

#[test]
fn rope_matches_cpu() {
    let Some(cl) = backend() else { return };
    // (tokens, heads, head_dim, rotated dims): full and partial rotation.
    for (n, heads, hd, dims, seed) in
        [(5, 9, 64, 64, 1), (3, 4, 256, 256, 2), (2, 3, 128, 64, 3), (1, 1, 8, 2, 4)]
    {
        for style in [RopeStyle::Interleaved, RopeStyle::Neox] {
            let x = scaled(n * heads * hd, seed, 2.0);
            let angles = rand_vec(n * dims / 2, seed + 7);
            let cs: Vec<(f32, f32)> = angles.iter().map(|a| ((a * 3.0).cos(), (a * 3.0).sin())).collect();
            let (mut want, mut got) = (x.clone(), x.clone());
            CpuBackend.rope(&mut want, n, hd, &cs, style).expect("cpu");
            cl.rope(&mut got, n, hd, &cs, style).expect("opencl");
            assert_close(&format!("rope {style:?} n {n} heads {heads}x{hd} dims {dims}"), &got, &want, 1e-5);
            assert!(rel_err(&got, &x) > 1e-2, "rope changed nothing");
        }
    }
}

/// Softmax of each row in f64.
fn softmax_f64(x: &[f32], cols: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(x.len());
    for row in x.chunks_exact(cols) {
        let m = row.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v as f64));
        let sum: f64 = row.iter().map(|&v| (v as f64 - m).exp()).sum();
        out.extend(row.iter().map(|&v| ((v as f64 - m).exp() / sum) as f32));
    }
    out
}

#[test]
fn softmax_matches_cpu() {
    let Some(cl) = backend() else { return };
    for (rows, cols, seed) in [(1, 10, 1), (9, 300, 2), (2, 4096, 3), (4, 49152, 4), (3, 1, 5)] {
        let x = scaled(rows * cols, seed, 20.0);
        let (mut want, mut got) = (x.clone(), x.clone());
        CpuBackend.softmax(&mut want, cols).expect("cpu");
        cl.softmax(&mut got, cols).expect("opencl");
        let exact = softmax_f64(&x, cols);
        eprintln!("softmax {rows}x{cols}: CPU's error {:.3e} from f64", rel_err(&want, &exact));
        assert_close(&format!("softmax {rows}x{cols} (from f64)"), &got, &exact, 1e-5);
        // The CPU sums a row one by one in f32, the device in a tree: on vocabulary-sized rows
        // the CPU's own rounding (above) exceeds 1e-5.
        let tol = if cols <= 4096 { 1e-5 } else { 1e-4 };
        assert_close(&format!("softmax {rows}x{cols}"), &got, &want, tol);
    }
}

#[test]
fn gated_activations_match_cpu() {
    let Some(cl) = backend() else { return };
    let n = 10_000;
    // Beyond ±10 too (the f16 table's exact branches).
    let gate = scaled(n, 1, 12.0);
    let up = rand_vec(n, 2);
    for (act, exact, tol) in [
        (Activation::Silu, false, 1e-5),
        (Activation::GeluTanh, true, 1e-5),
        (Activation::GeluTanh, false, 1e-3),
    ] {
        let (mut want, mut got) = (gate.clone(), gate.clone());
        CpuBackend.gated_activation(&mut want, &up, act, exact).expect("cpu");
        cl.gated_activation(&mut got, &up, act, exact).expect("opencl");
        assert_close(&format!("gated {act:?} exact {exact}"), &got, &want, tol);
        let same = got.iter().zip(&want).filter(|(a, b)| a == b).count();
        eprintln!("gated {act:?} exact {exact}: {same} of {n} identical");
        for i in (0..n).filter(|&i| got[i] != want[i]).take(3) {
            eprintln!("  gate {} up {}: {} vs {}", gate[i], up[i], got[i], want[i]);
        }
    }
    // The f16 table differs from the exact GELU: the emulation must be the table's.
    let mut exact = gate.clone();
    CpuBackend.gated_activation(&mut exact, &up, Activation::GeluTanh, true).expect("cpu");
    let mut table = gate.clone();
    cl.gated_activation(&mut table, &up, Activation::GeluTanh, false).expect("opencl");
    let mut want = gate.clone();
    CpuBackend.gated_activation(&mut want, &up, Activation::GeluTanh, false).expect("cpu");
    assert!(rel_err(&table, &want) < rel_err(&exact, &want) / 4.0, "the f16 table is not emulated");
}

#[test]
fn add_matches_cpu() {
    let Some(cl) = backend() else { return };
    for (n, seed) in [(1, 1), (1000, 2), (65_537, 3)] {
        let (x, y) = (rand_vec(n, seed), rand_vec(n, seed + 1));
        let (mut want, mut got) = (x.clone(), x.clone());
        CpuBackend.add(&mut want, &y).expect("cpu");
        cl.add(&mut got, &y).expect("opencl");
        assert_close(&format!("add {n}"), &got, &want, 0.0);
    }
}

#[test]
fn copy_to_f16_rounds_like_half() {
    let Some(cl) = backend() else { return };
    let mut src = scaled(5000, 1, 100.0);
    // Ties, subnormals, overflow, infinities, a NaN.
    let f16_ulp_at_1 = 2f32.powi(-10);
    src.extend([
        1.0 + f16_ulp_at_1 / 2.0,
        1.0 + 3.0 * f16_ulp_at_1 / 2.0,
        -(1.0 + f16_ulp_at_1 / 2.0),
        1e-7,
        -3e-6,
        6.1e-5,
        65504.0,
        65519.0,
        65520.0,
        1e6,
        -1e6,
        f32::INFINITY,
        f32::NEG_INFINITY,
        0.0,
        -0.0,
        f32::NAN,
    ]);
    let mut want = vec![f16::ZERO; src.len()];
    CpuBackend.copy_to_f16(&src, &mut want).expect("cpu");
    let mut got = vec![f16::from_f32(7.0); src.len()];
    cl.copy_to_f16(&src, &mut got).expect("opencl");
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!(
            g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
            "copy_to_f16 of {}: {g} ({:#06x}) vs {w} ({:#06x})",
            src[i],
            g.to_bits(),
            w.to_bits()
        );
    }
    eprintln!("copy_to_f16: {} values bit-identical", src.len());
}

#[test]
fn empty_inputs_are_fine() {
    let Some(cl) = backend() else { return };
    let mut x: Vec<f32> = Vec::new();
    cl.rms_norm_inplace(&mut x, &[1.0; 4], 1e-5).expect("rms_norm");
    cl.softmax(&mut x, 4).expect("softmax");
    cl.add(&mut x, &[]).expect("add");
    cl.gated_activation(&mut x, &[], Activation::Silu, false).expect("gated");
    cl.rope(&mut x, 0, 64, &[], RopeStyle::Neox).expect("rope");
    cl.copy_to_f16(&[], &mut []).expect("copy");
}
