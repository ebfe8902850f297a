//! Kernel micro-benchmarks: dequantization, the decode matvec and the prompt GEMM for the weight
//! formats of the test models, at every instruction-set level this CPU supports.
//!
//! `cargo bench -p ferrolm-kernels --bench kernels [FILTER]`. Group names say what is measured:
//! `dequantize/TYPE` (throughput in bytes of quantized input), `matvec_dot/TYPE/ISA` (one `dot`
//! per row of a matrix, as a decode step does; bytes of weights), `matvec_gemm/TYPE/ISA` (the same
//! matvec through `gemm` with one token, 16 rows a call), `gemm/TYPE/ISA` (64 tokens, 16 rows a
//! call, or the packed copy 32 rows a call where the CPU has one; elements are multiply-adds × 2,
//! i.e. FLOP), `gemm8/TYPE/ISA|packed` (8 tokens, a server's generating slots, through the
//! GGUF-layout kernel and the packed copy).

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput};
use ferrolm_kernels::quant::{
    PackedActs, PackedRows, VecDot, act_row_bytes, dequantize_row, quantize_activations, quantize_row,
};
use ferrolm_kernels::{GgmlType, Isa};
use rand::{Rng, SeedableRng, rngs::StdRng};

/// Formats of the test models with the matrix shape (rows × cols) each is benchmarked on: the
/// 32-value formats on SmolLM2-135M's FFN shape, the K-quants on Gemma-3-270M's `ffn_down`.
const CASES: [(GgmlType, usize, usize); 12] = [
    (GgmlType::Q4_0, 1536, 576),
    (GgmlType::IQ4_NL, 1536, 576),
    (GgmlType::Q4_1, 1536, 576),
    (GgmlType::Q5_0, 1536, 576),
    (GgmlType::Q5_1, 1536, 576),
    (GgmlType::Q8_0, 1536, 576),
    (GgmlType::Q2_K, 640, 2048),
    (GgmlType::Q3_K, 640, 2048),
    (GgmlType::Q4_K, 640, 2048),
    (GgmlType::Q5_K, 640, 2048),
    (GgmlType::Q6_K, 640, 2048),
    (GgmlType::IQ4_XS, 640, 2048),
];

/// Rows per `gemm` call, as the engine's matmul hands them out.
const ROW_BLOCK: usize = 16;
/// Tokens of the prompt GEMM benchmark.
const TOKENS: usize = 64;

/// `rows` random weight rows of `cols` values: quantized from uniform data where a quantizer
/// exists, otherwise random bytes with moderate f16 scales.
fn weights(ty: GgmlType, rows: usize, cols: usize, rng: &mut StdRng) -> Vec<u8> {
    let rb = ty.row_bytes(cols as u64).expect("whole blocks") as usize;
    let mut out = vec![0u8; rb * rows];
    let x: Vec<f32> = (0..cols).map(|_| rng.random_range(-1.0f32..1.0)).collect();
    for row in out.chunks_exact_mut(rb) {
        if quantize_row(ty, &x, row).is_ok() {
            continue;
        }
        rng.fill(row);
        let d_at = match ty {
            GgmlType::Q6_K => 208,
            GgmlType::Q3_K => 108,
            GgmlType::Q2_K => 80,
            _ => 0,
        };
        for b in row.chunks_exact_mut(ty.type_size()) {
            b[d_at..d_at + 2].copy_from_slice(&half::f16::from_f32(0.01).to_le_bytes());
            let dmin_at = match ty {
                GgmlType::Q5_K | GgmlType::Q5_1 => Some(2),
                GgmlType::Q2_K => Some(82),
                _ => None,
            };
            if let Some(at) = dmin_at {
                b[at..at + 2].copy_from_slice(&half::f16::from_f32(0.01).to_le_bytes());
            }
        }
    }
    out
}

/// `nt` activation rows of `cols` values quantized for `ty`.
fn activations(ty: GgmlType, cols: usize, nt: usize, rng: &mut StdRng) -> Vec<u8> {
    let rb = act_row_bytes(ty, cols).expect("whole blocks");
    let mut out = vec![0u8; rb * nt];
    for row in out.chunks_exact_mut(rb) {
        let x: Vec<f32> = (0..cols).map(|_| rng.random_range(-2.0f32..2.0)).collect();
        quantize_activations(ty, &x, row).expect("valid");
    }
    out
}

/// Every supported level that has its own kernel for `ty` (a level that falls back to a lower
/// one is skipped).
fn levels(ty: GgmlType) -> Vec<VecDot> {
    Isa::supported()
        .into_iter()
        .filter_map(|isa| VecDot::with_isa(ty, isa).ok().filter(|k| k.isa() == isa))
        .collect()
}

fn dequantize(c: &mut Criterion) {
    let mut rng = StdRng::seed_from_u64(1);
    let mut g = c.benchmark_group("dequantize");
    for (ty, rows, cols) in CASES {
        let w = weights(ty, rows, cols, &mut rng);
        let rb = w.len() / rows;
        let mut out = vec![0f32; cols];
        g.throughput(Throughput::Bytes(w.len() as u64));
        g.bench_function(ty.name(), |b| {
            b.iter(|| {
                for row in w.chunks_exact(rb) {
                    dequantize_row(ty, black_box(row), &mut out).expect("valid");
                }
                black_box(&out);
            })
        });
    }
    g.finish();
}

fn matvec(c: &mut Criterion) {
    let mut rng = StdRng::seed_from_u64(2);
    for (ty, rows, cols) in CASES {
        let w = weights(ty, rows, cols, &mut rng);
        let xq = activations(ty, cols, 1, &mut rng);
        let rb = w.len() / rows;
        let mut out = vec![0f32; rows];
        let mut g = c.benchmark_group(format!("matvec_dot/{ty}"));
        g.throughput(Throughput::Bytes(w.len() as u64));
        for k in levels(ty) {
            g.bench_function(BenchmarkId::from_parameter(k.isa()), |b| {
                b.iter(|| {
                    for (o, row) in out.iter_mut().zip(w.chunks_exact(rb)) {
                        *o = k.dot(black_box(row), &xq);
                    }
                    black_box(&out);
                })
            });
        }
        g.finish();
        let mut g = c.benchmark_group(format!("matvec_gemm/{ty}"));
        g.throughput(Throughput::Bytes(w.len() as u64));
        for k in levels(ty) {
            g.bench_function(BenchmarkId::from_parameter(k.isa()), |b| {
                b.iter(|| {
                    for (o, ws) in out.chunks_mut(ROW_BLOCK).zip(w.chunks(ROW_BLOCK * rb)) {
                        k.gemm(black_box(ws), o.len(), &xq, 1, o, o.len());
                    }
                    black_box(&out);
                })
            });
        }
        g.finish();
    }
}

fn gemm(c: &mut Criterion) {
    let mut rng = StdRng::seed_from_u64(3);
    for (ty, rows, cols) in CASES {
        let w = weights(ty, rows, cols, &mut rng);
        let xq = activations(ty, cols, TOKENS, &mut rng);
        let rb = w.len() / rows;
        let mut out = vec![0f32; rows * TOKENS];
        let mut g = c.benchmark_group(format!("gemm/{ty}"));
        g.throughput(Throughput::Elements((2 * rows * cols * TOKENS) as u64));
        for k in levels(ty) {
            g.bench_function(BenchmarkId::from_parameter(k.isa()), |b| {
                b.iter(|| {
                    for (r0, ws) in (0..rows).step_by(ROW_BLOCK).zip(w.chunks(ROW_BLOCK * rb)) {
                        let nr = ws.len() / rb;
                        k.gemm(black_box(ws), nr, &xq, TOKENS, &mut out[r0..], rows);
                    }
                    black_box(&out);
                })
            });
        }
        if let Some(p) = PackedRows::new(ty, &w, rows, cols) {
            let acts = p.prepare(&xq, TOKENS, PackedActs::default());
            g.bench_function(BenchmarkId::from_parameter("packed"), |b| {
                b.iter(|| {
                    for r0 in (0..p.rows()).step_by(2 * ROW_BLOCK) {
                        p.gemm(r0..r0 + 2 * ROW_BLOCK, black_box(&acts), &mut out[r0..], rows);
                    }
                    black_box(&out);
                })
            });
        }
        g.finish();
    }
}

/// The decode LM head of SmolLM2-135M (Q8_0 token embeddings, 49152 × 576, 30 MB): a matvec
/// that streams from DRAM rather than cache.
fn lm_head(c: &mut Criterion) {
    let mut rng = StdRng::seed_from_u64(4);
    let (ty, rows, cols) = (GgmlType::Q8_0, 49152, 576);
    let w = weights(ty, 1, cols, &mut rng).repeat(rows);
    let xq = activations(ty, cols, 1, &mut rng);
    let rb = w.len() / rows;
    let mut out = vec![0f32; rows];
    let mut g = c.benchmark_group("lm_head_gemm/q8_0");
    g.throughput(Throughput::Bytes(w.len() as u64));
    for k in levels(ty).into_iter().filter(|k| k.isa() != Isa::Scalar) {
        g.bench_function(BenchmarkId::from_parameter(k.isa()), |b| {
            b.iter(|| {
                for (o, ws) in out.chunks_mut(ROW_BLOCK).zip(w.chunks(ROW_BLOCK * rb)) {
                    k.gemm(black_box(ws), o.len(), &xq, 1, o, o.len());
                }
                black_box(&out);
            })
        });
    }
    g.finish();
}

/// A server's batch of generating slots: `SLOTS` tokens against SmolLM2-135M's FFN-up shape
/// (1536 × 576; Q5_K: Gemma-3-270M's `ffn_down`, 640 × 2048), 64 rows a call as the engine's
/// stream hands them out, through the GGUF-layout kernel of the best level and through the
/// packed (row-interleaved) copy where the CPU has one.
fn small_batch(c: &mut Criterion) {
    const SLOTS: usize = 8;
    let mut rng = StdRng::seed_from_u64(5);
    for ty in [GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q8_0, GgmlType::Q5_K] {
        let (rows, cols) = if ty == GgmlType::Q5_K { (640, 2048) } else { (1536, 576) };
        let w = weights(ty, rows, cols, &mut rng);
        let xq = activations(ty, cols, SLOTS, &mut rng);
        let rb = w.len() / rows;
        let mut out = vec![0f32; rows * SLOTS];
        let mut g = c.benchmark_group(format!("gemm{SLOTS}/{ty}"));
        g.throughput(Throughput::Elements((2 * rows * cols * SLOTS) as u64));
        let k = VecDot::new(ty).expect("kernel");
        g.bench_function(BenchmarkId::from_parameter(k.isa()), |b| {
            b.iter(|| {
                for (r0, ws) in (0..rows).step_by(64).zip(w.chunks(64 * rb)) {
                    k.gemm(black_box(ws), ws.len() / rb, &xq, SLOTS, &mut out[r0..], rows);
                }
                black_box(&out);
            })
        });
        if let Some(p) = PackedRows::new(ty, &w, rows, cols) {
            let acts = p.prepare(&xq, SLOTS, PackedActs::default());
            g.bench_function(BenchmarkId::from_parameter("packed"), |b| {
                b.iter(|| {
                    for r0 in (0..rows).step_by(64) {
                        p.gemm(r0..r0 + 64, black_box(&acts), &mut out[r0..], rows);
                    }
                    black_box(&out);
                })
            });
        }
        g.finish();
    }
}

fn main() {
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_millis(900))
        .sample_size(15)
        .configure_from_args();
    dequantize(&mut c);
    matvec(&mut c);
    gemm(&mut c);
    lm_head(&mut c);
    small_batch(&mut c);
    c.final_summary();
}
