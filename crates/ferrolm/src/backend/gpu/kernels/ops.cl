// Element-wise and row operators (see ops.rs). Expressions are evaluated as written, without
// contraction into fused multiply-adds, so that results round like the CPU backend's.
#pragma OPENCL FP_CONTRACT OFF

// Work items per row of the row reductions (ROW_GROUP in ops.rs; a power of two).
#define ROW_GROUP 128

// Sum of `v` over the work-group (a power-of-two size), through `tmp` (one float per item).
// Every item gets the sum.
inline float op_group_sum(float v, LOCAL_PTR float *tmp) {
    uint lid = get_local_id(0);
    tmp[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint s = get_local_size(0) / 2; s > 0; s >>= 1) {
        if (lid < s) {
            tmp[lid] += tmp[lid + s];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    float r = tmp[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}

// Maximum of `v` over the work-group (a power-of-two size), like `op_group_sum`.
inline float op_group_max(float v, LOCAL_PTR float *tmp) {
    uint lid = get_local_id(0);
    tmp[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint s = get_local_size(0) / 2; s > 0; s >>= 1) {
        if (lid < s) {
            tmp[lid] = fmax(tmp[lid], tmp[lid + s]);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    float r = tmp[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}

// RMSNorm, one work-group per row of `cols`: out = x / sqrt(mean(x^2) + eps) * w. `x` and `out`
// may be the same buffer. `inplace_order`: multiply by (scale * w) as the CPU's in-place norm
// does, else by scale then w as its out-of-place norm does.
__kernel void op_rms_norm(__global const float *x,  // [rows, cols]
                          __global const float *w,  // [cols]
                          __global float *out,      // [rows, cols]
                          uint cols, float eps, int inplace_order) {
    __local float tmp[ROW_GROUP];
    size_t base = (size_t)get_group_id(0) * cols;
    uint lid = get_local_id(0), n = get_local_size(0);
    float ss = 0.0f;
    for (uint i = lid; i < cols; i += n) {
        float v = x[base + i];
        ss += v * v;
    }
    ss = op_group_sum(ss, tmp);
    float scale = 1.0f / sqrt(ss / (float)cols + eps);
    for (uint i = lid; i < cols; i += n) {
        float v = x[base + i];
        out[base + i] = inplace_order ? v * (scale * w[i]) : v * scale * w[i];
    }
}

// RoPE: work item (pair i, head, row) rotates one pair of dimensions of one head. `cs`: the
// (cos, sin) of each pair of each row.
__kernel void op_rope(__global float *x,         // [rows, width]
                      __global const float *cs,  // [rows, n_pairs, 2]
                      uint width, uint head_dim, uint n_pairs, int neox) {
    uint i = get_global_id(0), head = get_global_id(1), row = get_global_id(2);
    size_t c_at = ((size_t)row * n_pairs + i) * 2;
    float c = cs[c_at], s = cs[c_at + 1];
    __global float *hp = x + (size_t)row * width + (size_t)head * head_dim;
    uint a = neox ? i : 2 * i;
    uint b = neox ? i + n_pairs : 2 * i + 1;
    float x0 = hp[a], x1 = hp[b];
    hp[a] = x0 * c - x1 * s;
    hp[b] = x0 * s + x1 * c;
}

// Softmax of each row of `cols` in place, one work-group per row.
__kernel void op_softmax(__global float *x,  // [rows, cols]
                         uint cols) {
    __local float tmp[ROW_GROUP];
    size_t base = (size_t)get_group_id(0) * cols;
    uint lid = get_local_id(0), n = get_local_size(0);
    float m = -INFINITY;
    for (uint i = lid; i < cols; i += n) {
        m = fmax(m, x[base + i]);
    }
    m = op_group_max(m, tmp);
    float sum = 0.0f;
    for (uint i = lid; i < cols; i += n) {
        float e = exp(x[base + i] - m);
        x[base + i] = e;
        sum += e;
    }
    sum = op_group_sum(sum, tmp);
    for (uint i = lid; i < cols; i += n) {
        x[base + i] = x[base + i] / sum;
    }
}

// GELU, tanh approximation, in f32 (the CPU's `gelu_tanh`, operation for operation).
inline float op_gelu(float x) {
    return 0.5f * x * (1.0f + tanh(0.7978846f * x * (1.0f + 0.044715f * x * x)));
}

// gate = act(gate) * up. act: 0 SiLU, 1 GELU (f32), 2 GELU through llama.cpp's f16 table
// (input and result rounded to f16; exact outside (-10, 10)), 3 gpt-oss's clamped SwiGLU
// (gate capped at 7, up clamped to +-7, sigmoid(1.702 g), times up + 1).
__kernel void op_gated(__global float *gate, __global const float *up, int act) {
    size_t i = get_global_id(0);
    float g = gate[i];
    float a;
    if (act == 3) {
        g = fmin(g, 7.0f);
        gate[i] = g / (1.0f + exp(-1.702f * g)) * (fmin(fmax(up[i], -7.0f), 7.0f) + 1.0f);
        return;
    }
    if (act == 0) {
        a = g / (1.0f + exp(-g));
    } else if (act == 1) {
        a = op_gelu(g);
    } else if (g <= -10.0f) {
        a = 0.0f;
    } else if (g >= 10.0f) {
        a = g;
    } else {
        a = round_f16(op_gelu(round_f16(g)));
    }
    gate[i] = a * up[i];
}

// x += y.
__kernel void op_add(__global float *x, __global const float *y) {
    size_t i = get_global_id(0);
    x[i] = x[i] + y[i];
}

// x *= s (Granite's residual and logit scales).
__kernel void op_scale(__global float *x, float s) {
    size_t i = get_global_id(0);
    x[i] = x[i] * s;
}

// x[i] += bias[i % width]: a bias added to every row of `width` (Qwen 2's QKV biases).
__kernel void op_add_bias(__global float *x, __global const float *bias, uint width) {
    size_t i = get_global_id(0);
    x[i] = x[i] + bias[i % width];
}

// Zero: an output some of whose values no kernel writes.
__kernel void op_zero(__global float *x) {
    x[get_global_id(0)] = 0.0f;
}

// f32 -> f16, rounded to nearest even.
__kernel void op_to_f16(__global const float *src, __global half *dst) {
    size_t i = get_global_id(0);
    vstore_half_rte(src[i], i, dst);
}
