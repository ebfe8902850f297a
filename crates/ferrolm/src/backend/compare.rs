//! Operator-by-operator comparison of a backend against the CPU (`ferrolm test-backend`, the
//! original design's `test_backend`): every operator of [`Backend`] runs on both with the same
//! random inputs, over several shapes, and reports its largest error relative to the CPU's
//! result.

use half::f16;
use rand::{Rng, SeedableRng, rngs::StdRng};

use super::{AttentionShape, Backend, BackendResult, CpuBackend, HostRange};
use crate::GgmlType;
use crate::batch::{Batch, BatchEntry};
use crate::kv::{KvCache, KvType};
use crate::ops::{Activation, RopeParams, RopeStyle, Weight};

/// The result of one operator on one shape.
#[derive(Clone, Debug)]
pub struct OpReport {
    /// Operator name (`matmul`, `rms_norm`, …).
    pub op: String,
    /// The case: types and shape.
    pub case: String,
    /// `max |other - cpu| / max |cpu|` over the output.
    pub max_rel_err: f32,
    /// Microseconds the backend under test took (one run, including its transfers).
    pub us: f64,
}

/// The weight types a comparison covers (those both backends support are run).
pub const WEIGHT_TYPES: &[GgmlType] = &[
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
];

fn rel_err(a: &[f32], b: &[f32]) -> f32 {
    let scale = b.iter().fold(0f32, |m, v| m.max(v.abs())).max(f32::MIN_POSITIVE);
    let diff = a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()));
    if a.iter().any(|v| !v.is_finite()) { f32::INFINITY } else { diff / scale }
}

/// `n` random values in `-amp..amp`.
pub fn rand_vec(rng: &mut StdRng, n: usize, amp: f32) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(-amp..amp)).collect()
}

/// Random rows of `ty`: random f32 values in `-1..1` quantized with the kernels' reference
/// quantizer; `None` for a type without one (`ferrolm_kernels::quant::supports_quantize`) or
/// `cols` that are not whole blocks of it. Also the weights of `ferrolm micro-bench`.
pub fn random_weight(rng: &mut StdRng, ty: GgmlType, rows: usize, cols: usize) -> Option<Weight> {
    let row_bytes = ty.row_bytes(cols as u64)? as usize;
    let mut bytes = vec![0u8; rows * row_bytes];
    for row in bytes.chunks_exact_mut(row_bytes) {
        let x = rand_vec(rng, cols, 1.0);
        ferrolm_kernels::quant::quantize_row(ty, &x, row).ok()?;
    }
    Some(Weight::owned(ty, rows, cols, bytes))
}

/// The input of an attention call over one layer: a cache of `seqs` sequences holding `ctx`
/// random keys and values each (stored as `ty`, a few slots to spare), and a batch of the last
/// `queries` positions of every sequence (a prompt chunk when more than one), whose own keys
/// are among the `ctx`, as in a forward pass. Also the input of `ferrolm micro-bench attention`.
pub fn random_attention_input(
    rng: &mut StdRng,
    kv_dim: usize,
    ctx: usize,
    queries: usize,
    seqs: u32,
    ty: KvType,
) -> BackendResult<(KvCache, Batch)> {
    let mut kv = KvCache::new(1, kv_dim, ctx + 8, ty, ty);
    let mut batch = Batch::new();
    for s in 0..seqs {
        for p in 0..ctx as u32 {
            let slot = kv
                .push_slot(s, p)
                .map_err(|e| super::BackendError::Unsupported { backend: "compare", what: e.to_string() })?;
            let k = rand_vec(rng, kv_dim, 1.0);
            let v = rand_vec(rng, kv_dim, 1.0);
            kv.seq_mut(s).write(0, slot, &k, &v);
        }
        let first = ctx.saturating_sub(queries) as u32;
        for p in first..ctx as u32 {
            batch.push(s, p, 0, false);
        }
        if queries > 1 {
            batch.set_prompt_chunk(s, queries as u32);
        }
    }
    Ok((kv, batch))
}

/// Runs `f` on both backends and records the error of `other`'s output.
struct Runner<'a> {
    other: &'a dyn Backend,
    reports: Vec<OpReport>,
}

impl Runner<'_> {
    fn check<T: Clone>(
        &mut self,
        op: &str,
        case: String,
        input: &T,
        f: impl Fn(&dyn Backend, &mut T) -> BackendResult<Vec<f32>>,
    ) -> BackendResult {
        let want = f(&CpuBackend, &mut input.clone())?;
        let t = std::time::Instant::now();
        let got = f(self.other, &mut input.clone())?;
        let us = t.elapsed().as_secs_f64() * 1e6;
        self.reports.push(OpReport { op: op.to_string(), case, max_rel_err: rel_err(&got, &want), us });
        Ok(())
    }
}

/// Compares every operator of `other` with the CPU backend on random inputs (`seed`), over
/// shapes like those of small models. An error when `other` fails to run an operator.
pub fn compare_with_cpu(other: &dyn Backend, seed: u64) -> BackendResult<Vec<OpReport>> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut r = Runner { other, reports: Vec::new() };

    // Matrix products and gathers, every weight type both backends run.
    for &ty in WEIGHT_TYPES {
        if !other.supports_weight(ty) || !CpuBackend.supports_weight(ty) {
            continue;
        }
        for &(rows, cols) in &[(96usize, 256usize), (67, 576), (130, 1536)] {
            let Some(w) = random_weight(&mut rng, ty, rows, cols) else { continue };
            for n in [1usize, 7, 33] {
                let x = rand_vec(&mut rng, n * cols, 2.0);
                r.check("matmul", format!("{ty} [{rows} x {cols}] x {n}"), &x, |b, x| {
                    let mut out = vec![0f32; n * rows];
                    b.matmul(&w, x, n, &mut out)?;
                    Ok(out)
                })?;
            }
            let ids: Vec<u32> = (0..5).map(|_| rng.random_range(0..rows as u32)).collect();
            r.check("gather", format!("{ty} [{rows} x {cols}] x 5 rows"), &ids, |b, ids| {
                let mut out = vec![0f32; ids.len() * cols];
                b.gather(&w, ids, 1.5, &mut out)?;
                Ok(out)
            })?;
        }
    }

    // Row and element-wise operators.
    for &(n, d) in &[(1usize, 576usize), (13, 640), (64, 256)] {
        let x = rand_vec(&mut rng, n * d, 3.0);
        let w = rand_vec(&mut rng, d, 1.5);
        r.check("rms_norm", format!("[{n}, {d}]"), &x, |b, x| {
            let mut out = vec![0f32; x.len()];
            b.rms_norm(x, &w, 1e-6, &mut out)?;
            Ok(out)
        })?;
        r.check("rms_norm_inplace", format!("[{n}, {d}]"), &x, |b, x| {
            b.rms_norm_inplace(x, &w, 1e-6)?;
            Ok(x.clone())
        })?;
        r.check("softmax", format!("[{n}, {d}]"), &x, |b, x| {
            b.softmax(x, d)?;
            Ok(x.clone())
        })?;
        let y = rand_vec(&mut rng, n * d, 3.0);
        r.check("add", format!("[{n}, {d}]"), &x, |b, x| {
            b.add(x, &y)?;
            Ok(x.clone())
        })?;
        r.check("scale", format!("[{n}, {d}]"), &x, |b, x| {
            b.scale(x, 0.22)?;
            Ok(x.clone())
        })?;
        r.check("add_bias", format!("[{n}, {d}]"), &x, |b, x| {
            b.add_bias(x, &w)?;
            Ok(x.clone())
        })?;
        r.check("softcap", format!("cap 2.5 [{n}, {d}]"), &x, |b, x| {
            b.softcap(x, 2.5)?;
            Ok(x.clone())
        })?;
        for (act, exact, name) in [
            (Activation::Silu, false, "silu"),
            (Activation::GeluTanh, false, "gelu (f16 table)"),
            (Activation::GeluTanh, true, "gelu (f32)"),
            (Activation::SwigluOai, false, "swiglu-oai"),
        ] {
            r.check("gated_activation", format!("{name} [{n}, {d}]"), &x, |b, g| {
                b.gated_activation(g, &y, act, exact)?;
                Ok(g.clone())
            })?;
        }
        r.check("copy_to_f16", format!("[{n}, {d}]"), &x, |b, x| {
            let mut out = vec![f16::ZERO; x.len()];
            b.copy_to_f16(x, &mut out)?;
            Ok(out.iter().map(|v| v.to_f32()).collect())
        })?;
    }
    // A chain of operators inside a pass (Backend::begin_pass): a GPU backend keeps the
    // intermediate rows on its device, views parts of them at offsets, and brings them back
    // to the host only when asked.
    for &(n, d) in &[(1usize, 576usize), (13, 640)] {
        let x = rand_vec(&mut rng, n * d, 3.0);
        let w = rand_vec(&mut rng, d, 1.5);
        let y = rand_vec(&mut rng, n * d, 3.0);
        r.check("pass", format!("norm, add, bias, offsets, softcap [{n}, {d}]"), &x, |b, x| {
            let (mut xn, mut z) = (vec![0f32; n * d], vec![0f32; n * d]);
            let scratch = [HostRange::of(x), HostRange::of(&xn), HostRange::of(&z)];
            let pass = b.begin_pass(&scratch, &mut std::iter::once(&w[..]))?;
            let res = (|| {
                b.rms_norm(x, &w, 1e-6, &mut xn)?;
                b.add(&mut xn, &y)?;
                b.add_bias(&mut xn, &w)?;
                b.rms_norm(&xn[..d], &w, 1e-6, &mut z[..d])?;
                b.add(&mut z[d..], &xn[d..])?;
                b.softcap(&mut z, 2.5)?;
                b.add(&mut z, &y)?;
                b.to_host(&mut z)?;
                Ok(z.clone())
            })();
            b.end_pass(pass);
            res
        })?;
    }
    let yarn = RopeParams {
        freq_scale: 0.25,
        ext_factor: 1.0,
        attn_factor: 1.2,
        n_ctx_orig: 4096,
        ..RopeParams::plain(1e6)
    };
    for (name, params, factors) in [
        ("plain", RopeParams::plain(10000.0), None),
        ("yarn", yarn, None),
        (
            "factors",
            RopeParams::plain(500000.0),
            Some((0..32).map(|i| 1.0 + i as f32 / 8.0).collect::<Vec<_>>()),
        ),
    ] {
        let positions: Vec<u32> = (0..9).map(|_| rng.random_range(0..20000)).collect();
        r.check("rope_cos_sin", format!("{name}, 9 positions, dims 64"), &positions, |b, pos| {
            let mut out = vec![(0f32, 0f32); pos.len() * 32];
            b.rope_cos_sin(pos, 64, &params, factors.as_deref(), &mut out)?;
            Ok(out.iter().flat_map(|&(c, s)| [c, s]).collect())
        })?;
    }
    for &(n, heads, hd, rope_dims) in
        &[(1usize, 9usize, 64usize, 64usize), (17, 4, 256, 256), (5, 8, 128, 64)]
    {
        let half = rope_dims / 2;
        let x = rand_vec(&mut rng, n * heads * hd, 2.0);
        let cs: Vec<(f32, f32)> = (0..n * half)
            .map(|i| {
                let a = (i as f32 * 0.37).sin() * 3.0;
                (a.cos(), a.sin())
            })
            .collect();
        for style in [RopeStyle::Interleaved, RopeStyle::Neox] {
            r.check("rope", format!("{style:?} [{n}, {heads} x {hd}] dims {rope_dims}"), &x, |b, x| {
                b.rope(x, n, hd, &cs, style)?;
                Ok(x.clone())
            })?;
        }
    }

    // Attention: decode steps of several sequences, a prompt, windows, soft-capping, caches.
    struct AttnCase {
        name: &'static str,
        shape: AttentionShape<'static>,
        ctx: usize,
        queries: usize,
        seqs: u32,
    }
    let smol = AttentionShape {
        n_head: 9,
        n_head_kv: 3,
        head_dim: 64,
        scale: 0.125,
        window: None,
        softcap: None,
        sinks: None,
    };
    let gemma = AttentionShape {
        n_head: 4,
        n_head_kv: 1,
        head_dim: 256,
        scale: 0.0625,
        window: Some(512),
        softcap: None,
        sinks: None,
    };
    let capped = AttentionShape { softcap: Some(50.0), window: Some(100), ..smol };
    // gpt-oss: a sink logit per query head, some above and some below the scores.
    const SINKS: [f32; 9] = [-2.0, 0.5, 3.0, 1.0, -0.5, 6.0, 0.0, 2.5, -4.0];
    let sunk = AttentionShape { sinks: Some(&SINKS), window: Some(128), ..smol };
    let cases = [
        AttnCase { name: "decode, 3 sequences", shape: smol, ctx: 300, queries: 1, seqs: 3 },
        AttnCase { name: "prompt chunk of 80", shape: smol, ctx: 120, queries: 80, seqs: 1 },
        AttnCase { name: "decode, window 512", shape: gemma, ctx: 600, queries: 1, seqs: 2 },
        AttnCase { name: "prompt chunk of 70, window 512", shape: gemma, ctx: 600, queries: 70, seqs: 1 },
        AttnCase { name: "decode, window 100, softcap 50", shape: capped, ctx: 200, queries: 1, seqs: 2 },
        AttnCase { name: "decode, sinks, window 128", shape: sunk, ctx: 700, queries: 1, seqs: 2 },
        AttnCase { name: "prompt chunk of 70, sinks", shape: sunk, ctx: 300, queries: 70, seqs: 1 },
    ];
    for c in &cases {
        for ty in [KvType::F16, KvType::F32] {
            let kv_dim = c.shape.n_head_kv * c.shape.head_dim;
            let (kv, batch) = random_attention_input(&mut rng, kv_dim, c.ctx, c.queries, c.seqs, ty)?;
            let entries: Vec<BatchEntry> = batch.entries().to_vec();
            let qd = c.shape.n_head * c.shape.head_dim;
            let q = rand_vec(&mut rng, entries.len() * qd, 1.0);
            r.check("attention", format!("{} ({ty} cache, {} slots)", c.name, c.ctx), &q, |b, q| {
                let mut out = vec![0f32; q.len()];
                b.attention(c.shape, &entries, batch.prompt_chunks(), &kv, 0, q, &mut out)?;
                Ok(out)
            })?;
            // The eviction statistics of the first sequence's queries (H2O).
            let Some(seq) = kv.seq(0) else { continue };
            let qpos: Vec<u32> = entries.iter().filter(|e| e.seq == 0).map(|e| e.pos).collect();
            let q0 = &q[..qpos.len() * qd];
            r.check(
                "attention_mass",
                format!("{} ({ty} cache, {} slots)", c.name, c.ctx),
                &qpos,
                |b, qpos| {
                    let mut mass = vec![0f32; c.shape.n_head * seq.len()];
                    b.attention_mass(c.shape, seq, 0, q0, qpos, &mut mass)?;
                    Ok(mass)
                },
            )?;
        }
    }
    Ok(r.reports)
}
