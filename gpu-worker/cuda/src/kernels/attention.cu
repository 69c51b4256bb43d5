// Multi-head attention in one kernel (#40), FlashAttention-2's scheme:
// each block takes 64 queries of one (sequence, head), each of its four
// warps 16 of them, and walks the sequence's keys 64 at a time through
// shared memory. Scores (Q·Kᵀ) and the weighted values (P·V) are the
// tensor cores' `mma.sync.m16n8k16` (f16 in, f32 accumulation); the
// softmax is online, in f32, each row's running maximum and sum kept in
// registers, so the scores are never stored. Q, K and V are read where
// the QKV GEMM wrote them (`qkv`, `[n·tokens, 3d]`: q | k | v, each head's
// `DH` columns together) and the result is written in token rows (`out`,
// `[n·tokens, d]`): no split or merge of the heads.
//
// An output row depends on its own sequence's Q, K and V only, and every
// sum runs in one fixed order (keys in tiles of 64 from the first, the
// four lanes of a quad by the same shuffles): its bytes do not depend on
// the sequences beside it or on the batch size.
//
// Fragment layouts (PTX ISA, "mma.m16n8k16" for .f16): with g = lane / 4
// and t = lane % 4, A (16×16, row-major) is four registers of two halves:
// (row g, cols 2t..2t+1), (row g+8, cols 2t..), (row g, cols 2t+8..),
// (row g+8, cols 2t+8..); B (16×8, k×n) two: (k 2t..2t+1, col g),
// (k 2t+8..2t+9, col g); C and D (16×8, f32) four: (row g, cols 2t, 2t+1),
// (row g+8, cols 2t, 2t+1). The lower half of a register holds the lower
// index. C's layout over two n-tiles is A's over one k-step: the scores'
// accumulators become P's A operand without moving between lanes.
// half_bits, h2f and f2h: half.cuh, prepended.

constexpr int ATTENTION_WARPS = 4;
constexpr int ATTENTION_QUERIES = 16 * ATTENTION_WARPS;
constexpr int ATTENTION_KEYS = 64;

__device__ __forceinline__ float attention_negative_infinity() {
    return __int_as_float(0xff800000);
}

__device__ __forceinline__ unsigned pack_halves(float lo, float hi) {
    return static_cast<unsigned>(f2h(lo)) | (static_cast<unsigned>(f2h(hi)) << 16);
}

__device__ __forceinline__ unsigned pair_of(half_bits lo, half_bits hi) {
    return static_cast<unsigned>(lo) | (static_cast<unsigned>(hi) << 16);
}

// d += a·b, one 16×8×16 tile.
__device__ __forceinline__ void mma_16x8x16(float (&d)[4], const unsigned (&a)[4], unsigned b0,
                                            unsigned b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// softmax(q·kᵀ · scale) · v for every query of `tokens` in every head of
// `n` sequences; with `causal`, query i sees keys 0..=i. Grid
// (⌈tokens/64⌉, heads, n), ATTENTION_WARPS warps a block.
template <int DH>
__device__ __forceinline__ void attention(const half_bits* __restrict__ qkv,
                                          half_bits* __restrict__ out, int tokens, int heads,
                                          float scale, int causal) {
    static_assert(DH % 16 == 0, "DH is a multiple of 16");
    constexpr int STRIDE = DH + 8;  // halves a shared row: 16-byte rows, no bank conflicts on K
    __shared__ __align__(16) half_bits keys[ATTENTION_KEYS * STRIDE];
    __shared__ __align__(16) half_bits values[ATTENTION_KEYS * STRIDE];

    const int lane = threadIdx.x % 32;
    const int warp = threadIdx.x / 32;
    const int g = lane / 4;
    const int t = lane % 4;
    const int head = blockIdx.y;
    const long long d = static_cast<long long>(heads) * DH;
    const long long row_stride = 3 * d;
    const long long first_row = static_cast<long long>(blockIdx.z) * tokens;
    const half_bits* q_base = qkv + first_row * row_stride + static_cast<long long>(head) * DH;
    const half_bits* k_base = q_base + d;
    const half_bits* v_base = q_base + 2 * d;

    const int block_query = blockIdx.x * ATTENTION_QUERIES;
    const int query0 = block_query + warp * 16 + g;  // this lane's rows: query0, query0 + 8
    const int query1 = query0 + 8;

    // This warp's 16 queries as A fragments, one per 16 columns of DH.
    unsigned q_frag[DH / 16][4];
#pragma unroll
    for (int k = 0; k < DH / 16; ++k) {
        const int col = k * 16 + 2 * t;
        const unsigned* r0 =
            reinterpret_cast<const unsigned*>(q_base + static_cast<long long>(query0) * row_stride + col);
        const unsigned* r1 =
            reinterpret_cast<const unsigned*>(q_base + static_cast<long long>(query1) * row_stride + col);
        q_frag[k][0] = query0 < tokens ? r0[0] : 0u;
        q_frag[k][1] = query1 < tokens ? r1[0] : 0u;
        q_frag[k][2] = query0 < tokens ? r0[4] : 0u;
        q_frag[k][3] = query1 < tokens ? r1[4] : 0u;
    }

    float o[DH / 8][4];
#pragma unroll
    for (int i = 0; i < DH / 8; ++i) {
        o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    }
    float max0 = attention_negative_infinity(), max1 = attention_negative_infinity();
    float sum0 = 0.0f, sum1 = 0.0f;
    const float scale_log2 = scale * 1.4426950408889634f;

    // Keys past the block's last query are masked for all of its rows
    // under `causal`.
    const int key_end = causal ? min(tokens, block_query + ATTENTION_QUERIES) : tokens;
    constexpr int VECTORS = DH / 8;  // 16-byte vectors a row
    for (int key0 = 0; key0 < key_end; key0 += ATTENTION_KEYS) {
        __syncthreads();  // the last tile's readers are done
        for (int i = threadIdx.x; i < ATTENTION_KEYS * VECTORS; i += 32 * ATTENTION_WARPS) {
            const int r = i / VECTORS;
            const int c = (i % VECTORS) * 8;
            const int key = key0 + r;
            uint4 kv = make_uint4(0u, 0u, 0u, 0u), vv = make_uint4(0u, 0u, 0u, 0u);
            if (key < tokens) {
                kv = *reinterpret_cast<const uint4*>(k_base + static_cast<long long>(key) * row_stride + c);
                vv = *reinterpret_cast<const uint4*>(v_base + static_cast<long long>(key) * row_stride + c);
            }
            *reinterpret_cast<uint4*>(&keys[r * STRIDE + c]) = kv;
            *reinterpret_cast<uint4*>(&values[r * STRIDE + c]) = vv;
        }
        __syncthreads();

        // Scores of this warp's 16 queries against the tile's 64 keys.
        float s[ATTENTION_KEYS / 8][4];
#pragma unroll
        for (int n = 0; n < ATTENTION_KEYS / 8; ++n) {
            s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
            const half_bits* key_row = &keys[(n * 8 + g) * STRIDE + 2 * t];
#pragma unroll
            for (int k = 0; k < DH / 16; ++k) {
                const unsigned b0 = *reinterpret_cast<const unsigned*>(key_row + k * 16);
                const unsigned b1 = *reinterpret_cast<const unsigned*>(key_row + k * 16 + 8);
                mma_16x8x16(s[n], q_frag[k], b0, b1);
            }
        }

        // Scaled (log2 units), masked, and this tile's row maxima.
        float tile_max0 = attention_negative_infinity(), tile_max1 = attention_negative_infinity();
#pragma unroll
        for (int n = 0; n < ATTENTION_KEYS / 8; ++n) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int key = key0 + n * 8 + 2 * t + e;
                const bool out_of_range = key >= tokens;
                s[n][e] = (out_of_range || (causal && key > query0)) ? attention_negative_infinity()
                                                                     : s[n][e] * scale_log2;
                s[n][2 + e] = (out_of_range || (causal && key > query1))
                                  ? attention_negative_infinity()
                                  : s[n][2 + e] * scale_log2;
                tile_max0 = fmaxf(tile_max0, s[n][e]);
                tile_max1 = fmaxf(tile_max1, s[n][2 + e]);
            }
        }
        tile_max0 = fmaxf(tile_max0, __shfl_xor_sync(0xffffffffu, tile_max0, 1));
        tile_max0 = fmaxf(tile_max0, __shfl_xor_sync(0xffffffffu, tile_max0, 2));
        tile_max1 = fmaxf(tile_max1, __shfl_xor_sync(0xffffffffu, tile_max1, 1));
        tile_max1 = fmaxf(tile_max1, __shfl_xor_sync(0xffffffffu, tile_max1, 2));
        const float new_max0 = fmaxf(max0, tile_max0);
        const float new_max1 = fmaxf(max1, tile_max1);
        // A row with no key seen yet (every key so far masked) keeps 0s.
        const float base0 = new_max0 == attention_negative_infinity() ? 0.0f : new_max0;
        const float base1 = new_max1 == attention_negative_infinity() ? 0.0f : new_max1;
        const float correction0 = exp2f(max0 - base0);
        const float correction1 = exp2f(max1 - base1);
        max0 = new_max0;
        max1 = new_max1;
        sum0 *= correction0;
        sum1 *= correction1;
#pragma unroll
        for (int i = 0; i < DH / 8; ++i) {
            o[i][0] *= correction0;
            o[i][1] *= correction0;
            o[i][2] *= correction1;
            o[i][3] *= correction1;
        }
#pragma unroll
        for (int n = 0; n < ATTENTION_KEYS / 8; ++n) {
            s[n][0] = exp2f(s[n][0] - base0);
            s[n][1] = exp2f(s[n][1] - base0);
            s[n][2] = exp2f(s[n][2] - base1);
            s[n][3] = exp2f(s[n][3] - base1);
            sum0 += s[n][0] + s[n][1];
            sum1 += s[n][2] + s[n][3];
        }

        // o += p·v, 16 keys a step: p's A fragment is two n-tiles of s.
#pragma unroll
        for (int k = 0; k < ATTENTION_KEYS / 16; ++k) {
            const unsigned p[4] = {
                pack_halves(s[2 * k][0], s[2 * k][1]),
                pack_halves(s[2 * k][2], s[2 * k][3]),
                pack_halves(s[2 * k + 1][0], s[2 * k + 1][1]),
                pack_halves(s[2 * k + 1][2], s[2 * k + 1][3]),
            };
            const half_bits* v_rows = &values[(k * 16 + 2 * t) * STRIDE + g];
#pragma unroll
            for (int i = 0; i < DH / 8; ++i) {
                const half_bits* v = v_rows + i * 8;
                const unsigned b0 = pair_of(v[0], v[STRIDE]);
                const unsigned b1 = pair_of(v[8 * STRIDE], v[9 * STRIDE]);
                mma_16x8x16(o[i], p, b0, b1);
            }
        }
    }

    sum0 += __shfl_xor_sync(0xffffffffu, sum0, 1);
    sum0 += __shfl_xor_sync(0xffffffffu, sum0, 2);
    sum1 += __shfl_xor_sync(0xffffffffu, sum1, 1);
    sum1 += __shfl_xor_sync(0xffffffffu, sum1, 2);
    const float inv0 = sum0 > 0.0f ? 1.0f / sum0 : 0.0f;
    const float inv1 = sum1 > 0.0f ? 1.0f / sum1 : 0.0f;
    half_bits* out_base = out + first_row * d + static_cast<long long>(head) * DH + 2 * t;
#pragma unroll
    for (int i = 0; i < DH / 8; ++i) {
        if (query0 < tokens) {
            *reinterpret_cast<unsigned*>(out_base + static_cast<long long>(query0) * d + i * 8) =
                pack_halves(o[i][0] * inv0, o[i][1] * inv0);
        }
        if (query1 < tokens) {
            *reinterpret_cast<unsigned*>(out_base + static_cast<long long>(query1) * d + i * 8) =
                pack_halves(o[i][2] * inv1, o[i][3] * inv1);
        }
    }
}

extern "C" __global__ void __launch_bounds__(32 * ATTENTION_WARPS)
    attention_dh64_f16(const half_bits* __restrict__ qkv, half_bits* __restrict__ out, int tokens,
                       int heads, float scale, int causal) {
    attention<64>(qkv, out, tokens, heads, scale, causal);
}

// Other head widths (a multiple of 16 up to 128 fits the shared memory
// and registers) wait for a GPU run to check them; until then they take
// the unfused path.
