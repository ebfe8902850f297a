// Matrix products and row gathers on quantized weights (driven by gpu/matmul.rs).
//
// Weights are GGML blocks read as bytes (layouts in ferrolm_kernels::quant). For a quantized
// weight the activations are first quantized on the device into the weight's "vec_dot type"
// (q_act_q8_0 / q_act_q8_1 / q_act_q8_k), bit for bit as ferrolm_kernels::quant::
// quantize_activations does on the CPU; the matmul kernels (mm_*) then take integer dot
// products of 32-value groups and combine them with the blocks' f32 scales as the CPU's scalar
// reference does. Float weights (mm_f32, mm_f16, mm_bf16) multiply f32 activations directly.
//
// Matmul launch: global [rows * MM_WG, n], local [MM_WG, 1]: one work group per (output row,
// token). Each work item strides over the row's 32-value groups (elements for float weights),
// then a tree reduction in local memory sums the work items' partial results. The tiled
// kernels (mmt_*, for batches of at least MM_TT tokens) take global [rows * MM_WG,
// ceil(n / MM_TT)]: one work group per (output row, MM_TT tokens), same sums.
//
// Gather launch (q_get_*): global [cols, ids], one work item per output value.
//
// Contraction of a * b + c into fused multiply-adds is off in this file so that dequantized
// values round exactly like the CPU's (separate multiply and add); it is restored at the end.

#pragma OPENCL FP_CONTRACT OFF

// Work items per matmul work group (MM_WG in matmul.rs; a power of two).
#define MM_WG 64

// Bytes per block of each format.
#define QB_Q4_0 18
#define QB_Q4_1 20
#define QB_Q5_0 22
#define QB_Q5_1 24
#define QB_Q8_0 34
#define QB_Q8_1 36
#define QB_Q2_K 84
#define QB_Q3_K 110
#define QB_Q4_K 144
#define QB_Q5_K 176
#define QB_Q6_K 210
#define QB_Q8_K 292

// ---- Byte access -------------------------------------------------------------------------

// Signed byte `i` of `p`.
inline int q_i8(__global const uchar *p, uint i) {
    return (int)as_char(p[i]);
}

// Little-endian i16 at byte offset `off` of `p`.
inline int q_i16(__global const uchar *p, uint off) {
    return (int)as_short((ushort)(p[off] | (p[off + 1] << 8)));
}

// Little-endian u32 at byte offset `off` of `p` (unaligned-safe).
inline uint q_u32(__global const uchar *p, uint off) {
    return (uint)p[off] | ((uint)p[off + 1] << 8) | ((uint)p[off + 2] << 16) | ((uint)p[off + 3] << 24);
}

// bf16 at byte offset `off` of `p`, as f32.
inline float q_bf16(__global const uchar *p, uint off) {
    return as_float(((uint)p[off] | ((uint)p[off + 1] << 8)) << 16);
}

// Value `i` (0..32) of a 32-value block of nibbles `qs` (16 bytes: the low nibbles are values
// 0..16, the high nibbles values 16..32) plus 16 times bit `i` of `qh`, the little-endian u32 of
// fifth bits of the 5-bit formats (0 for the 4-bit formats).
inline int q_nib5(__global const uchar *qs, uint qh, uint i) {
    uint b = qs[i & 15];
    uint v = (i < 16) ? (b & 15) : (b >> 4);
    return (int)(v | (((qh >> i) & 1) << 4));
}

// 6-bit scale and minimum of sub-block `j` (0..8) from the 12 packed bytes `s` of a Q4_K block.
inline int2 q_scale_min_k4(__global const uchar *s, uint j) {
    if (j < 4) {
        return MAKE_INT2(s[j] & 63, s[j + 4] & 63);
    }
    return MAKE_INT2((s[j + 4] & 15) | ((s[j - 4] >> 6) << 4), (s[j + 4] >> 4) | ((s[j] >> 6) << 4));
}

// ---- Activation quantizers ---------------------------------------------------------------
//
// One work item per activation block; `x` [n, cols] is contiguous, so block `g` of the whole
// batch is x[32 g..] (x[256 g..] for Q8_K) and its output sits at g times the block's bytes.

// Quantizes 32 values GGML x86 style into `qs`: amax = max |x|, d = amax / 127,
// id = 127 / amax (0 for an all-zero block), q = round_half_even(x * id) clamped to +-127.
// Returns d; `sum` receives the sum of the quants.
inline float q_quant32(__global const float *x, __global uchar *qs, int *sum) {
    float amax = 0.0f;
    for (uint j = 0; j < 32; j++) {
        amax = fmax(amax, fabs(x[j]));
    }
    float d = amax / 127.0f;
    float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    int s = 0;
    for (uint j = 0; j < 32; j++) {
        int q = clamp((int)rint(x[j] * id), -127, 127);
        s += q;
        qs[j] = as_uchar((char)q);
    }
    *sum = s;
    return d;
}

// Q8_0 blocks (34 bytes: d f16, qs [32] i8) of `blocks` 32-value blocks of `x`.
__kernel void q_act_q8_0(__global const float *x, __global uchar *xq, uint blocks) {
    uint g = get_global_id(0);
    if (g >= blocks) {
        return;
    }
    __global uchar *o = xq + (size_t)g * QB_Q8_0;
    int sum;
    float d = q_quant32(x + (size_t)g * 32, o + 2, &sum);
    vstore_half_rte(d, 0, (__global half *)o);
}

// Q8_1 blocks (36 bytes: d f16, s = d * sum(qs) f16, qs [32] i8).
__kernel void q_act_q8_1(__global const float *x, __global uchar *xq, uint blocks) {
    uint g = get_global_id(0);
    if (g >= blocks) {
        return;
    }
    __global uchar *o = xq + (size_t)g * QB_Q8_1;
    int sum;
    float d = q_quant32(x + (size_t)g * 32, o + 4, &sum);
    vstore_half_rte(d, 0, (__global half *)o);
    vstore_half_rte(d * (float)sum, 0, (__global half *)(o + 2));
}

// Q8_K blocks (292 bytes: d f32, qs [256] i8, bsums [16] i16 = sums of 16-value groups), as
// quantize_row_q8_K_ref: max = the first value of largest magnitude, iscale = -127 / max,
// q = min(127, round_half_even(iscale * x)), d = 1 / iscale; an all-zero block is all zeros.
__kernel void q_act_q8_k(__global const float *x, __global uchar *xq, uint blocks) {
    uint g = get_global_id(0);
    if (g >= blocks) {
        return;
    }
    x += (size_t)g * 256;
    __global uchar *o = xq + (size_t)g * QB_Q8_K;
    float amax = 0.0f, vmax = 0.0f;
    for (uint j = 0; j < 256; j++) {
        float a = fabs(x[j]);
        if (a > amax) {
            amax = a;
            vmax = x[j];
        }
    }
    float iscale = amax != 0.0f ? -127.0f / vmax : 0.0f;
    for (uint k = 0; k < 16; k++) {
        int s = 0;
        for (uint j = 16 * k; j < 16 * k + 16; j++) {
            int q = min((int)rint(iscale * x[j]), 127);
            s += q;
            o[4 + j] = as_uchar((char)q);
        }
        o[260 + 2 * k] = (uchar)(s & 0xff);
        o[261 + 2 * k] = (uchar)((s >> 8) & 0xff);
    }
    // Blocks are 292 = 4 * 73 bytes into a 4-aligned buffer: `d` is aligned.
    *(__global float *)o = amax != 0.0f ? 1.0f / iscale : 0.0f;
}

// ---- Matmul ------------------------------------------------------------------------------

// Tokens per work group of the tiled matmul kernels (mmt_*; MM_TT in matmul.rs).
#define MM_TT 8

// Sums `acc` over the work group (local memory `red` [MM_WG]) and stores it in `*out` from
// work item 0. Every work item of the group must call it.
inline void mm_store(float acc, LOCAL_PTR float *red, __global float *out) {
    uint lid = get_local_id(0);
    red[lid] = acc;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint s = MM_WG / 2; s > 0; s >>= 1) {
        if (lid < s) {
            red[lid] += red[lid + s];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0) {
        *out = red[0];
    }
}

// mm_store for the MM_TT tokens of a tiled work group at once (`red` [MM_TT, MM_WG]; the
// same pairs summed in the same order as mm_store, so each token's result is the same bits):
// token k's sum goes to out[k * rows] for k < nt.
inline void mm_store_tile(float *acc, uint nt, LOCAL_PTR float *red, __global float *out, uint rows) {
    uint lid = get_local_id(0);
    for (uint k = 0; k < MM_TT; k++) {
        red[k * MM_WG + lid] = acc[k];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint s = MM_WG / 2; s > 0; s >>= 1) {
        if (lid < s) {
            for (uint k = 0; k < MM_TT; k++) {
                red[k * MM_WG + lid] += red[k * MM_WG + lid + s];
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid < nt) {
        out[(size_t)lid * rows] = red[lid * MM_WG];
    }
}

// The two kernels of a weight format: mm_NAME, one work group per (output row, token), and
// mmt_NAME, one per (output row, MM_TT tokens), which reads each weight unit once for all its
// tokens. A row is `UNITS` work units (blocks, sub-blocks or values) of `WROW` bytes of
// weights in all; a token's activations are `XROW` values of type `XT`. `MMU_NAME(acc, wr, xr,
// u)` adds unit `u` of weight row `wr` times token row `xr` to `acc`; both kernels add a token's
// units in the same order, so they give the same bits.
#define MM_KERNELS(NAME, XT, UNITS, WROW, XROW)                                                   \
    __kernel void mm_##NAME(__global const uchar *w, __global const XT *x, __global float *out,    \
                            uint rows, uint cols) {                                               \
        __local float red[MM_WG];                                                                  \
        uint row = get_group_id(0), t = get_global_id(1), lid = get_local_id(0);                   \
        float acc = 0.0f;                                                                          \
        __global const uchar *wr = w + (size_t)row * (WROW);                                       \
        __global const XT *xr = x + (size_t)t * (XROW);                                            \
        for (uint u = lid; u < (UNITS); u += MM_WG) {                                              \
            MMU_##NAME(acc, wr, xr, u);                                                            \
        }                                                                                          \
        mm_store(acc, red, out + (size_t)t * rows + row);                                          \
    }                                                                                              \
    __kernel void mmt_##NAME(__global const uchar *w, __global const XT *x, __global float *out,   \
                             uint rows, uint cols, uint n) {                                       \
        __local float red[MM_TT * MM_WG];                                                          \
        uint row = get_group_id(0), t0 = get_global_id(1) * MM_TT, lid = get_local_id(0);          \
        uint nt = min((uint)MM_TT, n - t0);                                                        \
        float acc[MM_TT];                                                                          \
        for (uint k = 0; k < MM_TT; k++) {                                                         \
            acc[k] = 0.0f;                                                                         \
        }                                                                                          \
        __global const uchar *wr = w + (size_t)row * (WROW);                                       \
        for (uint u = lid; u < (UNITS); u += MM_WG) {                                              \
            for (uint k = 0; k < MM_TT; k++) {                                                     \
                if (k < nt) {                                                                      \
                    __global const XT *xr = x + (size_t)(t0 + k) * (XROW);                         \
                    MMU_##NAME(acc[k], wr, xr, u);                                                 \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
        mm_store_tile(acc, nt, red, out + (size_t)t0 * rows + row, rows);                          \
    }

// Sum of q_w * q_x over a 32-value block of nibbles `qs` (fifth bits in `qh`) minus `off`,
// against 32 signed bytes `x`.
inline int q_isum_nib(__global const uchar *qs, uint qh, int off, __global const uchar *x) {
    int s = 0;
    for (uint i = 0; i < 32; i++) {
        s += (q_nib5(qs, qh, i) - off) * q_i8(x, i);
    }
    return s;
}

// Q4_0 (18 bytes: d f16, qs [16] nibbles; w = d (q - 8)) times Q8_0 activations:
// sum over blocks of (d_w d_x) sum (q_w - 8) q_x. A unit is a block.
inline float mmu_q4_0(__global const uchar *wb, __global const uchar *xb) {
    float d = ld_f16(wb, 0) * ld_f16(xb, 0);
    return d * (float)q_isum_nib(wb + 2, 0, 8, xb + 2);
}
#define MMU_q4_0(acc, wr, xr, b) acc += mmu_q4_0((wr) + (b) * QB_Q4_0, (xr) + (b) * QB_Q8_0)
MM_KERNELS(q4_0, uchar, cols / 32, (cols / 32) * QB_Q4_0, (cols / 32) * QB_Q8_0)

// Q4_1 (20 bytes: d f16, m f16, qs [16] nibbles; w = d q + m) times Q8_1 activations:
// sum over blocks of (d_w d_x) sum q_w q_x + m_w s_x.
#define MMU_q4_1(acc, wr, xr, b)                                                                   \
    {                                                                                              \
        __global const uchar *wb = (wr) + (b) * QB_Q4_1, *xb = (xr) + (b) * QB_Q8_1;               \
        float d = ld_f16(wb, 0) * ld_f16(xb, 0);                                                   \
        float m = ld_f16(wb, 2) * ld_f16(xb, 2);                                                   \
        acc += d * (float)q_isum_nib(wb + 4, 0, 0, xb + 4);                                        \
        acc += m;                                                                                  \
    }
MM_KERNELS(q4_1, uchar, cols / 32, (cols / 32) * QB_Q4_1, (cols / 32) * QB_Q8_1)

// Q5_0 (22 bytes: d f16, qh u32 fifth bits, qs [16] nibbles; w = d (q - 16)) times Q8_0.
inline float mmu_q5_0(__global const uchar *wb, __global const uchar *xb) {
    float d = ld_f16(wb, 0) * ld_f16(xb, 0);
    return d * (float)q_isum_nib(wb + 6, q_u32(wb, 2), 16, xb + 2);
}
#define MMU_q5_0(acc, wr, xr, b) acc += mmu_q5_0((wr) + (b) * QB_Q5_0, (xr) + (b) * QB_Q8_0)
MM_KERNELS(q5_0, uchar, cols / 32, (cols / 32) * QB_Q5_0, (cols / 32) * QB_Q8_0)

// Q5_1 (24 bytes: d f16, m f16, qh u32 fifth bits, qs [16] nibbles; w = d q + m) times Q8_1.
#define MMU_q5_1(acc, wr, xr, b)                                                                   \
    {                                                                                              \
        __global const uchar *wb = (wr) + (b) * QB_Q5_1, *xb = (xr) + (b) * QB_Q8_1;               \
        float d = ld_f16(wb, 0) * ld_f16(xb, 0);                                                   \
        float m = ld_f16(wb, 2) * ld_f16(xb, 2);                                                   \
        acc += d * (float)q_isum_nib(wb + 8, q_u32(wb, 4), 0, xb + 4);                             \
        acc += m;                                                                                  \
    }
MM_KERNELS(q5_1, uchar, cols / 32, (cols / 32) * QB_Q5_1, (cols / 32) * QB_Q8_1)

// Q8_0 (34 bytes: d f16, qs [32] i8; w = d q) times Q8_0.
inline float mmu_q8_0(__global const uchar *wb, __global const uchar *xb) {
    int s = 0;
    for (uint i = 0; i < 32; i++) {
        s += q_i8(wb, 2 + i) * q_i8(xb, 2 + i);
    }
    return (ld_f16(wb, 0) * ld_f16(xb, 0)) * (float)s;
}
#define MMU_q8_0(acc, wr, xr, b) acc += mmu_q8_0((wr) + (b) * QB_Q8_0, (xr) + (b) * QB_Q8_0)
MM_KERNELS(q8_0, uchar, cols / 32, (cols / 32) * QB_Q8_0, (cols / 32) * QB_Q8_0)

// Value `l` (0..32) of sub-block `j` (0..8) of a Q4_K or Q5_K super-block `wb`: the low four bits
// are nibbles at `qs_off` (32-byte chunk j / 2, low nibbles for even j), the fifth bit (Q5_K:
// `five` = 1) is bit j of byte l of the 32 bytes of high bits at offset 16.
inline int q_q45_k(__global const uchar *wb, uint qs_off, uint five, uint j, uint l) {
    uint lo = (wb[qs_off + 32 * (j >> 1) + l] >> (4 * (j & 1))) & 15;
    uint hi = five ? ((wb[16 + l] >> j) & 1) : 0;
    return (int)(lo | (hi << 4));
}

// The contribution of sub-block `j` of a Q4_K / Q5_K super-block `wb` (d f16, dmin f16,
// scales [12] packed 6-bit sc/m, [Q5_K: qh [32]], qs [128]; value l of sub-block j is
// (d sc_j) q - dmin m_j) dotted with the Q8_K block `xb`:
// (d_x d) sc_j sum q_w q_x - (d_x dmin) m_j sum q_x, the activations' sum from the bsums.
inline float mm_q45_k_sub(__global const uchar *wb, uint qs_off, uint five, __global const uchar *xb,
                          uint j) {
    float dx = *(__global const float *)xb;
    int2 scm = q_scale_min_k4(wb + 4, j);
    int s = 0;
    for (uint l = 0; l < 32; l++) {
        s += q_q45_k(wb, qs_off, five, j, l) * q_i8(xb, 4 + 32 * j + l);
    }
    int bsum = q_i16(xb, 260 + 4 * j) + q_i16(xb, 262 + 4 * j);
    float v = (dx * ld_f16(wb, 0)) * (float)(scm.x * s);
    return v - (dx * ld_f16(wb, 2)) * (float)(scm.y * bsum);
}

// Q4_K (144 bytes, nibbles at 16) times Q8_K. A unit is one 32-value sub-block j = u % 8 of
// super-block u / 8.
#define MMU_q4_k(acc, wr, xr, u)                                                                   \
    acc += mm_q45_k_sub((wr) + ((u) >> 3) * QB_Q4_K, 16, 0, (xr) + ((u) >> 3) * QB_Q8_K, (u) & 7)
MM_KERNELS(q4_k, uchar, (cols / 256) * 8, (cols / 256) * QB_Q4_K, (cols / 256) * QB_Q8_K)

// Q5_K (176 bytes, high bits at 16, nibbles at 48) times Q8_K, as Q4_K.
#define MMU_q5_k(acc, wr, xr, u)                                                                   \
    acc += mm_q45_k_sub((wr) + ((u) >> 3) * QB_Q5_K, 48, 1, (xr) + ((u) >> 3) * QB_Q8_K, (u) & 7)
MM_KERNELS(q5_k, uchar, (cols / 256) * 8, (cols / 256) * QB_Q5_K, (cols / 256) * QB_Q8_K)

// Value `l` (0..32) of 32-value group `g` (0..8) of a Q2_K super-block `wb` (84 bytes: scales
// [16] (low nibble scale, high nibble minimum of each 16-value sub-block), qs [64], d f16,
// dmin f16): half h = g / 4 holds groups 4h..4h+4, group k = g % 4 is bits 2k..2k+2 of
// qs[32h + l].
inline int q_q2_k(__global const uchar *wb, uint g, uint l) {
    return (int)((wb[16 + 32 * (g >> 2) + l] >> (2 * (g & 3))) & 3);
}

// Q2_K (value l of sub-block s is (d sc_s) q - dmin m_s) times Q8_K. A unit is one 32-value
// group g of super-block u / 8 (sub-blocks 2g and 2g + 1), contributing
// (d_x d) sum_s sc_s sum q_w q_x - (d_x dmin) sum_s m_s bsum_s.
inline float mmu_q2_k(__global const uchar *wb, __global const uchar *xb, uint g) {
    float dx = *(__global const float *)xb;
    int s0 = 0, s1 = 0;
    for (uint l = 0; l < 16; l++) {
        s0 += q_q2_k(wb, g, l) * q_i8(xb, 4 + 32 * g + l);
        s1 += q_q2_k(wb, g, l + 16) * q_i8(xb, 4 + 32 * g + l + 16);
    }
    uint sc0 = wb[2 * g], sc1 = wb[2 * g + 1];
    int s = (int)(sc0 & 15) * s0 + (int)(sc1 & 15) * s1;
    int m = (int)(sc0 >> 4) * q_i16(xb, 260 + 4 * g) + (int)(sc1 >> 4) * q_i16(xb, 262 + 4 * g);
    float v = (dx * ld_f16(wb, 80)) * (float)s;
    return v - (dx * ld_f16(wb, 82)) * (float)m;
}
#define MMU_q2_k(acc, wr, xr, u)                                                                   \
    acc += mmu_q2_k((wr) + ((u) >> 3) * QB_Q2_K, (xr) + ((u) >> 3) * QB_Q8_K, (u) & 7)
MM_KERNELS(q2_k, uchar, (cols / 256) * 8, (cols / 256) * QB_Q2_K, (cols / 256) * QB_Q8_K)

// Value `l` (0..32) of 32-value group `g` (0..8) of a Q3_K super-block `wb` (110 bytes: hmask
// [32], qs [64], scales [12], d f16): low bits (qs[32h + l] >> 2k) & 3 as in Q2_K, high bit g
// of hmask[l]; the value is low - 4 when the high bit is clear, low when it is set.
inline int q_q3_k(__global const uchar *wb, uint g, uint l) {
    int lo = (wb[32 + 32 * (g >> 2) + l] >> (2 * (g & 3))) & 3;
    int hi = (wb[l] >> g) & 1;
    return lo - 4 + 4 * hi;
}

// The signed 6-bit scale of 16-value sub-block `j` (0..16) from the 12 packed bytes `s` of a
// Q3_K block: bits 0..4 are nibble j / 8 of s[j % 8], bits 4..6 are bits 2 (j / 4).. of
// s[8 + j % 4]; stored with an offset of 32.
inline int q_scale_q3_k(__global const uchar *s, uint j) {
    uint lo = (s[j % 8] >> (4 * (j / 8))) & 15;
    uint hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
    return (int)(lo | (hi << 4)) - 32;
}

// Q3_K (value l of sub-block s is (d scale_s) q) times Q8_K. A unit is one 32-value group g,
// contributing (d_x d) (scale_2g sum_lo + scale_2g+1 sum_hi).
inline float mmu_q3_k(__global const uchar *wb, __global const uchar *xb, uint g) {
    float dx = *(__global const float *)xb;
    int s0 = 0, s1 = 0;
    for (uint l = 0; l < 16; l++) {
        s0 += q_q3_k(wb, g, l) * q_i8(xb, 4 + 32 * g + l);
        s1 += q_q3_k(wb, g, l + 16) * q_i8(xb, 4 + 32 * g + l + 16);
    }
    int s = q_scale_q3_k(wb + 96, 2 * g) * s0 + q_scale_q3_k(wb + 96, 2 * g + 1) * s1;
    return (dx * ld_f16(wb, 108)) * (float)s;
}
#define MMU_q3_k(acc, wr, xr, u)                                                                   \
    acc += mmu_q3_k((wr) + ((u) >> 3) * QB_Q3_K, (xr) + ((u) >> 3) * QB_Q8_K, (u) & 7)
MM_KERNELS(q3_k, uchar, (cols / 256) * 8, (cols / 256) * QB_Q3_K, (cols / 256) * QB_Q8_K)

// Value `l` (0..32) of 32-value group `g` (0..8) of a Q6_K super-block `wb` (210 bytes: ql [128]
// low nibbles, qh [64] two high bits, scales [16] i8, d f16), minus 32. Half h = g / 4 of the
// block holds groups 4h..4h+4: group k = g % 4 takes the low (k < 2) or high nibbles of
// ql[64h + 32 (k % 2) + l] and bits 2k..2k+2 of qh[32h + l].
inline int q_q6_k(__global const uchar *wb, uint g, uint l) {
    uint h = g >> 2, k = g & 3;
    uint lo = (wb[64 * h + 32 * (k & 1) + l] >> (4 * (k >> 1))) & 15;
    uint hi = (wb[128 + 32 * h + l] >> (2 * k)) & 3;
    return (int)(lo | (hi << 4)) - 32;
}

// Q6_K (value i of 16-value sub-block s is (d scale_s) (q - 32)) times Q8_K. A unit is one
// 32-value group g of super-block u / 8 (sub-blocks 2g and 2g + 1), contributing
// (d_x d) (scale_2g sum_lo + scale_2g+1 sum_hi).
inline float mmu_q6_k(__global const uchar *wb, __global const uchar *xb, uint g) {
    float dx = *(__global const float *)xb;
    int s0 = 0, s1 = 0;
    for (uint l = 0; l < 16; l++) {
        s0 += q_q6_k(wb, g, l) * q_i8(xb, 4 + 32 * g + l);
        s1 += q_q6_k(wb, g, l + 16) * q_i8(xb, 4 + 32 * g + l + 16);
    }
    int s = q_i8(wb, 192 + 2 * g) * s0 + q_i8(wb, 193 + 2 * g) * s1;
    return (dx * ld_f16(wb, 208)) * (float)s;
}
#define MMU_q6_k(acc, wr, xr, u)                                                                   \
    acc += mmu_q6_k((wr) + ((u) >> 3) * QB_Q6_K, (xr) + ((u) >> 3) * QB_Q8_K, (u) & 7)
MM_KERNELS(q6_k, uchar, (cols / 256) * 8, (cols / 256) * QB_Q6_K, (cols / 256) * QB_Q8_K)

// Float weights (little-endian, byte-addressed) times f32 activations `x` [n, cols]. A unit is
// one value.
#define MMU_f32(acc, wr, xr, i) acc += ld_f32(wr, 4 * (i)) * (xr)[i]
MM_KERNELS(f32, float, cols, (size_t)cols * 4, cols)
#define MMU_f16(acc, wr, xr, i) acc += ld_f16(wr, 2 * (i)) * (xr)[i]
MM_KERNELS(f16, float, cols, (size_t)cols * 2, cols)
#define MMU_bf16(acc, wr, xr, i) acc += q_bf16(wr, 2 * (i)) * (xr)[i]
MM_KERNELS(bf16, float, cols, (size_t)cols * 2, cols)

// ---- Gather ------------------------------------------------------------------------------
//
// q_deq_<format>(r, c): element c of the weight row at r, dequantized with the CPU's formula
// (same operations, same order, no fused multiply-add).

inline float q_deq_f32(__global const uchar *r, uint c) {
    return ld_f32(r, 4 * c);
}

inline float q_deq_f16(__global const uchar *r, uint c) {
    return ld_f16(r, 2 * c);
}

inline float q_deq_bf16(__global const uchar *r, uint c) {
    return q_bf16(r, 2 * c);
}

inline float q_deq_q4_0(__global const uchar *r, uint c) {
    __global const uchar *b = r + (c / 32) * QB_Q4_0;
    return (float)(q_nib5(b + 2, 0, c % 32) - 8) * ld_f16(b, 0);
}

inline float q_deq_q4_1(__global const uchar *r, uint c) {
    __global const uchar *b = r + (c / 32) * QB_Q4_1;
    float v = (float)q_nib5(b + 4, 0, c % 32) * ld_f16(b, 0);
    return v + ld_f16(b, 2);
}

inline float q_deq_q5_0(__global const uchar *r, uint c) {
    __global const uchar *b = r + (c / 32) * QB_Q5_0;
    return (float)(q_nib5(b + 6, q_u32(b, 2), c % 32) - 16) * ld_f16(b, 0);
}

inline float q_deq_q5_1(__global const uchar *r, uint c) {
    __global const uchar *b = r + (c / 32) * QB_Q5_1;
    float v = (float)q_nib5(b + 8, q_u32(b, 4), c % 32) * ld_f16(b, 0);
    return v + ld_f16(b, 2);
}

inline float q_deq_q8_0(__global const uchar *r, uint c) {
    __global const uchar *b = r + (c / 32) * QB_Q8_0;
    return (float)q_i8(b, 2 + c % 32) * ld_f16(b, 0);
}

// Element c of a Q4_K / Q5_K row (super-blocks of `bytes` bytes; see q_q45_k).
inline float q_deq_q45_k(__global const uchar *r, uint c, uint bytes, uint qs_off, uint five) {
    __global const uchar *b = r + (c / 256) * bytes;
    uint j = (c % 256) / 32;
    int2 scm = q_scale_min_k4(b + 4, j);
    float d = ld_f16(b, 0) * (float)scm.x;
    float m = ld_f16(b, 2) * (float)scm.y;
    float v = d * (float)q_q45_k(b, qs_off, five, j, c % 32);
    return v - m;
}

inline float q_deq_q4_k(__global const uchar *r, uint c) {
    return q_deq_q45_k(r, c, QB_Q4_K, 16, 0);
}

inline float q_deq_q5_k(__global const uchar *r, uint c) {
    return q_deq_q45_k(r, c, QB_Q5_K, 48, 1);
}

inline float q_deq_q2_k(__global const uchar *r, uint c) {
    __global const uchar *b = r + (c / 256) * QB_Q2_K;
    uint g = (c % 256) / 32, l = c % 32;
    uint sc = b[2 * g + l / 16];
    float d = ld_f16(b, 80) * (float)(sc & 15);
    float m = ld_f16(b, 82) * (float)(sc >> 4);
    float v = d * (float)q_q2_k(b, g, l);
    return v - m;
}

inline float q_deq_q3_k(__global const uchar *r, uint c) {
    __global const uchar *b = r + (c / 256) * QB_Q3_K;
    uint g = (c % 256) / 32, l = c % 32;
    float d = ld_f16(b, 108) * (float)q_scale_q3_k(b + 96, 2 * g + l / 16);
    return d * (float)q_q3_k(b, g, l);
}

inline float q_deq_q6_k(__global const uchar *r, uint c) {
    __global const uchar *b = r + (c / 256) * QB_Q6_K;
    uint g = (c % 256) / 32, l = c % 32;
    float sc = ld_f16(b, 208) * (float)q_i8(b, 192 + 2 * g + l / 16);
    return sc * (float)q_q6_k(b, g, l);
}

// A gather kernel: out [ids, cols] = rows `ids` of `w` (rows of `row_bytes` bytes), dequantized
// with DEQ, times `scale`.
#define Q_GATHER(NAME, DEQ)                                                                        \
    __kernel void NAME(__global const uchar *w, __global const uint *ids, __global float *out,    \
                       uint cols, uint row_bytes, float scale) {                                   \
        uint c = get_global_id(0), i = get_global_id(1);                                           \
        if (c >= cols) {                                                                           \
            return;                                                                                \
        }                                                                                          \
        float v = DEQ(w + (size_t)ids[i] * row_bytes, c);                                          \
        out[(size_t)i * cols + c] = v * scale;                                                     \
    }

Q_GATHER(q_get_f32, q_deq_f32)
Q_GATHER(q_get_f16, q_deq_f16)
Q_GATHER(q_get_bf16, q_deq_bf16)
Q_GATHER(q_get_q4_0, q_deq_q4_0)
Q_GATHER(q_get_q4_1, q_deq_q4_1)
Q_GATHER(q_get_q5_0, q_deq_q5_0)
Q_GATHER(q_get_q5_1, q_deq_q5_1)
Q_GATHER(q_get_q8_0, q_deq_q8_0)
Q_GATHER(q_get_q2_k, q_deq_q2_k)
Q_GATHER(q_get_q3_k, q_deq_q3_k)
Q_GATHER(q_get_q4_k, q_deq_q4_k)
Q_GATHER(q_get_q5_k, q_deq_q5_k)
Q_GATHER(q_get_q6_k, q_deq_q6_k)

// Back to the default for the files compiled after this one.
#pragma OPENCL FP_CONTRACT ON
