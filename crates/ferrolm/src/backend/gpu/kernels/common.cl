// Shared definitions of ferrolm's GPU kernels (OpenCL C 1.2). The files of kernels/ are
// compiled together as one program, this one first: by OpenCL as they are, by NVRTC for CUDA
// after cuda_prelude.h, which defines the names below the CUDA way first.
//
// Data in buffers is little-endian and byte-addressed like the CPU's: quantized blocks are read
// as bytes (`uchar`), f16 values through vload_half/vstore_half (core OpenCL, no cl_khr_fp16).

#ifndef LOCAL_PTR
// A pointer parameter to work-group memory (CUDA: a plain pointer into shared memory).
#define LOCAL_PTR __local
// An int2 from two ints.
#define MAKE_INT2(a, b) ((int2)((a), (b)))
#endif

// f16 stored at byte offset `off` of `p` (`off` even: every f16 in the block formats is).
inline float ld_f16(__global const uchar *p, uint off) {
    return vload_half(0, (__global const half *)(p + off));
}

// Little-endian f32 stored at byte offset `off` of `p` (unaligned-safe).
inline float ld_f32(__global const uchar *p, uint off) {
    uint u = (uint)p[off] | ((uint)p[off + 1] << 8) | ((uint)p[off + 2] << 16) | ((uint)p[off + 3] << 24);
    return as_float(u);
}

// Rounds an f32 to the nearest f16 value (ties to even) and back to f32.
inline float round_f16(float x) {
    ushort u;
    vstore_half_rte(x, 0, (half *)&u);
    return vload_half(0, (const half *)&u);
}
