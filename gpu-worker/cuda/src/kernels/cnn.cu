// The convolutional families' kernels around cuDNN's convolutions, NHWC,
// f16 in and out, f32 arithmetic: explicit zero padding (cuDNN's legacy
// convolution pads symmetrically; Lite0's TensorFlow "SAME" padding at
// stride 2 is not), the ResNet stem's max pool, the convolution
// epilogue where cuDNN's fused one does not apply (ReLU6, or a layer
// cuDNN refuses to fuse), and the non-overlapping patches of ConvNeXt's
// downsampling. Each output value is computed by one thread from its own
// inputs only, so a value does not depend on the batch around it.
// half_bits, h2f and f2h: half.cuh, prepended.

// `src` ([n, side, side, c]) into the middle of `dst`
// ([n, out, out, c], out = side + top + bottom), zeros around it.
extern "C" __global__ void pad_nhwc_f16(const half_bits* __restrict__ src,
                                        half_bits* __restrict__ dst, int n, int side, int c,
                                        int top, int left, int out) {
    const long long total = static_cast<long long>(n) * out * out * c;
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < total;
         i += static_cast<long long>(gridDim.x) * blockDim.x) {
        const int ch = static_cast<int>(i % c);
        const long long pixel = i / c;
        const int x = static_cast<int>(pixel % out) - left;
        const int y = static_cast<int>((pixel / out) % out) - top;
        const long long image = pixel / (static_cast<long long>(out) * out);
        half_bits v = 0;
        if (x >= 0 && y >= 0 && x < side && y < side) {
            v = src[((image * side + y) * side + x) * c + ch];
        }
        dst[i] = v;
    }
}

// 3×3, stride 2, padding 1 max pool (torchvision's ResNet stem), NHWC:
// padding never wins (PyTorch's and cuDNN's MAX).
extern "C" __global__ void max_pool_3x3_s2_nhwc_f16(const half_bits* __restrict__ src,
                                                    half_bits* __restrict__ dst, int n, int side,
                                                    int c, int out) {
    const long long total = static_cast<long long>(n) * out * out * c;
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < total;
         i += static_cast<long long>(gridDim.x) * blockDim.x) {
        const int ch = static_cast<int>(i % c);
        const long long pixel = i / c;
        const int ox = static_cast<int>(pixel % out);
        const int oy = static_cast<int>((pixel / out) % out);
        const long long image = pixel / (static_cast<long long>(out) * out);
        float best = __int_as_float(0xff800000);
        for (int ky = 0; ky < 3; ++ky) {
            const int y = 2 * oy + ky - 1;
            if (y < 0 || y >= side) continue;
            for (int kx = 0; kx < 3; ++kx) {
                const int x = 2 * ox + kx - 1;
                if (x < 0 || x >= side) continue;
                best = fmaxf(best, h2f(src[((image * side + y) * side + x) * c + ch]));
            }
        }
        dst[i] = f2h(best);
    }
}

// `y = act(y + bias[ch] + residual)` in place over `total` values of `c`
// channels; `residual` may be null, `bias` null for none. act: 0 none,
// 1 ReLU, 2 ReLU6.
extern "C" __global__ void conv_epilogue_f16(half_bits* __restrict__ y,
                                             const half_bits* __restrict__ bias,
                                             const half_bits* __restrict__ residual,
                                             long long total, int c, int act) {
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < total;
         i += static_cast<long long>(gridDim.x) * blockDim.x) {
        float v = h2f(y[i]);
        if (bias != nullptr) v += h2f(bias[i % c]);
        if (residual != nullptr) v += h2f(residual[i]);
        if (act >= 1) v = fmaxf(v, 0.0f);
        if (act == 2) v = fminf(v, 6.0f);
        y[i] = f2h(v);
    }
}

// Non-overlapping `p × p` patches of NHWC `src` ([n, side, side, c]) as
// GEMM rows: row (image, py, px) holds (row, column, channel) of its
// patch; ConvNeXt's 2×2 stride-2 downsampling as a GEMM.
extern "C" __global__ void patches_nhwc_f16(const half_bits* __restrict__ src,
                                            half_bits* __restrict__ dst, int n, int side, int c,
                                            int p) {
    const int grid = side / p;
    const long long width = static_cast<long long>(p) * p * c;
    const long long total = static_cast<long long>(n) * grid * grid * width;
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < total;
         i += static_cast<long long>(gridDim.x) * blockDim.x) {
        const long long row = i / width;
        const int col = static_cast<int>(i % width);
        const int ch = col % c;
        const int kx = (col / c) % p;
        const int ky = col / (c * p);
        const int gx = static_cast<int>(row % grid);
        const int gy = static_cast<int>((row / grid) % grid);
        const long long image = row / (static_cast<long long>(grid) * grid);
        const int y = gy * p + ky;
        const int x = gx * p + kx;
        dst[i] = src[((image * side + y) * side + x) * c + ch];
    }
}

// ConvNeXt's depthwise 7×7 convolution, padding 3, NHWC: taps `[7, 7, c]`
// (the plan's `dw_taps`), bias `[c]`; a thread per output value, summing
// its 49 taps in row-major order in f32, as the plan's reference does.
extern "C" __global__ void depthwise7_nhwc_f16(const half_bits* __restrict__ x,
                                               const half_bits* __restrict__ taps,
                                               const half_bits* __restrict__ bias,
                                               half_bits* __restrict__ y, int n, int side, int c) {
    const long long total = static_cast<long long>(n) * side * side * c;
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < total;
         i += static_cast<long long>(gridDim.x) * blockDim.x) {
        const int ch = static_cast<int>(i % c);
        const long long pixel = i / c;
        const int px = static_cast<int>(pixel % side);
        const int py = static_cast<int>((pixel / side) % side);
        const long long image = pixel / (static_cast<long long>(side) * side);
        float v = h2f(bias[ch]);
        for (int ky = 0; ky < 7; ++ky) {
            const int sy = py + ky - 3;
            if (sy < 0 || sy >= side) continue;
            for (int kx = 0; kx < 7; ++kx) {
                const int sx = px + kx - 3;
                if (sx < 0 || sx >= side) continue;
                v += h2f(x[((image * side + sy) * side + sx) * c + ch]) *
                     h2f(taps[(ky * 7 + kx) * c + ch]);
            }
        }
        y[i] = f2h(v);
    }
}
