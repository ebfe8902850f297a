// OpenCL C on CUDA: compiled by NVRTC before the kernels of this folder (see gpu.rs), with
// --device-as-default-execution-space (plain functions are device functions) and --fmad=false
// (no contraction into fused multiply-adds, as the kernels' FP_CONTRACT OFF asks).
//
// A launch is `global / local` blocks of `local` threads in each dimension, and `local`
// always divides `global`, so get_global_id stays inside the launch.

#define __kernel extern "C" __global__
#define __global
#define __local __shared__
#define LOCAL_PTR
#define MAKE_INT2(a, b) make_int2((a), (b))
#define CLK_LOCAL_MEM_FENCE 0
#define barrier(flags) __syncthreads()
#define INFINITY __int_as_float(0x7f800000)

typedef unsigned char uchar;
typedef unsigned short ushort;
typedef unsigned int uint;
typedef unsigned long long ulong;
// Half-precision values are only ever loaded and stored (vload_half / vstore_half): their bits.
typedef unsigned short half;

inline size_t get_global_id(uint d) {
    return d == 0 ? (size_t)blockIdx.x * blockDim.x + threadIdx.x
         : d == 1 ? (size_t)blockIdx.y * blockDim.y + threadIdx.y
                  : (size_t)blockIdx.z * blockDim.z + threadIdx.z;
}
inline size_t get_local_id(uint d) {
    return d == 0 ? threadIdx.x : d == 1 ? threadIdx.y : threadIdx.z;
}
inline size_t get_group_id(uint d) {
    return d == 0 ? blockIdx.x : d == 1 ? blockIdx.y : blockIdx.z;
}
inline size_t get_local_size(uint d) {
    return d == 0 ? blockDim.x : d == 1 ? blockDim.y : blockDim.z;
}
inline size_t get_global_size(uint d) {
    return d == 0 ? (size_t)gridDim.x * blockDim.x
         : d == 1 ? (size_t)gridDim.y * blockDim.y
                  : (size_t)gridDim.z * blockDim.z;
}

inline float as_float(uint u) { return __uint_as_float(u); }
inline char as_char(uchar u) { return (char)(signed char)u; }
inline short as_short(ushort u) { return (short)u; }
inline uchar as_uchar(char c) { return (uchar)c; }
inline int clamp(int x, int lo, int hi) { return min(max(x, lo), hi); }

// f16 bits -> f32 (exact).
inline float vload_half(size_t i, const half *p) {
    float f;
    asm("{ cvt.f32.f16 %0, %1; }" : "=f"(f) : "h"(p[i]));
    return f;
}
// f32 -> f16 bits, rounded to nearest even.
inline void vstore_half_rte(float f, size_t i, half *p) {
    unsigned short h;
    asm("{ cvt.rn.f16.f32 %0, %1; }" : "=h"(h) : "f"(f));
    p[i] = h;
}
