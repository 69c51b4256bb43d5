// f16 as its bits, converted with PTX's own instructions: NVRTC has no
// `cuda_fp16.h` without the CUDA toolkit's headers, which a user's machine
// need not have. Prepended to every kernel source (kernels.rs).
typedef unsigned short half_bits;

__device__ __forceinline__ float h2f(half_bits h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}

// Round to nearest even, as `__float2half_rn`.
__device__ __forceinline__ half_bits f2h(float f) {
    half_bits h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}
