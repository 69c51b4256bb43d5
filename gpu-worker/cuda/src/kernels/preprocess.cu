// The CUDA engine's input: the loader's u8 crops, NCHW, normalised as the
// model's upstream does, `(x - mean[c]) / std[c]` on 0..255 values
// (pipeline_core::Normalize), into f16 for the tensor cores, in the layout
// the first layer reads: NCHW for the transformers' patch embedding, NHWC
// for cuDNN's channels-last convolutions. Padding rows (a fixed batch
// shape) are zero images, as on the other engines: `rows` of `padded`
// are read, the rest written as the normalised zero pixel.
// half_bits, h2f and f2h: half.cuh, prepended.

struct Norm3 {
    float mean[3];
    float inv_std[3];
};

__device__ __forceinline__ float normalised(unsigned char v, int c, const Norm3& n) {
    return (static_cast<float>(v) - n.mean[c]) * n.inv_std[c];
}

// One thread per output value, [padded, 3, side, side].
extern "C" __global__ void normalize_nchw_f16(const unsigned char* __restrict__ src,
                                              half_bits* __restrict__ dst, int rows, int padded,
                                              int side, Norm3 norm) {
    const long long plane = static_cast<long long>(side) * side;
    const long long total = static_cast<long long>(padded) * 3 * plane;
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < total;
         i += static_cast<long long>(gridDim.x) * blockDim.x) {
        const long long image = i / (3 * plane);
        const int c = static_cast<int>((i / plane) % 3);
        const unsigned char v = image < rows ? src[i] : 0;
        dst[i] = f2h(normalised(v, c, norm));
    }
}

// One thread per output pixel, [padded, side, side, 3] from NCHW.
extern "C" __global__ void normalize_nhwc_f16(const unsigned char* __restrict__ src,
                                              half_bits* __restrict__ dst, int rows, int padded,
                                              int side, Norm3 norm) {
    const long long plane = static_cast<long long>(side) * side;
    const long long pixels = static_cast<long long>(padded) * plane;
    for (long long p = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; p < pixels;
         p += static_cast<long long>(gridDim.x) * blockDim.x) {
        const long long image = p / plane;
        const long long at = p % plane;
        for (int c = 0; c < 3; ++c) {
            const unsigned char v = image < rows ? src[(image * 3 + c) * plane + at] : 0;
            dst[p * 3 + c] = f2h(normalised(v, c, norm));
        }
    }
}
