// qmm.cu: tensor-core matrix kernel for the affine family (MLX affine-quantised
// weights), any token count. The family's fallback: correct for tokens >= 1.
//
//   y[t][o] = sum_i x[t][i] * (scale[o][i/g] * q[o][i] + biases[o][i/g])  (+ bias[o])
//
// Compiled at run time by NVRTC for sm_90 (plain sm_90: mma.sync, ldmatrix,
// cp.async and, when KSPLIT > 1, thread-block clusters with distributed shared
// memory). No #include: bf16 travels as unsigned short.
// NVRTC options: -arch=sm_90 -std=c++17 (C++14 or later; NVRTC 11.x defaults to an
// older dialect) plus the -D macros below. Entry point is extern "C" (unmangled).
//
// ENTRY POINT
//   extern "C" __global__ void affine_qmm(
//       const unsigned short* x,       // bf16 [tokens][in_features]
//       const unsigned int*   weight,  // uint32 [out_features][in_features*BITS/32]
//       const unsigned short* scales,  // bf16 [out_features][in_features/GROUP]
//       const unsigned short* biases,  // bf16 [out_features][in_features/GROUP]
//       const unsigned short* bias,    // bf16 [out_features], or 0 (null) for none
//       unsigned short*       y,       // bf16 [tokens][out_features]
//       int tokens, int in_features, int out_features)
//   Buffers must be 16-byte aligned; out_features % 8 == 0; in_features % GROUP == 0.
//
// MACROS (-D)
//   BITS 2,3,4,5,6,8   GROUP 32,64,128
//   BM, BN, BK         block tile: tokens x out-features x in-features per k-tile
//   WARPS_M, WARPS_N, WARPS_K   warp grid; warp tile (BM/WARPS_M) x (BN/WARPS_N),
//                      each warp takes a BK/WARPS_K slice of every k-tile
//   STAGES             cp.async pipeline depth (>= 3)
//   KSPLIT             blocks per cluster splitting K (1, 2 or 4; >1 uses a
//                      __cluster_dims__(KSPLIT,1,1) cluster and DSMEM reduction)
//   WCP                bytes per cp.async of packed weights (16, 8 or 4):
//                      the largest of them dividing both in*BITS/8 and BK*BITS/8
//   Named configurations (scripts/affine_kernels.py: QMM_CONFIGS, qmm_config):
//     name  BM  BN  BK  WARPS_M x N x K  STAGES   used for tokens
//     s16   16  64  256   1 x 1 x 4        4*     1..16   (memory bound)
//     s32   32  64  256   1 x 2 x 4        3      17..32
//     s64   64  64  128   1 x 2 x 2        3      33..64
//     m128  64 128  128   1 x 4 x 2        3      65..192
//     l    128 128   64   2 x 4 x 1        4      > 192
//   * s16 uses STAGES=3 when 4 stages need more than 113 KiB (2 blocks per SM).
//   KSPLIT: start at 1; double (up to 4) while 2*KSPLIT*ceil(out/BN)*ceil(tokens/BM)
//           <= SMs*RES and ceil(in/BK) >= 4*KSPLIT, with RES (resident blocks per
//           SM the tile is sized for) = s16:2 s32:1 s64:2 m128:1 l:1.
//   WCP: 16, 8 or 4, the largest dividing gcd(in*BITS/8, BK*BITS/8).
//
// LAUNCH (host computes; scripts/affine_kernels.py: qmm_config, qmm_smem_bytes)
//   block = 32*WARPS_M*WARPS_N*WARPS_K threads
//   grid  = ( ceil(out/BN)*KSPLIT, ceil(tokens/BM), 1 )   (cluster (KSPLIT,1,1) is
//           compiled in; grid.x is a multiple of KSPLIT)
//   dynamic shared memory = max(PIPE, RED) bytes, where
//     XROWB = 2*(BK+8)                      x tile row stride (bytes)
//     WROW  = BK*BITS/8;  WSB = WROW%16 ? WROW : WROW + 16*((WROW/16+1)%2)
//     GT    = max(1, BK/GROUP);  SCW = GT/2 + 1
//     FOLDK = min(GROUP, BK/WARPS_K, 64);  NF = BK/FOLDK
//     STAGE = r16(BM*XROWB) + r16(BN*WSB + 16) + 2*r16(4*BN*SCW)      (r16: round up to 16)
//     PIPE  = STAGES*STAGE + 2*BM*XROWB + 2*8*NF*BN + 2*4*NF*BM
//     RED   = (WARPS_K > 1 || KSPLIT > 1) ? 4*WARPS_K*BM*BN : 0
//
// METHOD
//   cp.async streams x tiles [BM][BK] and raw packed weight rows [BN][BK*BITS/8]
//   (plus the 4-byte words holding the tile's scales and biases) through a
//   STAGES-deep ring. Per k-tile, before its use, the block (a) permutes x inside
//   each 32-column block so that an ldmatrix A fragment pairs columns (j, j+4)
//   of each thread's 8-column run, (b) computes x sums per fold unit with an
//   mma against ones, (c) turns scales/biases into fp32 (S, B') pairs. Each
//   warp then reads its threads' 8-value runs of packed weights from shared
//   memory and builds exact bf16 B fragments (128+q, or q-128 for 8 bits) with
//   one or two lop3/prmt per pair -- no shared-memory round trip for
//   dequantised weights -- and runs mma.sync m16n8k16 bf16 -> fp32 into a
//   per-fold-unit accumulator t, folded as
//       acc += S*t + B'*xsum,  S = s, B' = b - C*s   (C = 128 or -128)
//   which is exact algebra of s*(C+q) + (b - C*s) = s*q + b, all in fp32.
//   Warps splitting K (and cluster ranks when KSPLIT > 1) are reduced through
//   shared memory (DSMEM) at the end; output is rounded to bf16 (RNE).

typedef unsigned int u32;
typedef unsigned short u16;
typedef unsigned long long u64;

#if !defined(BITS) || !defined(GROUP) || !defined(BM) || !defined(BN) || !defined(BK) || !defined(WARPS_M) || !defined(WARPS_N) || !defined(WARPS_K) || !defined(STAGES) || !defined(KSPLIT) || !defined(WCP)
#error "affine_qmm needs -DBITS -DGROUP -DBM -DBN -DBK -DWARPS_M -DWARPS_N -DWARPS_K -DSTAGES -DKSPLIT -DWCP"
#endif
#if BITS != 2 && BITS != 3 && BITS != 4 && BITS != 5 && BITS != 6 && BITS != 8
#error "BITS must be 2,3,4,5,6 or 8"
#endif
#if GROUP != 32 && GROUP != 64 && GROUP != 128
#error "GROUP must be 32, 64 or 128"
#endif

#define NWARPS (WARPS_M * WARPS_N * WARPS_K)
#define NTHREADS (NWARPS * 32)
#define WM (BM / WARPS_M)
#define WN (BN / WARPS_N)
#define KS (BK / WARPS_K)
#define MT (WM / 16)
#define NT (WN / 8)
#define KC_MIN(a, b) ((a) < (b) ? (a) : (b))
#define KC_CDIV(a, b) (((a) + (b) - 1) / (b))
#define FOLDK KC_MIN(KC_MIN(GROUP, KS), 64)
#define NF (BK / FOLDK)          // fold units per k-tile
#define FPW (KS / FOLDK)         // fold units per warp slice
#define BPF (FOLDK / 32)         // 32-column blocks per fold unit
#define SPF (FOLDK / 16)         // k16 steps per fold unit
#define GT (BK >= GROUP ? BK / GROUP : 1)
#define SCW (GT / 2 + 1)         // 32-bit words of scales per row per k-tile
#define XROW (BK + 8)            // x tile row stride, elements
#define XROWB (2 * XROW)
#define WROW (BK * BITS / 8)     // packed bytes per row per k-tile
#if WROW % 16
#define WSB WROW
#else
#define WSB (WROW + 16 * ((WROW / 16 + 1) % 2))   // odd multiple of 16: no bank conflicts
#endif
#define R16(v) (((v) + 15) / 16 * 16)
#define X_BYTES R16(BM * XROWB)
#define W_BYTES R16(BN * WSB + 16)
#define SC_BYTES R16(4 * BN * SCW)
#define STAGE_BYTES (X_BYTES + W_BYTES + 2 * SC_BYTES)
#define XP_OFF (STAGES * STAGE_BYTES)
#define SB_OFF (XP_OFF + 2 * BM * XROWB)
#define XS_OFF (SB_OFF + 2 * 8 * NF * BN)
#define PIPE_BYTES (XS_OFF + 2 * 4 * NF * BM)

#if (BM % (16 * WARPS_M)) || (BN % (8 * WARPS_N)) || (KS % 32) || (KS % FOLDK) || (BK % 32)
#error "bad tile shape"
#endif
#if STAGES < 3
#error "STAGES must be >= 3"
#endif
#if NTHREADS % (BK / 8)
#error "NTHREADS must be a multiple of BK/8 (x tile chunks per row)"
#endif
#if (WROW % WCP) || (WCP != 4 && WCP != 8 && WCP != 16)
#error "WCP must be 4, 8 or 16 and divide BK*BITS/8"
#endif
#if KSPLIT != 1 && KSPLIT != 2 && KSPLIT != 4
#error "KSPLIT must be 1, 2 or 4"
#endif
#if ((BN / KSPLIT) % 2)
#error "BN/KSPLIT must be even"
#endif

#if BITS == 8
#define QC (-128.0f)   // B operand holds q - 128
#else
#define QC 128.0f      // B operand holds 128 + q
#endif

// ---------------------------------------------------------------------------
// Device primitives. For CPU emulation, qmm/kernels/emu/emu.h defines KCAND_EMU
// and supplies host versions of everything in this block.
#ifndef KCAND_EMU
#define KC_DEV __device__ __forceinline__
struct alignas(16) kc_u4 { u32 x, y, z, w; };
struct alignas(16) kc_f4 { float x, y, z, w; };
struct alignas(8) kc_f2 { float x, y; };
KC_DEV float kc_bf16(u32 h) { return __uint_as_float(h << 16); }
KC_DEV u32 kc_pack_bf16x2(float lo, float hi) {
    u32 r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
KC_DEV u32 kc_smem_addr(const void* p) { return (u32)__cvta_generic_to_shared(p); }
KC_DEV void kc_cp_async16(void* dst, const void* src, u32 src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
                 :: "r"(kc_smem_addr(dst)), "l"(src), "r"(src_bytes) : "memory");
}
KC_DEV void kc_cp_async8(void* dst, const void* src, u32 src_bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;"
                 :: "r"(kc_smem_addr(dst)), "l"(src), "r"(src_bytes) : "memory");
}
KC_DEV void kc_cp_async4(void* dst, const void* src, u32 src_bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;"
                 :: "r"(kc_smem_addr(dst)), "l"(src), "r"(src_bytes) : "memory");
}
KC_DEV void kc_cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> KC_DEV void kc_cp_wait() { asm volatile("cp.async.wait_group %0;" :: "n"(N) : "memory"); }
KC_DEV void kc_ldmatrix_x4(u32 (&r)[4], const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(kc_smem_addr(p)));
}
// d = a*b + c, m16n8k16, bf16 inputs, fp32 accumulators.
KC_DEV void kc_mma(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1, const float (&c)[4]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};"
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1),
                   "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
}
KC_DEV u32 kc_prmt(u32 a, u32 b, u32 sel) { return __byte_perm(a, b, sel); }
// (a & m) | C and (a & m) ^ C in one lop3 (m in a register, C immediate).
#define KC_AND_OR(a, m, C) kc_lop3_and_or<C>(a, m)
#define KC_AND_XOR(a, m, C) kc_lop3_and_xor<C>(a, m)
template <u32 C> KC_DEV u32 kc_lop3_and_or(u32 a, u32 m) {
    u32 d;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(a), "r"(m), "n"(C));
    return d;
}
KC_DEV u32 kc_lop3_and_or_r(u32 a, u32 m, u32 c) {
    u32 d;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(a), "r"(m), "r"(c));
    return d;
}
template <u32 C> KC_DEV u32 kc_lop3_and_xor(u32 a, u32 m) {
    u32 d;
    asm("lop3.b32 %0, %1, %2, %3, 0x6A;" : "=r"(d) : "r"(a), "r"(m), "n"(C));
    return d;
}
// (a & 0x007F007F) | 0x43004300 and ((a & 0x00800080) ^ 0xC380C380), summed in
// bf16x2: exactly q - 128 for the two bytes q in bits 0-7 and 16-23 of a.
KC_DEV u32 kc_q8_pair(u32 a) {
    const u32 m = KC_AND_OR(a, 0x007F007Fu, 0x43004300u);
    const u32 c = KC_AND_XOR(a, 0x00800080u, 0xC380C380u);
    u32 d;
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(m), "r"(0x3F803F80u), "r"(c));
    return d;
}
KC_DEV void kc_cluster_sync() {
#if KSPLIT > 1
    asm volatile("barrier.cluster.arrive.aligned;\n\tbarrier.cluster.wait.aligned;" ::: "memory");
#endif
}
// Load a float2 from the same shared-memory offset in cluster block `rank`.
KC_DEV void kc_ld_dsmem_f2(const float* p, u32 rank, float& a, float& b) {
    u32 addr;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(addr) : "r"(kc_smem_addr(p)), "r"(rank));
    asm volatile("ld.shared::cluster.v2.f32 {%0,%1}, [%2];" : "=f"(a), "=f"(b) : "r"(addr) : "memory");
}
KC_DEV u32 kc_cluster_rank() {
#if KSPLIT > 1
    u32 r;
    asm("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
#else
    return 0;
#endif
}
#define KC_DYNAMIC_SMEM(name) extern __shared__ __align__(16) unsigned char name[]
#define KC_SYNC() __syncthreads()
#define KC_LAUNDER(v) asm volatile("" : "+r"(v))
#endif

// ---------------------------------------------------------------------------
// The four bf16x2 pairs (q_i, q_{i+4}), i = 0..3, of one thread's 8-value run,
// as exact bf16 (128+q; q-128 for 8 bits). `row` points at the packed row of
// the k-tile in shared memory; the run starts at byte BITS*run8 (run8 = index
// of the 8-value run inside the row).
KC_DEV void kc_dequant_run(const unsigned char* row, int run8, u32 (&p)[4]) {
#if BITS == 4
    const u32 v = *reinterpret_cast<const u32*>(row + 4 * run8);
#pragma unroll
    for (int i = 0; i < 4; ++i) p[i] = KC_AND_OR(v >> (4 * i), 0x000F000Fu, 0x43004300u);
#elif BITS == 2
    const u32 h = *reinterpret_cast<const u16*>(row + 2 * run8);
    const u32 u = kc_prmt(h, 0u, 0x4140u);   // byte0 -> byte0, byte1 -> byte2
#pragma unroll
    for (int i = 0; i < 4; ++i) p[i] = KC_AND_OR(u >> (2 * i), 0x00030003u, 0x43004300u);
#elif BITS == 8
    const u32 w0 = *reinterpret_cast<const u32*>(row + 8 * run8);
    const u32 w1 = *reinterpret_cast<const u32*>(row + 8 * run8 + 4);
    p[0] = kc_q8_pair(kc_prmt(w0, w1, 0x0400u));
    p[1] = kc_q8_pair(kc_prmt(w0, w1, 0x0501u));
    p[2] = kc_q8_pair(kc_prmt(w0, w1, 0x0602u));
    p[3] = kc_q8_pair(kc_prmt(w0, w1, 0x0703u));
#else
    const int off = BITS * run8;
    const u32* wp = reinterpret_cast<const u32*>(row + (off & ~3));
    const u32 lo = wp[0], hi = wp[1];
    const u32 sh = 8u * (u32)(off & 3);
    const u64 v = ((u64)hi << 32 | lo) >> sh;   // the run's 8*BITS bits at bit 0
    const u32 M = (1u << BITS) - 1u;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int s2 = BITS * (i + 4) - 16;
        const u32 lo = KC_AND_OR((u32)(v >> (BITS * i)), M, 0x43004300u);
        const u32 hi = s2 >= 0 ? (u32)(v >> s2) : ((u32)v << -s2);
        p[i] = kc_lop3_and_or_r(hi, M << 16, lo);
    }
#endif
}

extern "C" __global__ void __launch_bounds__(NTHREADS, 1)
#if KSPLIT > 1
__cluster_dims__(KSPLIT, 1, 1)
#endif
affine_qmm(const u16* __restrict__ x, const u32* __restrict__ weight,
           const u16* __restrict__ scales, const u16* __restrict__ biases,
           const u16* __restrict__ bias, u16* __restrict__ y,
           int tokens, int in_features, int out_features)
{
    KC_DYNAMIC_SMEM(smem);
    const int in = in_features;
    const int out = out_features;
    const int groups = in / GROUP;
    const long long row_bytes = (long long)in * BITS / 8;
    const u32 scale_words = (u32)out * (u32)groups / 2u;   // out*groups is even; scale tensors < 8 GiB
    const int nkt = (in + BK - 1) / BK;
    const int kr = (int)kc_cluster_rank();
    const int n0 = (blockIdx.x / KSPLIT) * BN;
    const int m0 = blockIdx.y * BM;
    const int per = (nkt + KSPLIT - 1) / KSPLIT;
    const int kt_begin = kr * per;
    const int ntiles = max(0, min(nkt, kt_begin + per) - kt_begin);

    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int wn = warp % WARPS_N;
    const int wm = (warp / WARPS_N) % WARPS_M;
    const int wk = warp / (WARPS_N * WARPS_M);
    const int g = lane >> 2;    // mma group id
    const int c = lane & 3;     // thread in group

    auto xs_of = [&](int slot) { return smem + slot * STAGE_BYTES; };
    auto ws_of = [&](int slot) { return smem + slot * STAGE_BYTES + X_BYTES; };
    auto sc_of = [&](int slot) { return reinterpret_cast<u32*>(smem + slot * STAGE_BYTES + X_BYTES + W_BYTES); };
    auto bi_of = [&](int slot) { return reinterpret_cast<u32*>(smem + slot * STAGE_BYTES + X_BYTES + W_BYTES + SC_BYTES); };
    auto xp_of = [&](int buf) { return smem + XP_OFF + buf * BM * XROWB; };
    auto sb_of = [&](int buf) { return reinterpret_cast<float*>(smem + SB_OFF + buf * 8 * NF * BN); };
    auto xsum_of = [&](int buf) { return reinterpret_cast<float*>(smem + XS_OFF + buf * 4 * NF * BM); };

    // ---- producer: one k-tile into a ring slot --------------------------------
    // Per-thread row/column assignments are fixed for the whole kernel, so the
    // address arithmetic is hoisted out of the k loop; a tile only adds k0.
    const unsigned char* wbytes = reinterpret_cast<const unsigned char*>(weight);
    // x: XCPR 16-byte chunks per row, thread -> (row xr0 + it*XRS, chunk xch)
    constexpr int XCPR = BK / 8;
    constexpr int XRS = NTHREADS / XCPR;
    constexpr int X_IT = KC_CDIV(BM, XRS);
    const int xr0 = tid / XCPR, xch = tid % XCPR;
    u32 xrows = 0;   // bit it: row valid
#pragma unroll
    for (int it = 0; it < X_IT; ++it)
        if (xr0 + it * XRS < BM && m0 + xr0 + it * XRS < tokens) xrows |= 1u << it;
    const u16* xg = x + ((long long)min(m0 + xr0, tokens - 1) * in + xch * 8);
    const long long xstep = (long long)XRS * in;
    const int xdst = xr0 * XROWB + xch * 16;
    // packed weights: WCPR chunks of WCP bytes per row
    constexpr int WCPR = WROW / WCP;
    constexpr bool W_FAST = (NTHREADS % WCPR) == 0;
    constexpr int WRS = W_FAST ? NTHREADS / WCPR : 1;
    constexpr int W_IT = W_FAST ? KC_CDIV(BN, WRS) : KC_CDIV(BN * WCPR, NTHREADS);
    const int wr0 = tid / WCPR, wch = tid % WCPR;
    u32 wrows = 0;
#pragma unroll
    for (int it = 0; it < W_IT; ++it) {
        if (W_FAST) {
            if (wr0 + it * WRS < BN && n0 + wr0 + it * WRS < out) wrows |= 1u << it;
        } else {
            const int idx = tid + it * NTHREADS;
            if (idx < BN * WCPR && n0 + idx / WCPR < out) wrows |= 1u << it;
        }
    }
    const unsigned char* wg = wbytes + ((long long)min(n0 + wr0, out - 1) * row_bytes + wch * WCP);
    const long long wstep = (long long)WRS * row_bytes;
    const int wdst = wr0 * WSB + wch * WCP;

    auto issue = [&](int slot, int kt) {
        const int k0 = kt * BK;
        unsigned char* xs = xs_of(slot);
        const bool xk = k0 + xch * 8 < in;
#pragma unroll
        for (int it = 0; it < X_IT; ++it) {
            if (X_IT * XRS == BM || xr0 + it * XRS < BM) {
                const bool ok = xk && ((xrows >> it) & 1u);
                const u16* src = ok ? xg + (it * xstep + k0) : x;
                kc_cp_async16(xs + xdst + it * XRS * XROWB, src, ok ? 16u : 0u);
            }
        }
        unsigned char* ws = ws_of(slot);
        const int kb0 = k0 * BITS / 8;             // byte offset of the tile in a row
#pragma unroll
        for (int it = 0; it < W_IT; ++it) {
            const unsigned char* src;
            unsigned char* dst;
            bool ok, in_tile;
            if (W_FAST) {
                in_tile = W_IT * WRS == BN || wr0 + it * WRS < BN;
                ok = ((wrows >> it) & 1u) && kb0 + wch * WCP < row_bytes;
                src = wg + (it * wstep + kb0);
                dst = ws + wdst + it * WRS * WSB;
            } else {
                int idx = tid + it * NTHREADS;
                KC_LAUNDER(idx);   // recompute per tile rather than hoist W_IT addresses (registers)
                const int r = idx / WCPR, ch = idx % WCPR;
                in_tile = idx < BN * WCPR;
                ok = ((wrows >> it) & 1u) && kb0 + ch * WCP < row_bytes;
                src = wbytes + ((long long)(n0 + r) * row_bytes + kb0 + ch * WCP);
                dst = ws + r * WSB + ch * WCP;
            }
            if (in_tile) {
                if (!ok) src = wbytes;
#if WCP == 16
                kc_cp_async16(dst, src, ok ? 16u : 0u);
#elif WCP == 8
                kc_cp_async8(dst, src, ok ? 8u : 0u);
#else
                kc_cp_async4(dst, src, ok ? 4u : 0u);
#endif
            }
        }
        const u32 gk0 = (u32)(k0 / GROUP);
        u32* sc = sc_of(slot);
        u32* bi = bi_of(slot);
#pragma unroll
        for (int it = 0; it < KC_CDIV(BN * SCW, NTHREADS); ++it) {
            const int idx = tid + it * NTHREADS;
            if ((BN * SCW) % NTHREADS == 0 || idx < BN * SCW) {
                const int r = idx / SCW, j = idx % SCW;
                const int n = n0 + r;
                const u32 wd = (((u32)n * (u32)groups + gk0) >> 1) + (u32)j;   // 32-bit word index
                const bool ok = n < out && wd < scale_words;
                const u32 o = ok ? wd : 0u;
                kc_cp_async4(sc + idx, reinterpret_cast<const u32*>(scales) + o, ok ? 4u : 0u);
                kc_cp_async4(bi + idx, reinterpret_cast<const u32*>(biases) + o, ok ? 4u : 0u);
            }
        }
    };

    // ---- per-tile preparation (block-wide, reads a landed slot) ---------------
    auto prepare = [&](int slot, int kt, int buf) {
        const unsigned char* xs = xs_of(slot);
        unsigned char* xp = xp_of(buf);
        // (a) permute each 32-column block of x:
        //     out word 8s+4h+c' = (in[4c'+s].half h, in[4c'+s+2].half h)
#pragma unroll
        for (int it = 0; it < KC_CDIV(BM * (BK / 32), NTHREADS); ++it) {
            const int idx = tid + it * NTHREADS;
            if ((BM * (BK / 32)) % NTHREADS == 0 || idx < BM * (BK / 32)) {
                const int m = idx % BM, b = idx / BM;
                const int off = m * XROWB + b * 64;
                const kc_u4* src = reinterpret_cast<const kc_u4*>(xs + off);
                kc_u4* dst = reinterpret_cast<kc_u4*>(xp + off);
                u32 w[16], o[16];
#pragma unroll
                for (int q = 0; q < 4; ++q) {
                    const kc_u4 v = src[q];
                    w[4 * q] = v.x; w[4 * q + 1] = v.y; w[4 * q + 2] = v.z; w[4 * q + 3] = v.w;
                }
#pragma unroll
                for (int s = 0; s < 2; ++s)
#pragma unroll
                    for (int h = 0; h < 2; ++h)
#pragma unroll
                        for (int cc = 0; cc < 4; ++cc)
                            o[8 * s + 4 * h + cc] = kc_prmt(w[4 * cc + s], w[4 * cc + s + 2], h ? 0x7632u : 0x5410u);
#pragma unroll
                for (int q = 0; q < 4; ++q) dst[q] = kc_u4{o[4 * q], o[4 * q + 1], o[4 * q + 2], o[4 * q + 3]};
            }
        }
        // (b) x sums per (fold unit, row) by mma against ones (order-free: the raw tile serves)
        float* xsum = xsum_of(buf);
#pragma unroll
        for (int it = 0; it < KC_CDIV((BM / 16) * NF, NWARPS); ++it) {
            const int task = warp + it * NWARPS;
            if (((BM / 16) * NF) % NWARPS == 0 || task < (BM / 16) * NF) {
                const int mt = task % (BM / 16), f = task / (BM / 16);
                float d[4] = {0.f, 0.f, 0.f, 0.f};
                const unsigned char* base = xs + (mt * 16 + ((lane >> 3) & 1) * 8 + (lane & 7)) * XROWB
                                          + (f * FOLDK + (lane >> 4) * 8) * 2;
#pragma unroll
                for (int st = 0; st < SPF; ++st) {
                    u32 a[4];
                    kc_ldmatrix_x4(a, base + st * 32);
                    kc_mma(d, a, 0x3F803F80u, 0x3F803F80u, d);
                }
                if (c == 0) {
                    xsum[f * BM + mt * 16 + g] = d[0];
                    xsum[f * BM + mt * 16 + g + 8] = d[2];
                }
            }
        }
        // (c) (S, B') per (fold unit, row). The slot holds, per row, the 32-bit
        //     words from the one containing element e0 = n*groups + k0/GROUP.
        const int k0 = kt * BK;
        const int gk0 = k0 / GROUP;
        const u16* sc = reinterpret_cast<const u16*>(sc_of(slot));
        const u16* bi = reinterpret_cast<const u16*>(bi_of(slot));
        float* sb = sb_of(buf);
#pragma unroll
        for (int it = 0; it < KC_CDIV(BN * NF, NTHREADS); ++it) {
            const int idx = tid + it * NTHREADS;
            if ((BN * NF) % NTHREADS == 0 || idx < BN * NF) {
                const int r = idx % BN, f = idx / BN;
                const int n = n0 + r;
                const int loc = (GROUP <= BK) ? (f * FOLDK) / GROUP : 0;   // group offset inside the tile
                const int h = (int)(((long long)n * groups + gk0) & 1);
                const float s = kc_bf16(sc[r * 2 * SCW + h + loc]);
                const float b = kc_bf16(bi[r * 2 * SCW + h + loc]);
                const bool ok = n < out && gk0 + loc < groups;
                kc_f2 v;
                v.x = ok ? s : 0.f;
                v.y = ok ? fmaf(-QC, s, b) : 0.f;
                reinterpret_cast<kc_f2*>(sb)[f * BN + r] = v;
            }
        }
    };

    float acc[MT][NT][4];
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;

    // ---- consumer: one k-tile for this warp ------------------------------------
    auto compute = [&](int slot, int buf) {
        const unsigned char* ws = ws_of(slot);
        const unsigned char* xp = xp_of(buf);
        const float* sb = sb_of(buf);
        const float* xsum = xsum_of(buf);
#pragma unroll 1
        for (int u = 0; u < FPW; ++u) {
            const int f = wk * FPW + u;            // fold unit in the tile
            const int kf = wk * KS + u * FOLDK;    // its first column in the tile
            u32 bq[NT][BPF][4];
#pragma unroll
            for (int j = 0; j < NT; ++j) {
                const unsigned char* row = ws + (wn * WN + 8 * j + g) * WSB;
#pragma unroll
                for (int t = 0; t < BPF; ++t) kc_dequant_run(row, (kf + 32 * t) / 8 + c, bq[j][t]);
            }
            float sbv[NT][4];
#pragma unroll
            for (int j = 0; j < NT; ++j) {
                const kc_f4 p = *reinterpret_cast<const kc_f4*>(sb + 2 * (f * BN + wn * WN + 8 * j + 2 * c));
                sbv[j][0] = p.x; sbv[j][1] = p.y; sbv[j][2] = p.z; sbv[j][3] = p.w;
            }
#pragma unroll
            for (int i = 0; i < MT; ++i) {
                u32 a[SPF][4];
                const int r = wm * WM + i * 16 + ((lane >> 3) & 1) * 8 + (lane & 7);
#pragma unroll
                for (int st = 0; st < SPF; ++st)
                    kc_ldmatrix_x4(a[st], xp + r * XROWB + (kf + st * 16 + (lane >> 4) * 8) * 2);
                const float xs0 = xsum[f * BM + wm * WM + i * 16 + g];
                const float xs1 = xsum[f * BM + wm * WM + i * 16 + g + 8];
#pragma unroll
                for (int j = 0; j < NT; ++j) {
                    float t4[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
                    for (int st = 0; st < SPF; ++st)
                        kc_mma(t4, a[st], bq[j][st >> 1][2 * (st & 1)], bq[j][st >> 1][2 * (st & 1) + 1], t4);
                    acc[i][j][0] = fmaf(sbv[j][0], t4[0], fmaf(sbv[j][1], xs0, acc[i][j][0]));
                    acc[i][j][1] = fmaf(sbv[j][2], t4[1], fmaf(sbv[j][3], xs0, acc[i][j][1]));
                    acc[i][j][2] = fmaf(sbv[j][0], t4[2], fmaf(sbv[j][1], xs1, acc[i][j][2]));
                    acc[i][j][3] = fmaf(sbv[j][2], t4[3], fmaf(sbv[j][3], xs1, acc[i][j][3]));
                }
            }
        }
    };

    // ---- pipeline ----------------------------------------------------------------
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < ntiles) issue(s, kt_begin + s);
        kc_cp_commit();
    }
    kc_cp_wait<STAGES - 2>();
    KC_SYNC();
    if (ntiles > 0) prepare(0, kt_begin, 0);
    // Ring slots as counters (no modulo): tile it lives in slot_use, it+1 in
    // slot_next, it+STAGES-1 goes to slot_issue (the slot tile it-1 used).
    int slot_use = 0, slot_next = 1 % STAGES, slot_issue = STAGES - 1;
    for (int it = 0; it < ntiles; ++it) {
        kc_cp_wait<STAGES - 3>();
        KC_SYNC();
        if (it + STAGES - 1 < ntiles) issue(slot_issue, kt_begin + it + STAGES - 1);
        kc_cp_commit();
        if (it + 1 < ntiles) prepare(slot_next, kt_begin + it + 1, (it + 1) & 1);
        compute(slot_use, it & 1);
        slot_issue = slot_use;
        slot_use = slot_next;
        slot_next = slot_next + 1 == STAGES ? 0 : slot_next + 1;
    }
    kc_cp_wait<0>();
    KC_SYNC();

    // ---- epilogue ----------------------------------------------------------------
#if WARPS_K == 1 && KSPLIT == 1
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j) {
            const int n = n0 + wn * WN + 8 * j + 2 * c;
            if (n >= out) continue;
            float b0 = 0.f, b1 = 0.f;
            if (bias != nullptr) {
                const u32 bb = *reinterpret_cast<const u32*>(bias + n);
                b0 = kc_bf16(bb & 0xFFFFu);
                b1 = kc_bf16(bb >> 16);
            }
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int m = m0 + wm * WM + i * 16 + g + 8 * h;
                if (m < tokens)
                    *reinterpret_cast<u32*>(y + (long long)m * out + n) =
                        kc_pack_bf16x2(acc[i][j][2 * h] + b0, acc[i][j][2 * h + 1] + b1);
            }
        }
#else
    {
        float* red = reinterpret_cast<float*>(smem);   // [WARPS_K][BM][BN]
#pragma unroll
        for (int i = 0; i < MT; ++i)
#pragma unroll
            for (int j = 0; j < NT; ++j)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int r = wm * WM + i * 16 + g + 8 * h;
                    const int col = wn * WN + 8 * j + 2 * c;
                    float* p = red + ((long long)wk * BM + r) * BN + col;
                    p[0] = acc[i][j][2 * h];
                    p[1] = acc[i][j][2 * h + 1];
                }
#if KSPLIT > 1
        kc_cluster_sync();
#else
        KC_SYNC();
#endif
        const int cw = BN / KSPLIT;        // columns this cluster rank finishes
        for (int idx = tid; idx < BM * (cw / 2); idx += NTHREADS) {
            const int r = idx / (cw / 2);
            const int col = kr * cw + 2 * (idx % (cw / 2));
            const int m = m0 + r, n = n0 + col;
            float v0 = 0.f, v1 = 0.f;
#pragma unroll
            for (int q = 0; q < KSPLIT; ++q)
#pragma unroll
                for (int k = 0; k < WARPS_K; ++k) {
                    const float* p = red + ((long long)k * BM + r) * BN + col;
                    float a, b;
#if KSPLIT > 1
                    kc_ld_dsmem_f2(p, (u32)q, a, b);
#else
                    a = p[0];
                    b = p[1];
#endif
                    v0 += a;
                    v1 += b;
                }
            if (m < tokens && n < out) {
                if (bias != nullptr) {
                    const u32 bb = *reinterpret_cast<const u32*>(bias + n);
                    v0 += kc_bf16(bb & 0xFFFFu);
                    v1 += kc_bf16(bb >> 16);
                }
                *reinterpret_cast<u32*>(y + (long long)m * out + n) = kc_pack_bf16x2(v0, v1);
            }
        }
#if KSPLIT > 1
        kc_cluster_sync();   // keep this block's shared memory alive for remote readers
#endif
    }
#endif
}
