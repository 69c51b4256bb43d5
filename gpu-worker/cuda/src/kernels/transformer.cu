// The transformers' element-wise and row kernels, f16 in and out, f32
// arithmetic, each row's reduction in a fixed order (a block's tree over
// a fixed thread count), so that a row's result does not depend on the
// rows beside it or on the batch size. GEMMs and attention's products are
// cuBLASLt's; these are what lies between them.
// half_bits, h2f and f2h: half.cuh, prepended.

constexpr int ROW_THREADS = 256;

__device__ __forceinline__ float negative_infinity() { return __int_as_float(0xff800000); }

struct Sum {
    __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
};
struct Max {
    __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// `op` over the block's `v` (ROW_THREADS threads), starting from `init`,
// the same on every thread: a warp shuffle tree, then the warps' results
// in order.
template <typename Op>
__device__ __forceinline__ float block_reduce(float v, float init, Op op) {
    __shared__ float warps[ROW_THREADS / 32];
    for (int offset = 16; offset > 0; offset /= 2) {
        v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
    }
    const int lane = threadIdx.x % 32;
    const int warp = threadIdx.x / 32;
    __syncthreads();
    if (lane == 0) {
        warps[warp] = v;
    }
    __syncthreads();
    float total = init;
    for (int w = 0; w < ROW_THREADS / 32; ++w) {
        total = op(total, warps[w]);
    }
    return total;
}

__device__ __forceinline__ float block_sum(float v) { return block_reduce(v, 0.0f, Sum()); }

__device__ __forceinline__ float block_max(float v) {
    return block_reduce(v, negative_infinity(), Max());
}

// LayerNorm over the last axis: one block per row of `width`, mean and
// variance in two passes (as PyTorch's), weight and bias in f32.
extern "C" __global__ void __launch_bounds__(ROW_THREADS)
    layer_norm_f16(const half_bits* __restrict__ x, half_bits* __restrict__ y,
                   const float* __restrict__ weight, const float* __restrict__ bias, int width,
                   float eps) {
    const half_bits* row = x + static_cast<long long>(blockIdx.x) * width;
    half_bits* out = y + static_cast<long long>(blockIdx.x) * width;
    float sum = 0.0f;
    for (int i = threadIdx.x; i < width; i += ROW_THREADS) {
        sum += h2f(row[i]);
    }
    const float mean = block_sum(sum) / width;
    float squares = 0.0f;
    for (int i = threadIdx.x; i < width; i += ROW_THREADS) {
        const float d = h2f(row[i]) - mean;
        squares += d * d;
    }
    const float rstd = rsqrtf(block_sum(squares) / width + eps);
    for (int i = threadIdx.x; i < width; i += ROW_THREADS) {
        const float v = (h2f(row[i]) - mean) * rstd;
        out[i] = f2h(v * weight[i] + bias[i]);
    }
}

// softmax(row) in place, one block per row of `width` (scaled by the
// scores' GEMM, in f32 before the f16 store); with
// `causal`, row r of each `queries`-row head sees keys 0..=r only and the
// rest are written 0 (as under a -inf mask).
extern "C" __global__ void __launch_bounds__(ROW_THREADS)
    softmax_rows_f16(half_bits* __restrict__ scores, int width, int causal, int queries) {
    half_bits* row = scores + static_cast<long long>(blockIdx.x) * width;
    const int seen = causal ? min(static_cast<int>(blockIdx.x % queries) + 1, width) : width;
    float best = negative_infinity();
    for (int i = threadIdx.x; i < seen; i += ROW_THREADS) {
        best = fmaxf(best, h2f(row[i]));
    }
    best = block_max(best);
    float sum = 0.0f;
    for (int i = threadIdx.x; i < seen; i += ROW_THREADS) {
        sum += __expf(h2f(row[i]) - best);
    }
    const float inv = 1.0f / block_sum(sum);
    for (int i = threadIdx.x; i < width; i += ROW_THREADS) {
        const float p = i < seen ? __expf(h2f(row[i]) - best) * inv : 0.0f;
        row[i] = f2h(p);
    }
}

// The MLPs' activations in place: 0 GELU (erf), 1 GELU's tanh form
// (SigLIP), 2 QuickGELU (OpenAI CLIP).
extern "C" __global__ void activation_f16(half_bits* __restrict__ x, long long n, int kind) {
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<long long>(gridDim.x) * blockDim.x) {
        const float v = h2f(x[i]);
        float r;
        if (kind == 0) {
            r = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
        } else if (kind == 1) {
            const float u = 0.7978845608028654f * (v + 0.044715f * v * v * v);
            r = 0.5f * v * (1.0f + tanhf(u));
        } else {
            r = v / (1.0f + __expf(-1.702f * v));
        }
        x[i] = f2h(r);
    }
}

// A gated MLP's hidden values (DINOv2 giant's SwiGLU): row r of `x`
// ([rows, 2f], the gate's f values, then the up projection's) into row r
// of `y` ([rows, f]): silu(gate) · up, in f32.
extern "C" __global__ void swiglu_f16(const half_bits* __restrict__ x,
                                      half_bits* __restrict__ y, long long rows, int f) {
    const long long total = rows * f;
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < total;
         i += static_cast<long long>(gridDim.x) * blockDim.x) {
        const long long row = i / f;
        const long long j = i % f;
        const float gate = h2f(x[row * 2 * f + j]);
        const float up = h2f(x[row * 2 * f + f + j]);
        y[i] = f2h(gate / (1.0f + __expf(-gate)) * up);
    }
}

// Row `index[i]` of `src` (`width` wide) into row `i` of `dst`, for
// `rows` rows: a text tower's pooled token.
extern "C" __global__ void gather_rows_f16(const half_bits* __restrict__ src,
                                           half_bits* __restrict__ dst,
                                           const int* __restrict__ index, int rows, int width) {
    const long long total = static_cast<long long>(rows) * width;
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < total;
         i += static_cast<long long>(gridDim.x) * blockDim.x) {
        const long long row = i / width;
        dst[i] = src[static_cast<long long>(index[row]) * width + i % width];
    }
}

// Attention's heads side by side for one batched GEMM over every
// (sequence, head): `qkv` ([n·tokens, 3d], q | k | v, each head's `dh`
// columns together) into `split` ([3][n][heads][tokens][dh]).
extern "C" __global__ void split_heads_f16(const half_bits* __restrict__ qkv,
                                           half_bits* __restrict__ split, int n, int tokens,
                                           int heads, int dh) {
    const long long d = static_cast<long long>(heads) * dh;
    const long long per = static_cast<long long>(n) * tokens * d;
    const long long total = 3 * per;
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < total;
         i += static_cast<long long>(gridDim.x) * blockDim.x) {
        const long long which = i / per;
        const long long rest = i % per;
        const int j = static_cast<int>(rest % dh);
        const long long row = rest / dh;  // ((b * heads + h) * tokens + t)
        const int t = static_cast<int>(row % tokens);
        const long long bh = row / tokens;
        const int h = static_cast<int>(bh % heads);
        const long long b = bh / heads;
        split[i] = qkv[(b * tokens + t) * 3 * d + which * d + static_cast<long long>(h) * dh + j];
    }
}

// The attended values back in token rows: `heads_out`
// ([n][heads][tokens][dh]) into `out` ([n·tokens, d]).
extern "C" __global__ void merge_heads_f16(const half_bits* __restrict__ heads_out,
                                           half_bits* __restrict__ out, int n, int tokens,
                                           int heads, int dh) {
    const long long d = static_cast<long long>(heads) * dh;
    const long long total = static_cast<long long>(n) * tokens * d;
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < total;
         i += static_cast<long long>(gridDim.x) * blockDim.x) {
        const long long row = i / d;  // b * tokens + t
        const int col = static_cast<int>(i % d);
        const int h = col / dh;
        const int j = col % dh;
        const long long b = row / tokens;
        const int t = static_cast<int>(row % tokens);
        out[i] = heads_out[((b * heads + h) * tokens + t) * dh + j];
    }
}
