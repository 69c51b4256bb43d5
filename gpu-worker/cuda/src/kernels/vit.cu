// The ViT image towers' own steps around cuBLASLt's GEMMs: the patch
// embedding's input read from the loader's u8 crops, the token sequence
// assembled, and the pooling after the final LayerNorm. f16 in and out,
// f32 arithmetic; each output written by one thread from a fixed order of
// reads, so an image's result does not depend on the images beside it.
// half_bits, h2f and f2h: half.cuh, prepended.

struct PatchNorm {
    float mean[3];
    float inv_std[3];
};

// `[padded·grid², 3·p·p]` rows of non-overlapping p×p patches, each over
// (channel, row, column), from `rows` u8 NCHW `side × side` images
// normalised as `(x - mean) · inv_std`; padding images are the normalised
// zero pixel. One thread per output value.
extern "C" __global__ void patches_f16(const unsigned char* __restrict__ src,
                                       half_bits* __restrict__ dst, int rows, int padded,
                                       int side, int p, PatchNorm norm) {
    const int grid = side / p;
    const long long width = 3LL * p * p;
    const long long total = static_cast<long long>(padded) * grid * grid * width;
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < total;
         i += static_cast<long long>(gridDim.x) * blockDim.x) {
        const long long row = i / width;
        const int col = static_cast<int>(i % width);
        const long long image = row / (grid * grid);
        const int cell = static_cast<int>(row % (grid * grid));
        const int c = col / (p * p);
        const int ky = (col / p) % p;
        const int kx = col % p;
        const int y = (cell / grid) * p + ky;
        const int x = (cell % grid) * p + kx;
        const unsigned char v =
            image < rows ? src[((image * 3 + c) * side + y) * static_cast<long long>(side) + x] : 0;
        dst[i] = f2h((static_cast<float>(v) - norm.mean[c]) * norm.inv_std[c]);
    }
}

// The token sequence `[n, prefix + patches, d]`: the prefix rows (the
// class token with its position, registers) from `prefix`, then each
// patch's embedding (the GEMM's output, bias added) plus its position.
extern "C" __global__ void tokens_f16(const half_bits* __restrict__ embedded,
                                      half_bits* __restrict__ tokens,
                                      const float* __restrict__ prefix,
                                      const float* __restrict__ patch_pos, int n, int prefix_rows,
                                      int patches, int d) {
    const int per_image = prefix_rows + patches;
    const long long total = static_cast<long long>(n) * per_image * d;
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < total;
         i += static_cast<long long>(gridDim.x) * blockDim.x) {
        const long long image = i / (static_cast<long long>(per_image) * d);
        const int token = static_cast<int>((i / d) % per_image);
        const int j = static_cast<int>(i % d);
        float v;
        if (token < prefix_rows) {
            v = prefix[token * d + j];
        } else {
            const int q = token - prefix_rows;
            v = h2f(embedded[(image * patches + q) * d + j]) + patch_pos[static_cast<long long>(q) * d + j];
        }
        tokens[i] = f2h(v);
    }
}

// Pooling of the normed tokens `[n, tokens, d]` into `[n, width]`:
// mode 0 the class token, 1 the mean of the tokens after the prefix,
// 2 both side by side (width 2d). The mean sums in token order, in f32.
extern "C" __global__ void pool_f16(const half_bits* __restrict__ t, half_bits* __restrict__ out,
                                    int n, int tokens, int prefix_rows, int d, int mode) {
    const int width = mode == 2 ? 2 * d : d;
    const long long total = static_cast<long long>(n) * width;
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < total;
         i += static_cast<long long>(gridDim.x) * blockDim.x) {
        const long long image = i / width;
        const int col = static_cast<int>(i % width);
        const half_bits* rows = t + image * tokens * static_cast<long long>(d);
        float v;
        if (mode == 0 || (mode == 2 && col < d)) {
            v = h2f(rows[col]);
        } else {
            const int j = mode == 2 ? col - d : col;
            float sum = 0.0f;
            for (int tok = prefix_rows; tok < tokens; ++tok) {
                sum += h2f(rows[static_cast<long long>(tok) * d + j]);
            }
            v = sum / static_cast<float>(tokens - prefix_rows);
        }
        out[i] = f2h(v);
    }
}
