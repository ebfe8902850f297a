// Attention over the KV cache (see attention.rs): `attn_partial` attends one query head over
// one range of cache slots, `attn_merge` combines a query's ranges into its output row.
// Expressions are evaluated as written (no contraction); the value accumulation uses explicit
// fma() like the CPU's.
#pragma OPENCL FP_CONTRACT OFF

// Output dimensions per work item of attn_partial: head_dim <= ATTN_DPI * local size.
#define ATTN_DPI 8

// Work items per attn_partial work group (GROUP in attention.rs): slots per tile.
#define ATTN_GROUP 64

// Element `i` of an f16 (`is_f16`) or f32 array.
inline float attn_ld(__global const uchar *p, size_t i, int is_f16) {
    return is_f16 ? vload_half(i, (__global const half *)p) : ((__global const float *)p)[i];
}

// One work-group per (query head h, query qi, range r); its items share tiles of as many slots
// as there are items. Per tile, item t scores slot t (scale * q.k, soft-capped; -inf when not
// visible), item 0 walks the scores in slot order keeping the running maximum and softmax
// denominator, and turns each score into its weight and rescaling factor, then every item
// updates its output dimensions key by key in slot order: c = c * factor (when the maximum
// changed), c = fma(v, weight, c), in f32 (like the CPU, not llama.cpp's f16 accumulator).
// Writes (max, denominator, unnormalised output) of the range; a range that sees no slot
// writes (-inf, 0, zeros).
__kernel void attn_partial(__global const float *q,     // [n_tok, n_head * head_dim]
                           __global const uint *info,   // [n_q, 5]: row, pos, first, end, range len
                           __global const uint *pos,    // [n_kv]
                           __global const uchar *k,     // [n_kv, kv_dim] f16 or f32
                           __global const uchar *v,     // [n_kv, kv_dim] f16 or f32
                           __global float *part,        // [n_ranges, n_q, n_head, 2 + head_dim]
                           uint head_dim, uint n_head, uint group, uint kv_dim, float scale,
                           float softcap, int has_window, uint window, int k_f16, int v_f16,
                           int round_q) {
    __local float ql[ATTN_DPI * ATTN_GROUP];  // [head_dim]
    __local float wt[ATTN_GROUP];             // scores, then weights
    __local float fac[ATTN_GROUP];            // rescaling factors
    uint lid = get_local_id(0), nl = get_local_size(0);
    uint h = get_group_id(0), qi = get_global_id(1), r = get_global_id(2);
    uint n_q = get_global_size(1);
    __global const uint *in = info + (size_t)qi * 5;
    uint row = in[0], qpos = in[1], end = in[3], len = in[4];
    uint a = min(in[2] + r * len, end);
    uint b = min(a + len, end);
    uint kv_off = (h / group) * head_dim;
    size_t q_at = ((size_t)row * n_head + h) * head_dim;
    for (uint d = lid; d < head_dim; d += nl) {
        float x = q[q_at + d];
        ql[d] = round_q ? round_f16(x) : x;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    float acc[ATTN_DPI];
    for (uint i = 0; i < ATTN_DPI; i++) {
        acc[i] = 0.0f;
    }
    // Running maximum and denominator: item 0's.
    float m = -INFINITY, sum = 0.0f;
    for (uint j0 = a; j0 < b; j0 += nl) {
        uint j = j0 + lid;
        float s = -INFINITY;
        if (j < b) {
            uint kp = pos[j];
            if (kp <= qpos && (!has_window || qpos - kp < window)) {
                size_t base = (size_t)j * kv_dim + kv_off;
                float dot = 0.0f;
                for (uint d = 0; d < head_dim; d++) {
                    dot += ql[d] * attn_ld(k, base + d, k_f16);
                }
                s = dot * scale;
                if (softcap > 0.0f) {
                    s = softcap * tanh(s / softcap);
                }
            }
        }
        wt[lid] = s;
        barrier(CLK_LOCAL_MEM_FENCE);
        uint n = min(nl, b - j0);
        if (lid == 0) {
            for (uint t = 0; t < n; t++) {
                float st = wt[t];
                if (st == -INFINITY) {
                    fac[t] = 1.0f;
                    wt[t] = 0.0f;
                    continue;
                }
                float mn = fmax(m, st);
                float f = exp(m - mn);
                float p = exp(st - mn);
                sum = sum * f + p;
                m = mn;
                fac[t] = f;
                wt[t] = p;
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (uint t = 0; t < n; t++) {
            float f = fac[t], p = wt[t];
            if (f == 1.0f && p == 0.0f) {
                continue;
            }
            size_t base = (size_t)(j0 + t) * kv_dim + kv_off;
            for (uint i = 0; i < ATTN_DPI; i++) {
                uint d = lid + i * nl;
                if (d >= head_dim) {
                    break;
                }
                float c = acc[i];
                if (f != 1.0f) {
                    c = c * f;
                }
                acc[i] = fma(attn_ld(v, base + d, v_f16), p, c);
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    __global float *o = part + (((size_t)r * n_q + qi) * n_head + h) * (2 + head_dim);
    if (lid == 0) {
        o[0] = m;
        o[1] = sum;
    }
    for (uint i = 0; i < ATTN_DPI; i++) {
        uint d = lid + i * nl;
        if (d < head_dim) {
            o[2 + d] = acc[i];
        }
    }
}

// Work item (d, h, qi): output dimension d of query head h of query qi, the ranges' partial
// results merged (weights exp(max_r - max), then times 1 / denominator); zero when no range saw
// a slot. With attention sinks (has_sinks), head h's sink logit joins the denominator as
// exp(sink - max), the maximum taken over the sink too.
__kernel void attn_merge(__global const float *part,  // [n_ranges, n_q, n_head, 2 + head_dim]
                         __global const uint *info,   // [n_q, 5]
                         __global float *out,         // [n_tok, n_head * head_dim]
                         __global const float *sinks, // [n_head] (read only with has_sinks)
                         uint head_dim, uint n_head, uint n_ranges, int has_sinks) {
    uint d = get_global_id(0), h = get_global_id(1), qi = get_global_id(2);
    uint n_q = get_global_size(2);
    size_t stride = (size_t)n_q * n_head * (2 + head_dim);
    __global const float *p0 = part + ((size_t)qi * n_head + h) * (2 + head_dim);
    float mx = -INFINITY;
    for (uint r = 0; r < n_ranges; r++) {
        mx = fmax(mx, p0[r * stride]);
    }
    float o = 0.0f;
    if (mx != -INFINITY) {
        float sink = has_sinks ? sinks[h] : -INFINITY;
        mx = fmax(mx, sink);
        float sum = has_sinks ? exp(sink - mx) : 0.0f;
        for (uint r = 0; r < n_ranges; r++) {
            __global const float *p = p0 + r * stride;
            float w = exp(p[0] - mx);
            sum += p[1] * w;
            o += w * p[2 + d];
        }
        o = o * (1.0f / sum);
    }
    uint row = info[(size_t)qi * 5];
    out[((size_t)row * n_head + h) * head_dim + d] = o;
}
