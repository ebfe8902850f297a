//! `out = x · Wᵀ` for weights `W [rows, cols]` in any supported block format and activations
//! `x [n_tok, cols]`, on the worker pool.
//!
//! Quantized weights meet activations quantized once per call to their 8-bit "vec-dot" format
//! (Q8_0, Q8_1 or Q8_K, as llama.cpp does) in integer dot products. Decode steps and other small
//! batches (up to [`STREAM_MAX_TOKENS`] tokens: a server's generating slots) stream through
//! the weights, each thread one contiguous, byte-balanced run of rows, every row meeting all the
//! batch's tokens while it is in L1; prompt batches use a blocked GEMM — each task owns a block
//! of weight rows and walks the tokens in tiles small enough for the block's rows and the tile's
//! activations to stay in L1 while they meet. Float weights (F32, F16, BF16) meet the f32
//! activations in the same tiles through [`FloatDot`], which widens each block of weight rows once
//! for a block of tokens and gives a token the same product in every batch.
//!
//! Several matrices applied to the same input (Q, K and V; gate and up) run as one parallel
//! region with one quantization of the input ([`matmul_many`]), so a decode step pays for one
//! synchronisation instead of three.

use std::cell::RefCell;

use ferrolm_kernels::quant::packed::TILE_ROWS;
use ferrolm_kernels::quant::{self, FloatDot, PackedActs, PackedRows, VecDot};

use crate::ops::{MatmulJob, Weight};
use crate::threads::{ThreadPool, parallel_for};

/// Weight rows per task in a prompt GEMM.
const GEMM_ROWS: usize = 32;

/// Tokens per GEMM tile: a tile's activations (at most ~1 KiB per token for the models we run)
/// and a task's rows fit in L1 together.
const GEMM_TOKENS: usize = 32;

/// Batches of at most this many tokens (decode steps, a server's batch of generating slots)
/// stream through the weights like a single token: the weights dominate the cost, as they are
/// read once for every token of the batch.
const STREAM_MAX_TOKENS: usize = 16;

/// Small batches of at least this many tokens split their stream into several runs per thread.
const SPLIT_FINER_TOKENS: usize = 4;

/// Weight rows per kernel call in a small batch's stream: with the batch's tokens they stay
/// in L1/L2 between the token tiles of the kernel.
const STREAM_ROWS: usize = 64;

/// Prompt batches at least this long quantize their activations in parallel.
const PARALLEL_QUANTIZE_MIN: usize = 8;

/// `out [n_tok, w.rows] = x [n_tok, w.cols] · Wᵀ`. `xq` is scratch for the quantized
/// activations (grown when too small, never shrunk).
pub fn matmul(pool: &ThreadPool, w: &Weight, x: &[f32], n_tok: usize, out: &mut [f32], xq: &mut Vec<u8>) {
    matmul_many(pool, x, n_tok, &mut [MatmulJob { w, out }], xq);
}

/// Every job's `out [n_tok, w.rows] = x [n_tok, cols] · Wᵀ`, in one parallel region. All
/// weights must have `cols` columns.
pub fn matmul_many(pool: &ThreadPool, x: &[f32], n_tok: usize, jobs: &mut [MatmulJob<'_>], xq: &mut Vec<u8>) {
    let Some(cols) = jobs.first().map(|j| j.w.cols) else { return };
    debug_assert_eq!(x.len(), n_tok * cols);
    if n_tok == 0 {
        return;
    }
    // Quantize the activations once per distinct vec-dot type (at most one per job).
    let mut plans: [Plan; MAX_JOBS] = [Plan::default(); MAX_JOBS];
    assert!(jobs.len() <= MAX_JOBS, "matmul_many: too many matrices");
    let mut total = 0usize;
    for (i, job) in jobs.iter().enumerate() {
        debug_assert_eq!(job.w.cols, cols);
        debug_assert_eq!(job.out.len(), n_tok * job.w.rows);
        let act = quant::vec_dot_type(job.w.ty).zip(quant::act_row_bytes(job.w.ty, cols));
        // Jobs with the same activation format share the first one's quantized rows.
        let earlier = plans[..i].iter().find(|p| act.is_some() && p.act == act).map(|p| p.offset);
        plans[i] = match (act, earlier) {
            (Some(_), Some(offset)) => Plan { act, offset, fresh: false },
            (Some((_, rb)), None) => {
                total += rb * n_tok;
                Plan { act, offset: total - rb * n_tok, fresh: true }
            }
            (None, _) => Plan::default(),
        };
    }
    if xq.len() < total {
        xq.resize(total, 0);
    }
    for (job, plan) in jobs.iter().zip(&plans) {
        if let (true, Some((_, rb))) = (plan.fresh, plan.act) {
            quantize(pool, job.w, x, n_tok, rb, &mut xq[plan.offset..plan.offset + rb * n_tok]);
        }
    }
    let xq: &[u8] = xq;

    let mut kernels: [Option<VecDot>; MAX_JOBS] = [None; MAX_JOBS];
    let mut floats: [Option<FloatDot>; MAX_JOBS] = [None; MAX_JOBS];
    let mut outs: [OutPtr; MAX_JOBS] = [OutPtr::NULL; MAX_JOBS];
    for (i, job) in jobs.iter_mut().enumerate() {
        outs[i] = OutPtr::new(job.out);
        if let Some((_, rb)) = plans[i].act {
            let k = VecDot::new(job.w.ty).ok().filter(|k| {
                job.w.rows == 0 || k.check(job.w.row(0), &xq[plans[i].offset..plans[i].offset + rb]).is_ok()
            });
            if k.is_none() {
                // Unreachable for weights validated at load; never leave stale numbers.
                job.out.fill(f32::NAN);
            }
            kernels[i] = k;
        } else {
            let k = FloatDot::new(job.w.ty)
                .ok()
                .filter(|k| job.w.rows == 0 || k.check(job.w.row(0), &x[..cols]).is_ok());
            if k.is_none() {
                job.out.fill(f32::NAN);
            }
            floats[i] = k;
        }
    }
    let n_jobs = jobs.len();
    let weights: [Option<&Weight>; MAX_JOBS] = std::array::from_fn(|i| jobs.get(i).map(|j| j.w));
    // Weights with a row-interleaved copy get their activations prepared once for every task.
    let mut spare = PACKED_ACTS.take();
    let mut packed: [Option<(&PackedRows, PackedActs<'_>)>; MAX_JOBS] = Default::default();
    for i in 0..n_jobs {
        if let (Some(w), Some((_, rb)), Some(_)) = (weights[i], plans[i].act, kernels[i])
            && let Some(p) = super::packed(w)
        {
            let x = &xq[plans[i].offset..plans[i].offset + rb * n_tok];
            packed[i] = Some((p, p.prepare(x, n_tok, spare.pop().unwrap_or_default())));
        }
    }
    let streamed = n_tok <= STREAM_MAX_TOKENS;
    // Rows and tokens per kernel call.
    let tiles = if streamed { (STREAM_ROWS, STREAM_MAX_TOKENS) } else { (GEMM_ROWS, GEMM_TOKENS) };
    // Rows r0..r1 of job i.
    let run = |i: usize, r0: usize, r1: usize| {
        let Some(w) = weights[i] else { return };
        if r0 >= r1 {
            return;
        }
        let out = outs[i];
        match (plans[i].act, kernels[i]) {
            (Some((_, rb)), Some(k)) => {
                let q = QuantRows {
                    k,
                    w,
                    xq: &xq[plans[i].offset..plans[i].offset + rb * n_tok],
                    rb,
                    n_tok,
                    tiles,
                };
                match &packed[i] {
                    Some((p, acts)) => q.run_packed(p, acts, r0, r1, out),
                    None => q.run(r0, r1, out),
                }
            }
            (Some(_), None) => {}
            (None, _) => {
                if let Some(k) = floats[i] {
                    float_rows(&k, w, (r0, r1), tiles, x, n_tok, out);
                }
            }
        }
    };

    if streamed {
        // Decode is a stream through the weights: each thread takes one contiguous run of about
        // the same number of bytes (running across matrix boundaries), so every core reads one
        // long sequential stream that the hardware prefetchers follow. Small interleaved blocks
        // measured half as fast with two threads as one stream per thread. A thread that joins
        // late finds its run taken by the others ([`parallel_for`] shares the runs dynamically).
        let shapes = jobs.iter().map(|j| (j.w.rows, j.w.row_bytes()));
        // From a few tokens on, the arithmetic outweighs the stream: more, shorter runs let a
        // thread that finishes early take over work instead of waiting for the other.
        let runs = if n_tok >= SPLIT_FINER_TOKENS { 4 * pool.n_threads() } else { pool.n_threads() };
        let split = DecodeSplit::new(shapes, runs);
        parallel_for(pool, split.n_tasks, |task| {
            let (i0, r0) = split.boundary(task);
            let (i1, r1) = split.boundary(task + 1);
            for i in i0..=i1.min(n_jobs - 1) {
                let from = if i == i0 { r0 } else { 0 };
                let to = if i == i1 { r1 } else { split.rows[i] };
                run(i, from, to);
            }
        });
    } else {
        // Prompt batches: blocks of rows of each matrix, numbered matrix after matrix.
        let mut tasks = [0usize; MAX_JOBS + 1];
        for i in 0..n_jobs {
            tasks[i + 1] = tasks[i] + weights[i].map_or(0, |w| w.rows).div_ceil(GEMM_ROWS);
        }
        parallel_for(pool, tasks[n_jobs], |task| {
            let i = (0..n_jobs).find(|&i| task < tasks[i + 1]).unwrap_or(0);
            let r0 = (task - tasks[i]) * GEMM_ROWS;
            let rows = weights[i].map_or(0, |w| w.rows);
            run(i, r0, (r0 + GEMM_ROWS).min(rows));
        });
    }
    spare.extend(packed.into_iter().flatten().map(|(_, acts)| acts.recycle()));
    PACKED_ACTS.set(spare);
}

/// One quantized job's rows as a task runs them: the kernel, the weight, the job's quantized
/// activations (`n_tok` rows of `rb` bytes) and the (rows, tokens) of a kernel call.
struct QuantRows<'a> {
    k: VecDot,
    w: &'a Weight,
    xq: &'a [u8],
    rb: usize,
    n_tok: usize,
    tiles: (usize, usize),
}

impl QuantRows<'_> {
    /// Rows `r0..r1` through the GGUF-layout kernels.
    fn run(&self, r0: usize, r1: usize, out: OutPtr) {
        if r0 >= r1 {
            return;
        }
        let w = self.w;
        if self.n_tok == 1 {
            // SAFETY: rows r0..r1 of this job belong to one task, claimed by exactly one
            // thread; the output holds `n_tok * rows` floats.
            let o = unsafe { out.slice(r0, r1 - r0) };
            // The block kernel streams the rows with prefetching and unpacks the
            // activations once: faster than a dot product per row.
            let w_rows = &w.data()[r0 * w.row_bytes()..r1 * w.row_bytes()];
            self.k.gemm(w_rows, r1 - r0, self.xq, 1, o, r1 - r0);
        } else {
            let (k, xq, rb) = (&self.k, self.xq, self.rb);
            tiled_rows(w, (r0, r1), self.tiles, self.n_tok, out, |w_rows, nr, t0, nt, tile| {
                k.gemm(w_rows, nr, &xq[t0 * rb..(t0 + nt) * rb], nt, tile, nr)
            });
        }
    }

    /// Rows `r0..r1` with the packed kernel for their whole packed tiles, the GGUF-layout
    /// kernels for the rest (a partial tile at either end, rows past the packed ones).
    fn run_packed(&self, p: &PackedRows, acts: &PackedActs<'_>, r0: usize, r1: usize, out: OutPtr) {
        let a = r0.next_multiple_of(TILE_ROWS).min(r1);
        let b = (r1.min(p.rows()) / TILE_ROWS * TILE_ROWS).max(a);
        self.run(r0, a, out);
        self.run(b, r1, out);
        let ldo = out.stride(self.n_tok);
        // Blocks of rows small enough to stay in L1 while the kernel walks the tokens in tiles
        // (a whole run at once would stream a batch of more than one token tile from memory
        // once per tile).
        let step = self.tiles.0.next_multiple_of(TILE_ROWS);
        for c in (a..b).step_by(step) {
            let e = (c + step).min(b);
            // SAFETY: this task owns rows c..e of every token's output row (it alone was handed
            // rows r0..r1 of this job); `span` checks that they lie inside the output.
            unsafe {
                p.gemm_ptr(c..e, acts, 0..self.n_tok, out.span(c, (self.n_tok - 1) * ldo + e - c), ldo)
            };
        }
    }
}

/// How a decode matmul's rows (those of every job, one after the other) split into one
/// contiguous run per thread, balanced by weight bytes.
struct DecodeSplit {
    n_tasks: usize,
    rows: [usize; MAX_JOBS],
    row_bytes: [usize; MAX_JOBS],
    /// Weight bytes of the jobs before job `i` (`[n_jobs]`: all of them).
    before: [usize; MAX_JOBS + 1],
    n_jobs: usize,
}

impl DecodeSplit {
    /// The split of matrices given as (rows, bytes per row), at most [`MAX_JOBS`] of them.
    fn new(shapes: impl Iterator<Item = (usize, usize)>, n_threads: usize) -> Self {
        let mut s = DecodeSplit {
            n_tasks: n_threads.max(1),
            rows: [0; MAX_JOBS],
            row_bytes: [0; MAX_JOBS],
            before: [0; MAX_JOBS + 1],
            n_jobs: 0,
        };
        for (i, (rows, row_bytes)) in shapes.take(MAX_JOBS).enumerate() {
            s.rows[i] = rows;
            s.row_bytes[i] = row_bytes.max(1);
            s.before[i + 1] = s.before[i] + rows * s.row_bytes[i];
            s.n_jobs = i + 1;
        }
        s
    }

    /// Where run `t` starts (run `n_tasks`: the end), as (job, row). Rows are rounded to
    /// multiples of [`DECODE_ALIGN`] so that two threads never write one cache line of output.
    fn boundary(&self, t: usize) -> (usize, usize) {
        if self.n_jobs == 0 {
            return (0, 0);
        }
        if t >= self.n_tasks {
            return (self.n_jobs - 1, self.rows[self.n_jobs - 1]);
        }
        let total = self.before[self.n_jobs];
        let target = (total as u128 * t as u128 / self.n_tasks as u128) as usize;
        let i = (0..self.n_jobs).rfind(|&i| self.before[i] <= target).unwrap_or(0);
        let row = (target - self.before[i]) / self.row_bytes[i];
        let row = (row + DECODE_ALIGN / 2) / DECODE_ALIGN * DECODE_ALIGN;
        (i, row.min(self.rows[i]))
    }
}

/// Row granularity of the decode split: 16 f32 outputs fill one 64-byte cache line.
const DECODE_ALIGN: usize = 16;

/// Most matrices one [`matmul_many`] call takes (Q, K and V).
const MAX_JOBS: usize = 3;

/// How a job's activations are quantized: the vec-dot type and row bytes (`None` for float
/// weights), the offset of its rows in the scratch, and whether this job quantizes them.
#[derive(Clone, Copy, Default)]
struct Plan {
    act: Option<(ferrolm_kernels::GgmlType, usize)>,
    offset: usize,
    fresh: bool,
}

/// Quantizes `x [n_tok, w.cols]` for weights like `w` into `xq [n_tok, rb]`.
fn quantize(pool: &ThreadPool, w: &Weight, x: &[f32], n_tok: usize, rb: usize, xq: &mut [u8]) {
    let cols = w.cols;
    if n_tok < PARALLEL_QUANTIZE_MIN {
        for (q, xr) in xq.chunks_mut(rb).zip(x.chunks(cols)) {
            // Lengths come from act_row_bytes, so this cannot fail.
            let res = quant::quantize_activations(w.ty, xr, q);
            debug_assert!(res.is_ok());
        }
        return;
    }
    let out = OutBytes(xq.as_mut_ptr(), xq.len());
    parallel_for(pool, n_tok, |t| {
        // SAFETY: each token index is claimed by one thread and owns bytes t*rb..(t+1)*rb.
        let q = unsafe { out.slice(t * rb, rb) };
        let res = quant::quantize_activations(w.ty, &x[t * cols..(t + 1) * cols], q);
        debug_assert!(res.is_ok());
    });
}

thread_local! {
    /// A task's products before they go to the strided output. `[tokens, rows]`
    static TILE: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    /// Buffers for packed weights' prepared activations, reused by the next call.
    static PACKED_ACTS: std::cell::Cell<Vec<PackedActs<'static>>> = const { std::cell::Cell::new(Vec::new()) };
}

/// Rows `r0..r1` of a weight against every token: blocks of at most `max_rows` rows, each against
/// the tokens in tiles of at most `max_tokens`. `kernel(w_rows, nr, t0, nt, tile)` writes the
/// products of the `nr` rows `w_rows` with tokens `t0..t0 + nt` to `tile[t * nr + r]`.
fn tiled_rows(
    w: &Weight,
    (r0, r1): (usize, usize),
    (max_rows, max_tokens): (usize, usize),
    n_tok: usize,
    out: OutPtr,
    kernel: impl Fn(&[u8], usize, usize, usize, &mut [f32]),
) {
    TILE.with_borrow_mut(|tile| {
        let ldo = out.stride(n_tok);
        let len = max_rows.min(r1 - r0) * max_tokens.min(n_tok);
        if tile.len() < len {
            tile.resize(len, 0.0);
        }
        for b0 in (r0..r1).step_by(max_rows) {
            let nr = max_rows.min(r1 - b0);
            let w_rows = &w.data()[b0 * w.row_bytes()..(b0 + nr) * w.row_bytes()];
            for t0 in (0..n_tok).step_by(max_tokens) {
                let nt = max_tokens.min(n_tok - t0);
                kernel(w_rows, nr, t0, nt, &mut tile[..nt * nr]);
                for t in 0..nt {
                    // SAFETY: this task owns rows r0..r1 of every token's output row.
                    let o = unsafe { out.slice((t0 + t) * ldo + b0, nr) };
                    o.copy_from_slice(&tile[t * nr..(t + 1) * nr]);
                }
            }
        }
    });
}

/// Rows `r0..r1` of a float weight (F32, F16, BF16) against every token of `x [n_tok, cols]`.
fn float_rows(
    k: &FloatDot,
    w: &Weight,
    (r0, r1): (usize, usize),
    tiles: (usize, usize),
    x: &[f32],
    n_tok: usize,
    out: OutPtr,
) {
    if r0 >= r1 {
        return;
    }
    let cols = w.cols;
    if n_tok == 1 {
        // SAFETY: rows r0..r1 of this job belong to one task, claimed by exactly one thread;
        // the output holds `n_tok * rows` floats.
        let o = unsafe { out.slice(r0, r1 - r0) };
        let w_rows = &w.data()[r0 * w.row_bytes()..r1 * w.row_bytes()];
        k.gemm(w_rows, r1 - r0, x, 1, o, r1 - r0);
        return;
    }
    tiled_rows(w, (r0, r1), tiles, n_tok, out, |w_rows, nr, t0, nt, tile| {
        k.gemm(w_rows, nr, &x[t0 * cols..(t0 + nt) * cols], nt, tile, nr)
    });
}

/// A job's output `[n_tok, rows]` shared by the tasks, which write disjoint parts of it.
#[derive(Clone, Copy)]
struct OutPtr(*mut f32, usize);

// SAFETY: tasks only write disjoint ranges (see each `slice` call), and the pointer outlives the
// parallel region (it borrows a job's `out`, held by the caller until `matmul_many` returns).
unsafe impl Send for OutPtr {}
// SAFETY: as above.
unsafe impl Sync for OutPtr {}

impl OutPtr {
    const NULL: OutPtr = OutPtr(std::ptr::null_mut(), 0);

    fn new(out: &mut [f32]) -> Self {
        Self(out.as_mut_ptr(), out.len())
    }

    /// Floats per token row (`rows`).
    fn stride(&self, n_tok: usize) -> usize {
        self.1 / n_tok
    }

    /// A pointer to float `start`, after checking that `start..start + len` is in bounds.
    fn span(&self, start: usize, len: usize) -> *mut f32 {
        assert!(start + len <= self.1, "matmul output range out of bounds");
        // SAFETY: in bounds (checked above).
        unsafe { self.0.add(start) }
    }

    /// `len` floats from `start`.
    ///
    /// # Safety
    /// No other live reference may overlap `start..start + len`.
    #[allow(clippy::mut_from_ref)]
    unsafe fn slice(&self, start: usize, len: usize) -> &mut [f32] {
        assert!(start + len <= self.1, "matmul output range out of bounds");
        // SAFETY: in bounds (checked above); exclusivity is the caller's promise.
        unsafe { std::slice::from_raw_parts_mut(self.0.add(start), len) }
    }
}

/// Quantized activations `[n_tok, rb]` shared by the quantizing tasks.
#[derive(Clone, Copy)]
struct OutBytes(*mut u8, usize);

// SAFETY: tasks write disjoint token rows; the buffer outlives the parallel region.
unsafe impl Send for OutBytes {}
// SAFETY: as above.
unsafe impl Sync for OutBytes {}

impl OutBytes {
    /// `len` bytes from `start`.
    ///
    /// # Safety
    /// No other live reference may overlap `start..start + len`.
    #[allow(clippy::mut_from_ref)]
    unsafe fn slice(&self, start: usize, len: usize) -> &mut [u8] {
        assert!(start + len <= self.1, "activation range out of bounds");
        // SAFETY: in bounds (checked above); exclusivity is the caller's promise.
        unsafe { std::slice::from_raw_parts_mut(self.0.add(start), len) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrolm_kernels::GgmlType;
    use rand::rngs::StdRng;
    use rand::{Rng as _, SeedableRng as _};

    /// A `[rows, cols]` weight of type `ty` quantized from random values.
    fn random_weight(rng: &mut StdRng, ty: GgmlType, rows: usize, cols: usize) -> Weight {
        let rb = ty.row_bytes(cols as u64).map_or(0, |b| b as usize);
        let mut bytes = vec![0u8; rows * rb];
        let mut row = vec![0f32; cols];
        for dst in bytes.chunks_exact_mut(rb) {
            row.iter_mut().for_each(|v| *v = rng.random_range(-1.0..1.0));
            quant::quantize_row(ty, &row, dst).expect("quantize");
        }
        Weight::owned(ty, rows, cols, bytes)
    }

    /// Every batch size, through the decode stream (small batches) and the prompt GEMM (large
    /// ones), gives each token exactly the result it gets alone, and that result is the
    /// dot product with the dequantized weights up to the activations' 8-bit quantization.
    #[test]
    fn every_batch_size_gives_each_token_its_single_token_result() {
        let pool = crate::threads::pool();
        let mut rng = StdRng::seed_from_u64(7);
        // A multiple of the K-quants' 256-value super-blocks.
        let cols = 768;
        let types = [
            GgmlType::Q4_1,
            GgmlType::Q8_0,
            GgmlType::Q4_K,
            GgmlType::MXFP4,
            GgmlType::F16,
            GgmlType::BF16,
            GgmlType::F32,
        ];
        for ty in types {
            // Q, K and V shapes of a small model: one region over three matrices.
            let ws: Vec<Weight> =
                [200, 64, 64].iter().map(|&r| random_weight(&mut rng, ty, r, cols)).collect();
            let mut dense = vec![0f32; cols];
            let mut xq = Vec::new();
            for n_tok in [1, 2, 3, 5, 8, 16, 17, 40] {
                let x: Vec<f32> = (0..n_tok * cols).map(|_| rng.random_range(-2.0..2.0)).collect();
                let mut outs: Vec<Vec<f32>> = ws.iter().map(|w| vec![f32::NAN; n_tok * w.rows]).collect();
                let mut jobs: Vec<MatmulJob<'_>> =
                    ws.iter().zip(outs.iter_mut()).map(|(w, out)| MatmulJob { w, out }).collect();
                matmul_many(&pool, &x, n_tok, &mut jobs, &mut xq);
                for (w, out) in ws.iter().zip(&outs) {
                    for t in 0..n_tok {
                        let xt = &x[t * cols..(t + 1) * cols];
                        let mut alone = vec![f32::NAN; w.rows];
                        matmul(&pool, w, xt, 1, &mut alone, &mut xq);
                        let got = &out[t * w.rows..(t + 1) * w.rows];
                        assert!(
                            got.iter().zip(&alone).all(|(a, b)| a.to_bits() == b.to_bits()),
                            "{ty:?} n_tok={n_tok} token {t}: batched result differs from the token alone"
                        );
                        for (r, &v) in got.iter().enumerate() {
                            w.dequantize_row(r, &mut dense);
                            let exact: f32 = dense.iter().zip(xt).map(|(a, b)| a * b).sum();
                            let norm: f32 = dense.iter().zip(xt).map(|(a, b)| (a * b).abs()).sum();
                            assert!(
                                (v - exact).abs() <= 0.02 * norm + 1e-3,
                                "{ty:?} n_tok={n_tok} token {t} row {r}: {v} vs {exact}"
                            );
                        }
                    }
                }
            }
        }
    }

    /// Every row of every matrix belongs to exactly one run, runs are contiguous and in order,
    /// and no run is far from its fair share of bytes.
    #[test]
    fn decode_split_covers_every_row_once() {
        let cases: &[&[(usize, usize)]] = &[
            &[(576, 324)],
            &[(576, 324), (192, 324), (192, 324)],
            &[(1536, 1152), (1536, 1152)],
            &[(262144, 680)],
            &[(7, 100), (0, 40), (33, 12)],
            &[(1, 1)],
        ];
        for shapes in cases {
            for n_threads in 1..=5 {
                let split = DecodeSplit::new(shapes.iter().copied(), n_threads);
                let mut seen: Vec<Vec<u32>> = shapes.iter().map(|s| vec![0; s.0]).collect();
                let mut bytes = Vec::new();
                for t in 0..split.n_tasks {
                    let (i0, r0) = split.boundary(t);
                    let (i1, r1) = split.boundary(t + 1);
                    assert!((i0, r0) <= (i1, r1), "runs out of order");
                    let mut b = 0;
                    for i in i0..=i1.min(shapes.len() - 1) {
                        let from = if i == i0 { r0 } else { 0 };
                        let to = if i == i1 { r1 } else { shapes[i].0 };
                        seen[i].iter_mut().take(to).skip(from).for_each(|n| *n += 1);
                        b += (to.max(from) - from) * shapes[i].1;
                    }
                    bytes.push(b);
                }
                assert!(seen.iter().flatten().all(|&n| n == 1), "{shapes:?} t={n_threads}");
                let total: usize = shapes.iter().map(|s| s.0 * s.1).sum();
                let slack = DECODE_ALIGN * shapes.iter().map(|s| s.1).max().unwrap_or(0);
                for b in bytes {
                    assert!(b <= total / n_threads + slack, "{shapes:?} t={n_threads}: {b}");
                }
            }
        }
    }
}
