//! `out = x · Wᵀ` for weights `W [rows, cols]` in any supported block format and activations
//! `x [n_tok, cols]`, on the worker pool.
//!
//! Quantized weights meet activations quantized once per call to their 8-bit "vec-dot" format
//! (Q8_0, Q8_1 or Q8_K, as llama.cpp does) in integer dot products: a matvec per row for one
//! token (decode), a blocked GEMM for prompt batches — each task owns a block of weight rows and
//! walks the tokens in tiles small enough for the block's rows and the tile's activations to
//! stay in L1 while they meet. Float weights (F32, F16, BF16) dequantize each row once and reuse
//! it for every token.
//!
//! Several matrices applied to the same input (Q, K and V; gate and up) run as one parallel
//! region with one quantization of the input ([`matmul_many`]), so a decode step pays for one
//! synchronisation instead of three.

use std::cell::RefCell;

use ferrolm_kernels::quant::{self, VecDot};
use ferrolm_kernels::simd;

use crate::model::weights::Weight;
use crate::threads::{ThreadPool, parallel_for};

/// Weight rows per task in a decode matvec.
const DECODE_ROWS: usize = 32;

/// Weight rows per task in a prompt GEMM.
const GEMM_ROWS: usize = 32;

/// Tokens per GEMM tile: a tile's activations (at most ~1 KiB per token for the models we run)
/// and a task's rows fit in L1 together.
const GEMM_TOKENS: usize = 32;

/// Prompt batches at least this long quantize their activations in parallel.
const PARALLEL_QUANTIZE_MIN: usize = 8;

/// One matrix of a [`matmul_many`] call and where its product goes. `out`: `[n_tok, w.rows]`.
pub struct MatmulJob<'a> {
    /// The weight.
    pub w: &'a Weight,
    /// The product.
    pub out: &'a mut [f32],
}

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

    // Tasks: blocks of rows of each matrix, numbered matrix after matrix.
    let block = if n_tok == 1 { DECODE_ROWS } else { GEMM_ROWS };
    let mut tasks = [0usize; MAX_JOBS + 1];
    let mut kernels: [Option<VecDot>; MAX_JOBS] = [None; MAX_JOBS];
    let mut outs: [OutPtr; MAX_JOBS] = [OutPtr::NULL; MAX_JOBS];
    for (i, job) in jobs.iter_mut().enumerate() {
        tasks[i + 1] = tasks[i] + job.w.rows.div_ceil(block);
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
        }
    }
    let n_jobs = jobs.len();
    let weights: [Option<&Weight>; MAX_JOBS] = std::array::from_fn(|i| jobs.get(i).map(|j| j.w));
    parallel_for(pool, tasks[n_jobs], |task| {
        let i = (0..n_jobs).find(|&i| task < tasks[i + 1]).unwrap_or(0);
        let Some(w) = weights[i] else { return };
        let r0 = (task - tasks[i]) * block;
        let r1 = (r0 + block).min(w.rows);
        let out = outs[i];
        match (plans[i].act, kernels[i]) {
            (Some((_, rb)), Some(k)) => {
                let xq = &xq[plans[i].offset..plans[i].offset + rb * n_tok];
                if n_tok == 1 {
                    // SAFETY: task `task` is claimed by exactly one thread and owns rows r0..r1 of
                    // this job's output, which hold `n_tok * rows` floats.
                    let o = unsafe { out.slice(r0, r1 - r0) };
                    // The block kernel streams the rows with prefetching and unpacks the
                    // activations once: faster than a dot product per row.
                    let w_rows = &w.data()[r0 * w.row_bytes()..r1 * w.row_bytes()];
                    k.gemm(w_rows, r1 - r0, xq, 1, o, r1 - r0);
                } else {
                    gemm_block(&k, w, r0, r1, xq, rb, n_tok, out);
                }
            }
            (Some(_), None) => {}
            (None, _) => float_block(w, r0, r1, x, n_tok, out),
        }
    });
}

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

/// Rows `r0..r1` of a quantized weight against every token, tile by tile.
#[allow(clippy::too_many_arguments)]
fn gemm_block(k: &VecDot, w: &Weight, r0: usize, r1: usize, xq: &[u8], rb: usize, n_tok: usize, out: OutPtr) {
    let nr = r1 - r0;
    let w_rows = &w.data()[r0 * w.row_bytes()..r1 * w.row_bytes()];
    let mut tile = [0f32; GEMM_ROWS * GEMM_TOKENS]; // [tokens, rows]
    for t0 in (0..n_tok).step_by(GEMM_TOKENS) {
        let nt = GEMM_TOKENS.min(n_tok - t0);
        k.gemm(w_rows, nr, &xq[t0 * rb..(t0 + nt) * rb], nt, &mut tile, nr);
        for t in 0..nt {
            // SAFETY: this task owns rows r0..r1 of every token's output row.
            let o = unsafe { out.slice((t0 + t) * out.stride(n_tok) + r0, nr) };
            o.copy_from_slice(&tile[t * nr..(t + 1) * nr]);
        }
    }
}

thread_local! {
    /// One dequantized float weight row.
    static ROW: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Rows `r0..r1` of a float weight (F32, F16, BF16) against every token.
fn float_block(w: &Weight, r0: usize, r1: usize, x: &[f32], n_tok: usize, out: OutPtr) {
    let cols = w.cols;
    let ldo = out.stride(n_tok);
    if n_tok == 1 {
        // SAFETY: this task owns rows r0..r1 of the single output row.
        let o = unsafe { out.slice(r0, r1 - r0) };
        for (r, o) in (r0..r1).zip(o) {
            // Lengths were validated when the weight was loaded.
            *o = quant::dot_f32(w.ty, w.row(r), x).unwrap_or(f32::NAN);
        }
        return;
    }
    ROW.with(|row| {
        let mut row = row.borrow_mut();
        row.resize(cols, 0.0);
        for r in r0..r1 {
            w.dequantize_row(r, &mut row);
            for t in 0..n_tok {
                // SAFETY: this task owns column r of every token's output row.
                let o = unsafe { out.slice(t * ldo + r, 1) };
                o[0] = simd::dot_f32(&row, &x[t * cols..(t + 1) * cols]);
            }
        }
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
