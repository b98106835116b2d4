// gemv.cu: decode GEMV for the affine family (MLX affine-quantised weights).
//
//   y[t][o] = sum_i x[t][i] * (scale[o][i/g] * q[o][i] + biases[o][i/g])  (+ bias[o])
//
// Compiled at run time by NVRTC for sm_90 (no #include: bf16 travels as
// unsigned short, conversions are bit operations or PTX cvt).
// NVRTC options: -arch=sm_90 -std=c++17 (C++14 or later; NVRTC 11.x defaults to an
// older dialect) plus the -D macros below. Entry point is extern "C" (unmangled).
//
// ENTRY POINT
//   extern "C" __global__ void affine_gemv(
//       const unsigned short* x,       // bf16 [tokens][in_features]
//       const unsigned int*   weight,  // uint32 [out_features][in_features*BITS/32]
//       const unsigned short* scales,  // bf16 [out_features][in_features/GROUP]
//       const unsigned short* biases,  // bf16 [out_features][in_features/GROUP]
//       const unsigned short* bias,    // bf16 [out_features], or 0 (null) for none
//       unsigned short*       y,       // bf16 [tokens][out_features]
//       int tokens, int in_features, int out_features)
//   Buffers must be 16-byte aligned.
//
// MACROS (-D, all required unless a default is given)
//   BITS    2,3,4,5,6,8        GROUP  32,64,128
//   TOKENS  tokens per block (1..8); blockIdx.y walks token tiles, so any
//           tokens >= 1 is correct, but the kernel is meant for tokens <= 8
//           with TOKENS = tokens (the candidate admits 1..8).
//   ROWS    output rows per warp (1..8), ROWS*TOKENS <= 32
//   UNROLL  chunks each lane loads per step (1..4)
//   VALS    values per lane chunk (32, 64 or 128); in_features % VALS == 0
//   LOADW   bytes per weight load (16, 8 or 4); divides VALS*BITS/8
//   XSMEM   1: x lives in shared memory as fp32; 0: x is read through L1
//   WARPS   warps per block (default 8)
//   GV_MINB minimum resident blocks per SM for the register budget (default 2)
//
// LAUNCH (host computes, see scripts/affine_kernels.py: gemv_config)
//   block = WARPS*32 threads
//   grid  = ( min(ceil(ceil(out/ROWS)/WARPS), SMs*OCC), ceil(tokens/TOKENS), 1 )
//           where OCC = resident blocks per SM for this variant (the driver's
//           cuOccupancyMaxActiveBlocksPerMultiprocessor with WARPS*32 threads and
//           the shared memory below; >= 1). Warps loop over row sets with a grid
//           stride, so any grid.x >= 1 is correct; sizing it to the resident
//           capacity avoids a partial last wave.
//   dynamic shared memory bytes =
//       4*round_up(TOKENS*(in/SUB), 4)                  (per-group x sums)
//     + XSMEM ? 4*TOKENS*(in/VALS)*(VALS+4) : 0         (x as fp32, padded)
//   with SUB = min(VALS, GROUP).
//
// VARIANT CHOICE (scripts/affine_kernels.py: gemv_config; the Go side mirrors it)
//   VALS/LOADW: vmin = {2:64, 3:128, 4:32, 5:128, 6:64, 8:32}[BITS], the smallest
//     run of whole values that is a whole number of 16-byte loads. If
//     in % vmin == 0 and in/vmin >= 16: VALS = vmin, LOADW = 16; else VALS = 32,
//     LOADW = gcd(16, 4*BITS) (always valid since in % 32 == 0).
//   TOKENS = tokens.  ROWS = 4 (tokens <= 2), 2 (<= 4), 1 (else); then halved
//     while ROWS > 1 and ceil(out/(8*ROWS)) < SMs; then ROWS = min(ROWS, 128/CB)
//     with CB = VALS*BITS/8 (chunk bytes).  WARPS = 8.
//   UNROLL = clamp(128/(ROWS*CB), 1, VALS == 32 ? 4 : 2), decremented while UNROLL > 1 and
//     ROWS*UNROLL*TOKENS > 8, then at most ceil((in/VALS)/32).
//   GV_MINB = 2 if tokens <= 4 else 1.
//   XSMEM = 1 if 4*TOKENS*(in/VALS)*(VALS+4) + 4*TOKENS*(in/SUB) <= 96 KiB, else 0.
//   Limits: TOKENS*(in/SUB)*4 bytes of x sums must fit in shared memory.
//
// METHOD
//   Each warp owns ROWS output rows at a time (row sets, grid-stride loop);
//   lane l reads chunks l, l+32, ... of each row with 16-byte loads (UNROLL
//   chunks x ROWS rows in flight per step), so each warp load is contiguous.
//   A value q becomes the float f = 0.5 + q/256 (q of 2..6 bits: a prmt of
//   pre-split nibbles/crumbs for 2 and 4 bits, shift+lop3 for 3/5/6) or
//   1 + q/32768 (8 bits: one prmt), with no conversion instruction; the inner
//   loop is acc += f*x in fp32. Per group (or VALS-chunk part of a group):
//     y += (s/C1)*acc + (b - s*C0/C1)*xsum
//   which folds both the group bias and the f offset (exact algebra, fp32).
//   Per-group x sums (and x as fp32 when XSMEM) are computed once per block
//   into shared memory. The warp reduces with shuffles; weights never touch
//   shared memory.

typedef unsigned int u32;
typedef unsigned short u16;
typedef unsigned long long u64;

#if !defined(BITS) || !defined(GROUP) || !defined(TOKENS) || !defined(ROWS) || !defined(UNROLL) || !defined(VALS) || !defined(LOADW) || !defined(XSMEM)
#error "affine_gemv needs -DBITS -DGROUP -DTOKENS -DROWS -DUNROLL -DVALS -DLOADW -DXSMEM"
#endif
#ifndef WARPS
#define WARPS 8
#endif
#ifndef GV_MINB
#define GV_MINB 2   // blocks per SM the register allocation must allow (<= 65536/(2*256) = 128 regs)
#endif

#if BITS != 2 && BITS != 3 && BITS != 4 && BITS != 5 && BITS != 6 && BITS != 8
#error "BITS must be 2,3,4,5,6 or 8"
#endif
#if GROUP != 32 && GROUP != 64 && GROUP != 128
#error "GROUP must be 32, 64 or 128"
#endif
#if VALS != 32 && VALS != 64 && VALS != 128
#error "VALS must be 32, 64 or 128"
#endif
#if ((VALS * BITS / 8) % LOADW) != 0 || (LOADW != 4 && LOADW != 8 && LOADW != 16)
#error "LOADW must be 4, 8 or 16 and divide VALS*BITS/8"
#endif
#if ROWS * TOKENS > 32 || TOKENS < 1 || TOKENS > 8 || ROWS < 1
#error "need 1 <= TOKENS <= 8 and ROWS*TOKENS <= 32"
#endif

#define GV_THREADS (WARPS * 32)
#define CHUNK_BYTES (VALS * BITS / 8)
#define CHUNK_WORDS (CHUNK_BYTES / 4)
#define LOADS (CHUNK_BYTES / LOADW)
#define LOAD_WORDS (LOADW / 4)
#define SUB (VALS < GROUP ? VALS : GROUP)
#define NSUB (VALS / SUB)
#define UNITS_PER_SUB (SUB / 32)
#define XPAD (VALS + 4)

#if BITS == 8
#define F_SCALE 32768.0f   // 1/C1 with f = C0 + C1*q, C0 = 1, C1 = 2^-15
#define F_OFFSET 32768.0f  // C0/C1
#else
#define F_SCALE 256.0f     // C0 = 0.5, C1 = 2^-8
#define F_OFFSET 128.0f
#endif

// ---------------------------------------------------------------------------
// Device primitives. For CPU emulation, qmm/kernels/emu/emu.h defines KCAND_EMU
// and supplies host versions of everything in this block.
#ifndef KCAND_EMU
#define KC_DEV __device__ __forceinline__
struct alignas(16) kc_u4 { u32 x, y, z, w; };
struct alignas(16) kc_f4 { float x, y, z, w; };
KC_DEV float kc_bf16(u32 h) { return __uint_as_float(h << 16); }
KC_DEV u16 kc_to_bf16(float f) {
    u16 r;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(f));
    return r;
}
// Streaming weight loads: read-only, do not allocate in L1.
KC_DEV kc_u4 kc_ld_stream16(const void* p) {
    kc_u4 r;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
        : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
    return r;
}
KC_DEV void kc_ld_stream8(const void* p, u32& a, u32& b) {
    asm("ld.global.nc.L1::no_allocate.v2.u32 {%0,%1}, [%2];" : "=r"(a), "=r"(b) : "l"(p));
}
KC_DEV u32 kc_ld_stream4(const void* p) {
    u32 r;
    asm("ld.global.nc.L1::no_allocate.u32 %0, [%1];" : "=r"(r) : "l"(p));
    return r;
}
// Small read-only data (x, scales): cached in L1.
KC_DEV kc_u4 kc_ld_ro16(const void* p) {
    kc_u4 r;
    asm("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];"
        : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
    return r;
}
KC_DEV u32 kc_ld_ro_u16(const u16* p) {
    u16 r;
    asm("ld.global.nc.u16 %0, [%1];" : "=h"(r) : "l"(p));
    return r;
}
// Byte k of a (0..3) into byte 2 over 0x3F000000: the float 0.5 + a.byte_k/256
// (for byte values < 128). Literal selectors keep ptxas from materialising them.
KC_DEV u32 kc_byte_to_half(u32 a, int k) {
    u32 d;
    const u32 m = 0x3F000000u;
    switch (k) {
    case 0: asm("prmt.b32 %0, %1, %2, 0x3400;" : "=r"(d) : "r"(m), "r"(a)); break;
    case 1: asm("prmt.b32 %0, %1, %2, 0x7144;" : "=r"(d) : "r"(a), "r"(m)); break;
    case 2: asm("prmt.b32 %0, %1, %2, 0x7244;" : "=r"(d) : "r"(a), "r"(m)); break;
    default: asm("prmt.b32 %0, %1, %2, 0x7344;" : "=r"(d) : "r"(a), "r"(m)); break;
    }
    return d;
}
// Byte k of a into byte 1 over 0x3F800000: the float 1 + a.byte_k/32768.
KC_DEV u32 kc_byte_to_one(u32 a, int k) {
    u32 d;
    const u32 m = 0x3F800000u;
    switch (k) {
    case 0: asm("prmt.b32 %0, %1, %2, 0x7604;" : "=r"(d) : "r"(a), "r"(m)); break;
    case 1: asm("prmt.b32 %0, %1, %2, 0x7614;" : "=r"(d) : "r"(a), "r"(m)); break;
    case 2: asm("prmt.b32 %0, %1, %2, 0x7624;" : "=r"(d) : "r"(a), "r"(m)); break;
    default: asm("prmt.b32 %0, %1, %2, 0x7634;" : "=r"(d) : "r"(a), "r"(m)); break;
    }
    return d;
}
KC_DEV u32 kc_funnel_r(u32 lo, u32 hi, u32 sh) { return __funnelshift_r(lo, hi, sh); }
KC_DEV float kc_shfl_xor(float v, int m) { return __shfl_xor_sync(0xffffffffu, v, m); }
#define KC_DYNAMIC_SMEM(name) extern __shared__ __align__(16) unsigned char name[]
#define KC_SYNC() __syncthreads()
#define KC_SCHED_FENCE() asm volatile("" ::: "memory")
#define KC_LAUNDER(v) asm volatile("" : "+r"(v))
#endif

// f = C0 + C1*q for value e (0..7) of piece p (0..3) of a 32-value unit whose
// BITS packed words are w[0..BITS-1] (value i at bits [i*BITS, (i+1)*BITS)).
// Everything folds to constants after unrolling.
KC_DEV float kc_decode(const u32* w, int p, int e) {
#if BITS == 4
    const u32 word = w[p];
    const u32 nib = (e & 1) ? ((word >> 4) & 0x0F0F0F0Fu) : (word & 0x0F0F0F0Fu);
    return __uint_as_float(kc_byte_to_half(nib, e >> 1));
#elif BITS == 2
    const int i = 8 * (p & 1) + e;   // value index inside word p/2
    const u32 t = (w[p >> 1] >> (2 * (i & 3))) & 0x03030303u;
    return __uint_as_float(kc_byte_to_half(t, i >> 2));
#elif BITS == 8
    const u32 word = w[2 * p + (e >> 2)];
    return __uint_as_float(kc_byte_to_one(word, e & 3));
#else
    const int bit = (8 * p + e) * BITS;
    const int wi = bit >> 5, sh = bit & 31;
    u32 t;
    if (sh + BITS <= 32) {
        t = sh >= 16 ? (w[wi] >> (sh - 16)) : (w[wi] << (16 - sh));
    } else {
        t = kc_funnel_r(w[wi], w[wi + 1], (u32)(sh - 16));
    }
    return __uint_as_float((t & (((1u << BITS) - 1u) << 16)) | 0x3F000000u);
#endif
}

extern "C" __global__ void __launch_bounds__(GV_THREADS, GV_MINB)
affine_gemv(const u16* __restrict__ x, const u32* __restrict__ weight,
            const u16* __restrict__ scales, const u16* __restrict__ biases,
            const u16* __restrict__ bias, u16* __restrict__ y,
            int tokens, int in_features, int out_features)
{
    KC_DYNAMIC_SMEM(smem_raw);
    const int in = in_features;
    const int out = out_features;
    const int nch = in / VALS;            // chunks per row
    const int groups = in / GROUP;
    const int nsub = in / SUB;            // fold units per token
    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int t0 = blockIdx.y * TOKENS;
    // Warps walk row sets (ROWS consecutive rows) with a grid stride. Row set
    // rs goes to warp rs / gridDim.x of block rs % gridDim.x (block index
    // fastest), so with a grid sized to the resident capacity every block, and
    // hence every SM, gets the same number of row sets to within one per warp.
    const int nrowsets = (out + ROWS - 1) / ROWS;
    const int rs_step = gridDim.x * WARPS;
    int rs = warp * gridDim.x + blockIdx.x;
    int row0 = rs * ROWS;
    const long long row_words = (long long)in * BITS / 32;

    float* xsum = reinterpret_cast<float*>(smem_raw);          // [TOKENS][nsub]
#if XSMEM
    float* xs = xsum + ((TOKENS * nsub + 3) & ~3);             // [TOKENS][nch][XPAD]
#endif

    int rowc[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) rowc[r] = min(row0 + r, out - 1);
    const bool first = rs < nrowsets;

    u32 wv[UNROLL][ROWS][CHUNK_WORDS];
    u32 sv[UNROLL][ROWS][NSUB];
    u32 bv[UNROLL][ROWS][NSUB];

    // Issue the loads of one step: UNROLL chunks of ROWS rows, plus their
    // scales and biases.
    auto load_step = [&](int cb) {
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const int c = cb + u * 32 + lane;
            if (c < nch) {
#pragma unroll
                for (int r = 0; r < ROWS; ++r) {
                    const u32* src = weight + rowc[r] * row_words + (long long)c * CHUNK_WORDS;
#pragma unroll
                    for (int l = 0; l < LOADS; ++l) {
#if LOADW == 16
                        const kc_u4 v = kc_ld_stream16(src + 4 * l);
                        wv[u][r][4 * l + 0] = v.x;
                        wv[u][r][4 * l + 1] = v.y;
                        wv[u][r][4 * l + 2] = v.z;
                        wv[u][r][4 * l + 3] = v.w;
#elif LOADW == 8
                        kc_ld_stream8(src + 2 * l, wv[u][r][2 * l], wv[u][r][2 * l + 1]);
#else
                        wv[u][r][l] = kc_ld_stream4(src + l);
#endif
                    }
#pragma unroll
                    for (int j = 0; j < NSUB; ++j) {
                        const long long e = (long long)rowc[r] * groups + (c * VALS + j * SUB) / GROUP;
                        sv[u][r][j] = kc_ld_ro_u16(scales + e);
                        bv[u][r][j] = kc_ld_ro_u16(biases + e);
                    }
                }
            }
        }
    };

    if (first) load_step(0);

    // Prologue: per-SUB sums of x (and x as fp32 in shared memory).
    {
        const int pieces_per_tok = in / 8;
        const int total = TOKENS * pieces_per_tok;
        for (int base = 0; base < total; base += GV_THREADS) {
            const int idx = base + tid;
            const bool valid = idx < total;
            const int t = valid ? idx / pieces_per_tok : 0;
            const int p = valid ? idx - t * pieces_per_tok : 0;
            float f[8];
            float s = 0.f;
            kc_u4 v = {0u, 0u, 0u, 0u};
            if (valid && t0 + t < tokens) v = kc_ld_ro16(x + (long long)(t0 + t) * in + 8 * p);
            const u32 vw[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                f[2 * k] = __uint_as_float(vw[k] << 16);
                f[2 * k + 1] = __uint_as_float(vw[k] & 0xFFFF0000u);
                s += f[2 * k] + f[2 * k + 1];
            }
#if XSMEM
            if (valid) {
                const int vidx = 8 * p;
                const int c = vidx / VALS;
                float* dst = xs + ((long long)t * nch + c) * XPAD + (vidx - c * VALS);
                reinterpret_cast<kc_f4*>(dst)[0] = kc_f4{f[0], f[1], f[2], f[3]};
                reinterpret_cast<kc_f4*>(dst)[1] = kc_f4{f[4], f[5], f[6], f[7]};
            }
#endif
#pragma unroll
            for (int o = 1; o < SUB / 8; o <<= 1) s += kc_shfl_xor(s, o);
            if (valid && (p % (SUB / 8)) == 0) xsum[t * nsub + p / (SUB / 8)] = s;
        }
    }
    KC_SYNC();

    for (; rs < nrowsets; rs += rs_step) {
        float acc[ROWS][TOKENS];
#pragma unroll
        for (int r = 0; r < ROWS; ++r)
#pragma unroll
            for (int t = 0; t < TOKENS; ++t) acc[r][t] = 0.f;

        for (int cb = 0;;) {
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {
                const int c = cb + u * 32 + lane;
                if (c < nch) {
                    // Per-token base of this chunk's x; pieces add constant offsets.
#if XSMEM
                    const float* xc[TOKENS];
#pragma unroll
                    for (int t = 0; t < TOKENS; ++t) xc[t] = xs + (t * nch + c) * XPAD;
#else
                    const u16* xc[TOKENS];
#pragma unroll
                    for (int t = 0; t < TOKENS; ++t)
                        xc[t] = x + ((long long)min(t0 + t, tokens - 1) * in + c * VALS);
#endif
#pragma unroll
                    for (int j = 0; j < NSUB; ++j) {
                        float a[ROWS][TOKENS];
#pragma unroll
                        for (int r = 0; r < ROWS; ++r)
#pragma unroll
                            for (int t = 0; t < TOKENS; ++t) a[r][t] = 0.f;
#pragma unroll
                        for (int uu = 0; uu < UNITS_PER_SUB; ++uu) {
                            const int unit = j * UNITS_PER_SUB + uu;   // 32-value unit inside the chunk
#pragma unroll
                            for (int p = 0; p < 4; ++p) {
                                // Keep the compiler from hoisting shared-memory loads of
                                // later pieces (register pressure); global loads are
                                // already in flight.
                                KC_SCHED_FENCE();
                                // Decode this piece of every row, then stream the tokens'
                                // x through it (keeps ROWS*8 + 8 values live, not TOKENS*8).
                                float f[ROWS][8];
#pragma unroll
                                for (int r = 0; r < ROWS; ++r) {
                                    // Words first used by this piece become opaque here, so
                                    // decoding cannot be hoisted into earlier pieces.
#pragma unroll
                                    for (int k = 0; k < BITS; ++k)
                                        if ((32 * k / BITS) / 8 == p) KC_LAUNDER(wv[u][r][unit * BITS + k]);
                                    const u32* wu = &wv[u][r][unit * BITS];
#pragma unroll
                                    for (int e = 0; e < 8; ++e) f[r][e] = kc_decode(wu, p, e);
                                }
#pragma unroll
                                for (int t = 0; t < TOKENS; ++t) {
                                    float xf[8];
#if XSMEM
                                    const kc_f4* src = reinterpret_cast<const kc_f4*>(xc[t] + unit * 32 + p * 8);
                                    const kc_f4 lo = src[0], hi = src[1];
                                    xf[0] = lo.x; xf[1] = lo.y; xf[2] = lo.z; xf[3] = lo.w;
                                    xf[4] = hi.x; xf[5] = hi.y; xf[6] = hi.z; xf[7] = hi.w;
#else
                                    // Rows past the last token read a valid row; their
                                    // results are never stored.
                                    const kc_u4 v = kc_ld_ro16(xc[t] + unit * 32 + p * 8);
                                    const u32 vw[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
                                    for (int k = 0; k < 4; ++k) {
                                        xf[2 * k] = __uint_as_float(vw[k] << 16);
                                        xf[2 * k + 1] = __uint_as_float(vw[k] & 0xFFFF0000u);
                                    }
#endif
#pragma unroll
                                    for (int r = 0; r < ROWS; ++r)
#pragma unroll
                                        for (int e = 0; e < 8; ++e) a[r][t] = fmaf(f[r][e], xf[e], a[r][t]);
                                }
                            }
                        }
                    const int fu = c * NSUB + j;   // fold unit index along the row
#pragma unroll
                        for (int r = 0; r < ROWS; ++r) {
                            const float s = kc_bf16(sv[u][r][j]);
                            const float b = kc_bf16(bv[u][r][j]);
                            const float S = s * F_SCALE;
                            const float Bp = fmaf(-s, F_OFFSET, b);
#pragma unroll
                            for (int t = 0; t < TOKENS; ++t)
                                acc[r][t] = fmaf(S, a[r][t], fmaf(Bp, xsum[t * nsub + fu], acc[r][t]));
                        }
                    }
                }
            }
            cb += 32 * UNROLL;
            if (cb >= nch) break;
            load_step(cb);
        }

        // Warp reduction, then lane r*TOKENS+t stores (row0+r, t0+t).
#pragma unroll
        for (int r = 0; r < ROWS; ++r)
#pragma unroll
            for (int t = 0; t < TOKENS; ++t) {
                float v = acc[r][t];
#pragma unroll
                for (int o = 16; o > 0; o >>= 1) v += kc_shfl_xor(v, o);
                acc[r][t] = v;
            }
#pragma unroll
        for (int r = 0; r < ROWS; ++r)
#pragma unroll
            for (int t = 0; t < TOKENS; ++t) {
                if (lane == r * TOKENS + t) {
                    const int row = row0 + r;
                    const int tok = t0 + t;
                    if (row < out && tok < tokens) {
                        float v = acc[r][t];
                        if (bias != nullptr) v += kc_bf16(kc_ld_ro_u16(bias + row));
                        y[(long long)tok * out + row] = kc_to_bf16(v);
                    }
                }
            }
        // Next row set: start its loads before this warp's next iteration.
        const int next = rs + rs_step;
        if (next < nrowsets) {
            row0 = next * ROWS;
#pragma unroll
            for (int r = 0; r < ROWS; ++r) rowc[r] = min(row0 + r, out - 1);
            load_step(0);
        }
    }
}
