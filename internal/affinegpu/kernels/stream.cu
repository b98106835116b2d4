// stream.cu: weight-streaming tensor-core kernel for the affine family
// (MLX affine-quantised weights) at few tokens: decode (1..8) and small
// batches (up to 32). Memory bound by design: every weight byte is read once
// in whole cache lines, and the multiply-adds run on the tensor cores so that
// the instruction stream stays short.
//
//   y[t][o] = sum_i x[t][i] * (scale[o][i/g] * q[o][i] + biases[o][i/g])  (+ bias[o])
//
// Compiled at run time by NVRTC for the device (sm_80 or newer: mma.sync bf16,
// cp.async; the plugins target sm_90 on the H200; no #include: bf16
// travels as unsigned short). NVRTC options: -arch=sm_90 -std=c++17 plus the
// -D macros below. Entry point is extern "C" (unmangled).
//
// ENTRY POINT
//   extern "C" __global__ void affine_stream(
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
//   BITS   2, 3, 4, 5, 6 or 8   GROUP  32, 64 or 128
//   MT     16-row m-tiles per warp (1 or 2; 4 only with NT = 1): a block
//          covers ROWS = 16*MT output rows
//   NT     8-token n-tiles per block (1, 2 or 4): blockIdx.y walks 8*NT-token tiles
//   KW     warps per block (1..8); each takes every KW-th step of the rows
//   U      groups per step (2..16, a power of two): SEG = U*GROUP*BITS/8
//          packed bytes per row and step: 128, 256 or 512 at 4 and 8 bits,
//          whole 16-byte pieces (at most 32) at the other widths (96 at 6
//          bits group 64, say); in/GROUP % U == 0, or TAIL
//   TAIL   0 (default), or in/GROUP % U: the row's last step holds TAIL
//          groups (gpt-oss's 2880 inputs are 45 groups of 64). Rows must
//          then be whole 16-byte pieces, and so must TAIL groups of a row;
//          a row's scales start at any entry, so each row's scales and
//          biases of a step are copied as a window of 4-byte pieces from
//          the one holding its first entry (U/2 + 1 pieces, SSTRIDE below),
//          and a lane realigns its rows' words by their offset in it
//   D      ring slots per warp (2..4): D-1 steps are in flight while one is used
//   MINB   blocks per SM the register allocation must allow (default 1)
//   SPK    1 (default): read a step's scales and biases once per row as
//          vectors and keep them in registers; 0: read each where it is used
//   XT     0 (default): x comes from global memory (L1), one group ahead;
//          1..8*NT: the step's x for XT token rows travels in the ring slot
//          with the weights (cp.async), so its latency hides behind the
//          ring like theirs; the host passes XT = min(8*NT, tokens)
//   XE     0 (default), or 1 with XT: the first D-1 steps' weights are
//          copied before the grid wait, their x after it (early start
//          with x in the ring); 0 waits before the first copy
//
// LAUNCH (host computes; Go: internal/affinegpu/stream.go, Python:
// scripts/affine_kernels.py stream_config / stream_smem_bytes)
//   block = 32*KW threads, grid = (ceil(out/ROWS), ceil(tokens/(8*NT)), 1)
//   dynamic shared memory = max(KW*D*SLOT, KW > 1 ? 4*KW*ROWS*8*NT : 0) with
//     WPT = GROUP*BITS/128, WSTRIDE = SEG + (WPT == 8 ? 16 : 16*WPT) at 4
//     and 8 bits, SEG + 16 at the other widths,
//     SSTRIDE = max(16, 2*U) (with TAIL, 2*U + 4 rounded up to 16),
//     XSTRIDE = 2*U*GROUP + 16,
//     SLOT = ROWS*WSTRIDE + 2*ROWS*SSTRIDE + XT*XSTRIDE
//
// METHOD
//   Each warp streams its steps through a private ring of D shared-memory
//   slots with cp.async (16-byte pieces; at 4 and 8 bits a warp
//   instruction covers whole 128-byte lines of a row), so no block-wide
//   barrier is needed until the end. At 4 and 8 bits row strides are
//   padded so that fragment reads hit distinct banks (not at the other
//   widths, where some lanes share a bank: 3 bits in groups of 64, rows
//   g=7, tig=0 and g=0, tig=3).
//   mma.sync m16n8k16 takes the weights as the A operand (rows = output
//   features) and x as B (columns = tokens). The four lanes of a quad
//   (tig = lane%4) share A rows g and g+8 (g = lane/4) and split each k16 step
//   between them, so within one group each lane owns a contiguous run of
//   GROUP/4 values of both rows. A dot product does not care about the order
//   of k, so a lane feeds its run to the mma in whatever order unpacking is
//   cheapest and permutes x the same way:
//     4 bits: word w (nibbles v0..v7) gives the bf16 pairs (v_j, v_j+4) for
//             j = 0..3 as lop3(w >> 4j, 0x000F000F, 0x43004300) = 128 + v,
//             exact; x pairs (x_j, x_j+4) are one prmt each.
//     8 bits: q = l + 16h is read as two nibble streams; the h stream meets
//             16*x (exact: a power of two), so the same lop3 unpacking serves.
//   Other widths (2, 3, 5, 6 bits; KC_GENERAL): a lane's run is
//   VPT*BITS bits, which need not start on a word (3 bits in groups of 64:
//   48 bits a lane), so the lane reads the words around it and shifts them
//   once (funnel shifts) so that value i sits at bits [BITS*i, BITS*(i+1))
//   of r[]. It pairs value i with i + PD (PD = 4 at 6 bits, 8 at 2, 3 and
//   5 bits; 4 where a run has only 8 values, in groups of 32). At 2 bits
//   in groups of 64 and 128 the pair is 16 bits apart: one shift and a lop3
//   as at 4 bits. Elsewhere both values' bits mostly start at the same
//   offset within their bytes: one prmt gathers their bytes into the
//   halves of a word, one shift lines them up at bits 0 and 16, and lop3
//   masks them over 0x4300, giving the bf16 pair (128 + v_i, 128 + v_j).
//   Where they do not (3 and 5 bits in groups of 32), or where a 5-bit
//   pair's bytes span three words (3 of 8 pairs in groups of 64), each
//   value takes a funnel shift of its own before the prmt. x pairs
//   (x_i, x_j) are one prmt each, and the fold is 4 bits'. The run's words,
//   the pairs and the shifts are constants after unrolling but for the
//   run's first shift. Thirty-first session, H200, group 64, x bf16 torch
//   anchor (bench/NOTES.md): 1.5-2.9x at one and four tokens at the
//   DESIGN.md shapes, 0.95-1.6x at 16.
//   x comes from global memory (L1), one group ahead of its use, or
//   (XT > 0) from the ring slot, where it arrived with the step's weights. The mma's
//   fp32 accumulator t for one group is folded as
//       acc += s*t + (b - C*s)*xsum,   C = 128 (8 bits: 128*17),
//   exact algebra of s*q + b. xsum (per token and group) comes from one more
//   mma of the same x fragments against a matrix of ones, landing in the
//   accumulator layout the fold needs. The KW warps of a block add their
//   partial sums through shared memory once at the end, then round to bf16
//   (RNE).

typedef unsigned int u32;
typedef unsigned short u16;

#if !defined(BITS) || !defined(GROUP) || !defined(MT) || !defined(NT) || !defined(KW) || !defined(U)
#error "affine_stream needs -DBITS -DGROUP -DMT -DNT -DKW -DU"
#endif
#ifndef D
#define D 2
#endif
#ifndef SPK
#define SPK 1
#endif
#ifndef MINB
#define MINB 1
#endif
#ifndef XT
#define XT 0
#endif
#ifndef XE
#define XE 0
#endif

#if BITS != 2 && BITS != 3 && BITS != 4 && BITS != 5 && BITS != 6 && BITS != 8
#error "BITS must be 2, 3, 4, 5, 6 or 8"
#endif
// 4 and 8 bits unpack whole words (kc_nib); 2, 3, 5 and 6 bits take the
// general path (kc_pair): see "Other widths" in METHOD.
#define KC_GENERAL (BITS != 4 && BITS != 8)
#if GROUP != 32 && GROUP != 64 && GROUP != 128
#error "GROUP must be 32, 64 or 128"
#endif
#if XT < 0 || XT > 8 * NT
#error "XT must be 0..8*NT"
#endif
#if XE && XT == 0
#error "XE sends the first steps' x through the ring after their weights: it needs XT"
#endif
#if (MT != 1 && MT != 2 && MT != 4) || (NT != 1 && NT != 2 && NT != 4) || KW < 1 || KW > 8 || (MT == 4 && NT != 1)
#error "need MT in {1,2,4}, NT in {1,2,4} (NT = 1 when MT = 4) and 1 <= KW <= 8"
#endif
#if U != 2 && U != 4 && U != 8 && U != 16
#error "U must be 2, 4, 8 or 16 (cp.async moves at least 4 bytes of scales)"
#endif
#if D < 2 || D > 4
#error "D must be 2, 3 or 4"
#endif
#ifndef TAIL
#define TAIL 0   // groups of the row's last step where U does not divide the row's groups (0: it does)
#endif
#if TAIL < 0 || TAIL >= U
#error "TAIL must be 0..U-1"
#endif

#define VPT (GROUP / 4)              // values per lane, row and group
#define WPT (VPT * BITS / 32)        // packed words per lane, row and group (4 and 8 bits)
#define RBYTES (VPT * BITS / 8)      // packed bytes of a lane's run (row, group)
#define RW ((RBYTES + 3) / 4)        // words of a run once it starts on bit 0
#define RALIGNED (RBYTES % 4 == 0)   // every run starts on a word (else on a byte)
#define LW (RALIGNED ? RW : RW + 1)  // words read from shared memory to cover a run
#define XLD (GROUP / 32)             // 16-byte x loads per lane, token and group
#if BITS != 8
#define OFFSET 128.0f                // A holds 128 + q
#else
#define OFFSET 2176.0f               // 128 + l and 16*(128 + h): 128*17
#endif

#define KC_DEV __device__ __forceinline__
struct alignas(16) kc_u4 { u32 x, y, z, w; };

KC_DEV float kc_bf16(u32 h) { return __uint_as_float(h << 16); }
KC_DEV u16 kc_to_bf16(float f) {
    u16 r;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(f));
    return r;
}
// x is small and shared by every warp: keep it in L1. A coherent load, not
// ld.global.nc: under early start the kernel ahead may still be writing x
// while this one runs, and ptxas may move a non-coherent load (whose data
// it may assume constant for the kernel's life) above griddepcontrol.wait.
KC_DEV kc_u4 kc_ldx(const u16* p) {
    kc_u4 r;
    asm("ld.global.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
    return r;
}
KC_DEV u32 kc_ldh(const u16* p) {
    u16 r;
    asm("ld.global.nc.u16 %0, [%1];" : "=h"(r) : "l"(p));
    return r;
}
KC_DEV u32 kc_prmt(u32 a, u32 b, u32 sel) {
    u32 d;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
    return d;
}
// bf16 pair (128 + (w >> 4j) & 15, 128 + (w >> (4j+16)) & 15).
KC_DEV u32 kc_nib(u32 w, int j) {
    u32 d;
    const u32 v = w >> (4 * j);
    asm("lop3.b32 %0, %1, 0x000F000F, 0x43004300, 0xEA;" : "=r"(d) : "r"(v));   // (a & b) | c
    return d;
}
// pair * (16, 16), exact (a power of two). fma with -0 rather than mul:
// mul.bf16x2 needs sm_90, fma.bf16x2 runs from sm_80 like the rest.
KC_DEV u32 kc_times16(u32 pair) {
    u32 d;
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(pair), "r"(0x41804180u), "r"(0x80008000u));
    return d;
}
// (a & b) | c in one lop3.
KC_DEV u32 kc_and_or(u32 a, u32 b, u32 c) {
    u32 d;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}
#if KC_GENERAL
// Other widths ("Other widths" in METHOD). A lane's run of VPT values of
// a row and group sits in r[0..RW) from bit 0 on, value i at bits
// [BITS*i, BITS*(i+1)). Pair p of the run is values (kc_pi(p), kc_pj(p)),
// kc_pd() apart: mostly equal bit offsets within their bytes (2 bits in
// groups of 64 and 128: 16 bits apart), so that one byte permute (or one
// shift) lines both up.
KC_DEV constexpr int kc_pd() { return VPT < 16 ? 4 : (BITS == 6 ? 4 : 8); }
KC_DEV constexpr int kc_pi(int p) { return p / kc_pd() * 2 * kc_pd() + p % kc_pd(); }
KC_DEV constexpr int kc_pj(int p) { return kc_pi(p) + kc_pd(); }
KC_DEV u32 kc_rword(const u32 (&r)[RW], int k) { return k < RW ? r[k] : 0u; }
// The run's bits from bit b on, in the low bits of a word.
KC_DEV u32 kc_bits_from(const u32 (&r)[RW], int b) {
    const int w = b >> 5, sh = b & 31;
    return sh == 0 ? r[w] : __funnelshift_r(r[w], kc_rword(r, w + 1), sh);
}
// bf16 pair (128 + v_i, 128 + v_j), exact (v < 128): everything folds to
// constants once the loops over pairs are unrolled.
KC_DEV u32 kc_pair(const u32 (&r)[RW], int i, int j) {
    const int pi = BITS * i, pj = BITS * j, d = pi & 7;
    const int w = pi >> 5;
    const int lo = (pi >> 3) - 4 * w, hi = (pj >> 3) - 4 * w;   // bytes of the pair in r[w], r[w+1]
    const int nb = (d + BITS + 7) >> 3;                        // bytes a value spans
    u32 v;
    if (pj - pi == 16 && ((pj + BITS - 1) >> 5) == w) {
        v = r[w] >> (pi & 31);                                  // v_i at bit 0, v_j at bit 16
    } else if ((pj & 7) == d && hi + nb - 1 <= 7) {
        const u32 sel = lo | (nb > 1 ? lo + 1 : lo) << 4 | hi << 8 | (nb > 1 ? hi + 1 : hi) << 12;
        v = kc_prmt(r[w], kc_rword(r, w + 1), sel) >> d;        // both at bit d of their halves
    } else {
        v = kc_prmt(kc_bits_from(r, pi), kc_bits_from(r, pj), 0x5410);
    }
    return kc_and_or(v, ((1u << BITS) - 1u) * 0x10001u, 0x43004300u);
}
// The x pair (x_i, x_j) of the lane's run of x (two bf16 a word).
KC_DEV u32 kc_xpair(const u32* xw, int i, int j) {
    return kc_prmt(xw[i >> 1], xw[j >> 1], ((i & 1) ? 0x32u : 0x10u) | ((j & 1) ? 0x7600u : 0x5400u));
}
#endif
// c = a*b (+ c when acc), m16n8k16 bf16 -> fp32.
KC_DEV void kc_mma(float (&c)[4], u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1, bool acc) {
    const float z = 0.f;
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};"
        : "=f"(c[0]), "=f"(c[1]), "=f"(c[2]), "=f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1),
          "f"(acc ? c[0] : z), "f"(acc ? c[1] : z), "f"(acc ? c[2] : z), "f"(acc ? c[3] : z));
}

// Half k (0 low, 1 high) of a word of two bf16, as a float.
KC_DEV float kc_half(u32 w, int k) { return __uint_as_float(k ? (w & 0xFFFF0000u) : (w << 16)); }
// N consecutive 32-bit words from shared memory (16-byte aligned when N >= 4).
template <int N> KC_DEV void kc_lds_words(u32 (&d)[N], const unsigned char* p) {
    if constexpr (N >= 4) {
#pragma unroll
        for (int i = 0; i < N; i += 4) {
            const kc_u4 v = *reinterpret_cast<const kc_u4*>(p + 4 * i);
            d[i] = v.x; d[i + 1] = v.y; d[i + 2] = v.z; d[i + 3] = v.w;
        }
    } else if constexpr (N == 2) {
        const uint2 v = *reinterpret_cast<const uint2*>(p);
        d[0] = v.x; d[1] = v.y;
    } else {
        d[0] = *reinterpret_cast<const u32*>(p);
    }
}
KC_DEV u32 kc_smem(const void* p) { return (u32)__cvta_generic_to_shared(p); }
KC_DEV void kc_cp16(u32 dst, const void* src) {
    asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;" :: "r"(dst), "l"(src) : "memory");
}
KC_DEV void kc_cp8(u32 dst, const void* src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" :: "r"(dst), "l"(src) : "memory");
}
KC_DEV void kc_cp4(u32 dst, const void* src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" :: "r"(dst), "l"(src) : "memory");
}
KC_DEV void kc_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
// Programmatic dependent launch (sm_90; nothing before): the plans launch
// the kernel with early start where StreamConfig.EarlyStart says (x read
// from memory, or with XE through the ring after the first steps'
// weights, at decode or in 8-token tiles), so it may begin while the
// kernel ahead finishes. It releases its own dependents at its start, puts
// its first steps' weights (which nothing ahead writes) in flight, and
// waits for the grid ahead (completed, its writes visible) before it reads
// or copies x; every store of y follows that wait. Both are no-ops in an
// ordinary launch.
// kc_grid_wait_for waits and returns x as a value the wait produced, so
// that the compiler cannot schedule a load through it (an asm statement it
// may otherwise move) above the wait.
KC_DEV const u16* kc_grid_wait_for(const u16* p) {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" : "+l"(p) :: "memory");
#endif
    return p;
}
KC_DEV void kc_grid_release() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
template <int N> KC_DEV void kc_wait() { asm volatile("cp.async.wait_group %0;" :: "n"(N) : "memory"); }

// Per-warp ring slot: ROWS rows of SEG packed bytes (row stride WSTRIDE), then
// the rows' U scales and U biases (stride SSTRIDE each), then (XT > 0) XT
// token rows of the step's x at XOFF (stride XSTRIDE).
#define ROWS (16 * MT)
#define GBYTES (GROUP * BITS / 8)            // packed bytes per row and group
#define SEG (U * GBYTES)                     // packed bytes per row and step
#if KC_GENERAL
#define WSTRIDE (SEG + 16)                   // a misaligned run's last word may read 4 bytes past the row
#else
#define WSTRIDE (SEG + (WPT == 8 ? 16 : 16 * WPT))   // padding: fragment reads hit distinct banks
#endif
#define SSEG (2 * U)                         // scale bytes per row and step
#define SW (U / 2)                           // 32-bit words of scales per row and step
#if TAIL
#define SCP 4                                // bytes per cp.async of scales: a window's pieces
#define SSTRIDE ((SSEG + 4 + 15) / 16 * 16)  // a window: U + 2 entries
#define SPR (U / 2 + 1)                      // scale copies per row (the window)
#else
#define SCP (SSEG < 16 ? SSEG : 16)          // bytes per cp.async of scales
#define SSTRIDE (SSEG < 16 ? 16 : SSEG)
#define SPR (SSEG / SCP)                     // scale copies per row
#endif
#define XSEG (U * GROUP * 2)                 // x bytes per token and step (XT > 0)
#define XSTRIDE (XSEG + 16)                  // padding: conflict-free x reads for GROUP 64 (2-way for 32 and 128)
#define XOFF (ROWS * WSTRIDE + 2 * ROWS * SSTRIDE)
#define SLOT (XOFF + XT * XSTRIDE)
#if KC_GENERAL
#if SEG % 16 != 0 || SEG > 512
#error "U*GROUP*BITS/8 must be whole 16-byte pieces, at most 32 of them (a warp instruction covers a row piece)"
#endif
#elif SEG % 128 != 0 || SEG > 512
#error "U*GROUP*BITS/8 must be 128, 256 or 512 (whole lines, at most 32 lanes per row piece)"
#endif


extern "C" __global__ void __launch_bounds__(32 * KW, MINB)
affine_stream(const u16* __restrict__ x, const u32* __restrict__ weight,
              const u16* __restrict__ scales, const u16* __restrict__ biases,
              const u16* __restrict__ bias, u16* __restrict__ y,
              int tokens, int in_features, int out_features)
{
    extern __shared__ __align__(16) unsigned char smem[];
    const int in = in_features;
    const int out = out_features;
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int g = lane >> 2;
    const int tig = lane & 3;
    const int row0 = blockIdx.x * ROWS;
    const int tok0 = blockIdx.y * (8 * NT);
    const int groups = in / GROUP;                  // a multiple of U, or TAIL more (host checks)
    const long long row_bytes = (long long)in * BITS / 8;
    const int nsteps = (groups + U - 1) / U;        // with TAIL, the last holds TAIL groups
#if TAIL
    // This lane's rows (16m + 8h + g of the block, row0 a multiple of 16)
    // start their scales at entry row * groups: odd for odd rows when
    // groups is odd, where the window holds them one entry in. Rows past
    // the end copy row out - 1 and may then read another entry: their
    // outputs are never stored.
    const int ssh = g & groups & 1;
#endif
    unsigned char* ring = smem + warp * (D * SLOT);
    const u32 ring_s = kc_smem(ring);
    const unsigned char* wbytes = reinterpret_cast<const unsigned char*>(weight);
    kc_grid_release();

    // Copy step st into ring slot d: every lane moves 16-byte pieces of the
    // rows (at 4 and 8 bits a warp instruction covers whole 128-byte
    // lines), then the scales
    // and biases. Rows past the end copy row out-1 (never stored). Sources
    // and destinations are computed once here; a step only adds its offset.
    constexpr int LPR = SEG / 16;                       // 16-byte pieces per row and step
    // Lane l copies piece l % LPR of rows l / LPR, l / LPR + RPI, ...: RPI
    // rows a warp instruction. 4 and 8 bits (steps of 128, 256 or 512
    // bytes) keep a source per row (LWHOLE: 32 lanes cover whole rows);
    // the other widths' steps (4, 5, 6, 10 or 12 pieces of 16 bytes as
    // the rule picks them) leave lanes idle and work out each row's source
    // as they go.
    constexpr bool LWHOLE = !KC_GENERAL;
    constexpr int RPI = 32 / LPR;                          // rows a warp instruction
    constexpr int NCP = LWHOLE ? ROWS * LPR / 32 : 1;     // sources kept per lane
    constexpr int NSC = (2 * ROWS * SPR + 31) / 32;     // scale copies per lane and step
    const unsigned char* wsrc[NCP];
    u32 wdst;
    if constexpr (LWHOLE) {
#pragma unroll
        for (int i = 0; i < NCP; ++i) {
            const int r = lane / LPR + i * (32 / LPR);
            wsrc[i] = wbytes + (long long)min(row0 + r, out - 1) * row_bytes + (lane % LPR) * 16;
        }
        wdst = ring_s + (lane / LPR) * WSTRIDE + (lane % LPR) * 16;
    } else {
        wsrc[0] = wbytes + (long long)row0 * row_bytes + (lane % LPR) * 16;
        wdst = ring_s + (lane % LPR) * 16;
    }
    const int rlast = out - 1 - row0;   // rows past it copy the last row (never stored)
    const int rsub = lane / LPR;        // this lane's first row (idle from RPI on)
    const u16* ssrc[NSC];
    u32 sdst[NSC];
#if TAIL
    int sfrom[NSC];   // the first of the copy's two entries, counted from the row's first of the step (-1 or more)
#endif
#pragma unroll
    for (int i = 0; i < NSC; ++i) {
        const int c = min(lane + 32 * i, 2 * ROWS * SPR - 1);
        const int which = c / (ROWS * SPR);                 // 0 scales, 1 biases
        const int rc = c - which * ROWS * SPR;
        const int r = rc / SPR, part = rc - r * SPR;
#if TAIL
        const long long e0 = (long long)min(row0 + r, out - 1) * groups;   // the row's first entry
        ssrc[i] = (which ? biases : scales) + (e0 & ~1ll) + part * 2;
        sfrom[i] = part * 2 - (int)(e0 & 1);
#else
        ssrc[i] = (which ? biases : scales) + (long long)min(row0 + r, out - 1) * groups + part * (SCP / 2);
#endif
        sdst[i] = ring_s + ROWS * WSTRIDE + (which * ROWS + r) * SSTRIDE + part * SCP;
    }
    // The step's x into ring slot d (XT > 0): XT token rows of U*GROUP
    // values (tokens past the end repeat the last; their outputs are never
    // stored).
    auto issue_x = [&](int d, int st) {
#if XT > 0
        const u32 off = d * SLOT;
        const int ng = TAIL && st == nsteps - 1 ? TAIL : U;
        constexpr int XPR = XSEG / 16;                  // 16-byte pieces per token row
#pragma unroll
        for (int c = lane; c < XT * XPR; c += 32) {
            const int r = c / XPR, k = c - r * XPR;
            if (!TAIL || k < ng * (XPR / U))
                kc_cp16(ring_s + off + XOFF + r * XSTRIDE + k * 16,
                        x + (long long)min(tok0 + r, tokens - 1) * in + (long long)st * U * GROUP + k * 8);
        }
#endif
    };
    // Step st into ring slot d: the weights, with wx the step's x
    // (issue_x), then the scales and biases.
    auto issue = [&](int d, int st, bool wx) {
        const u32 off = d * SLOT;
        const long long wo = (long long)st * SEG;
        // With TAIL the last step holds TAIL groups: only the pieces, x and
        // scale entries that lie inside the row are copied (the rest of the
        // slot is never read).
        const int ng = TAIL && st == nsteps - 1 ? TAIL : U;
        if (TAIL && (lane % LPR) * 16 >= ng * GBYTES) {
            // this lane's piece is past the row's end
        } else if constexpr (LWHOLE) {
#pragma unroll
            for (int i = 0; i < NCP; ++i)
                kc_cp16(wdst + off + i * (32 / LPR) * WSTRIDE, wsrc[i] + wo);
        } else if (rsub < RPI) {
#pragma unroll
            for (int i = 0; i < (ROWS + RPI - 1) / RPI; ++i) {
                const int r = rsub + i * RPI;
                if (ROWS % RPI == 0 || r < ROWS)
                    kc_cp16(wdst + off + r * WSTRIDE, wsrc[0] + (long long)min(r, rlast) * row_bytes + wo);
            }
        }
        if (wx) issue_x(d, st);
#pragma unroll
        for (int i = 0; i < NSC; ++i) {
#if TAIL
            if (((2 * ROWS * SPR) % 32 == 0 || lane + 32 * i < 2 * ROWS * SPR) && sfrom[i] < ng)
#else
            if ((2 * ROWS * SPR) % 32 == 0 || lane + 32 * i < 2 * ROWS * SPR)
#endif
            {
#if SCP == 16
                kc_cp16(sdst[i] + off, ssrc[i] + st * U);
#elif SCP == 8
                kc_cp8(sdst[i] + off, ssrc[i] + st * U);
#else
                kc_cp4(sdst[i] + off, ssrc[i] + st * U);
#endif
            }
        }
    };

#if XT == 0
    // This lane's tokens for the B operand (column g of each n-tile),
    // clamped; set once the grid ahead is done.
    const u16* xrow[NT];
    auto load_x = [&](u32 (&xw)[NT][4 * XLD], int grp) {
#pragma unroll
        for (int n = 0; n < NT; ++n)
#pragma unroll
            for (int i = 0; i < XLD; ++i) {
                const kc_u4 v = kc_ldx(xrow[n] + grp * GROUP + 8 * i);
                xw[n][4 * i + 0] = v.x;
                xw[n][4 * i + 1] = v.y;
                xw[n][4 * i + 2] = v.z;
                xw[n][4 * i + 3] = v.w;
            }
    };
#endif

    float acc[MT][NT][4];
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int n = 0; n < NT; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[m][n][e] = 0.f;

    // A operand of the x-sum mma: bf16 ones against every B slot pair that
    // holds x itself (with 8 bits, the second pair holds 16*x and gets zeros).
    const u32 ones = 0x3F803F80u;
#if BITS == 4
    const u32 ones_hi = ones;
#elif BITS == 8
    const u32 ones_hi = 0u;
#endif
#if KC_GENERAL
    // Where this lane's run starts in a row's group: the word, and the bits
    // of it before the run.
    const int run_base = (tig * RBYTES) & ~3;
    const u32 run_shift = 8 * ((tig * RBYTES) & 3);
#endif

    // One group: A fragments from the slot, B from x (already in registers).
    auto group_math = [&](const unsigned char* slot, int u, const u32 (&xw)[NT][4 * XLD],
                          const u32 (&sw)[MT][2][SW], const u32 (&bw)[MT][2][SW]) {
#if KC_GENERAL
        u32 r[MT][2][RW];
#pragma unroll
        for (int m = 0; m < MT; ++m)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const u32* p = reinterpret_cast<const u32*>(slot + (16 * m + 8 * h + g) * WSTRIDE + u * GBYTES + run_base);
                u32 l[LW];
#pragma unroll
                for (int k = 0; k < LW; ++k) l[k] = p[k];
#pragma unroll
                for (int k = 0; k < RW; ++k) r[m][h][k] = RALIGNED ? l[k] : __funnelshift_r(l[k], l[LW > k + 1 ? k + 1 : k], run_shift);
            }
        float t[MT][NT][4];
        float xs[NT][4];
#pragma unroll
        for (int st = 0; st < VPT / 4; ++st) {
            // One k16 step: pairs 2st (A rows g and g+8 against b0) and 2st+1 (against b1).
            const int i0 = kc_pi(2 * st), j0 = kc_pj(2 * st), i1 = kc_pi(2 * st + 1), j1 = kc_pj(2 * st + 1);
            u32 q[NT][2];
#pragma unroll
            for (int n = 0; n < NT; ++n) {
                q[n][0] = kc_xpair(xw[n], i0, j0);
                q[n][1] = kc_xpair(xw[n], i1, j1);
                kc_mma(xs[n], ones, ones, ones, ones, q[n][0], q[n][1], st != 0);
            }
#pragma unroll
            for (int m = 0; m < MT; ++m) {
                const u32 a0 = kc_pair(r[m][0], i0, j0), a1 = kc_pair(r[m][1], i0, j0);
                const u32 a2 = kc_pair(r[m][0], i1, j1), a3 = kc_pair(r[m][1], i1, j1);
#pragma unroll
                for (int n = 0; n < NT; ++n) kc_mma(t[m][n], a0, a1, a2, a3, q[n][0], q[n][1], st != 0);
            }
        }
#else
        u32 w[MT][2][WPT];
#pragma unroll
        for (int m = 0; m < MT; ++m)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const u32* p = reinterpret_cast<const u32*>(slot + (16 * m + 8 * h + g) * WSTRIDE + u * GBYTES + tig * (4 * WPT));
#pragma unroll
                for (int i = 0; i < WPT; i += (WPT >= 4 ? 4 : WPT)) {
#if WPT >= 4
                    const kc_u4 v = *reinterpret_cast<const kc_u4*>(p + i);
                    w[m][h][i] = v.x; w[m][h][i + 1] = v.y; w[m][h][i + 2] = v.z; w[m][h][i + 3] = v.w;
#elif WPT == 2
                    const uint2 v = *reinterpret_cast<const uint2*>(p);
                    w[m][h][0] = v.x; w[m][h][1] = v.y;
#else
                    w[m][h][0] = p[0];
#endif
                }
            }
        float t[MT][NT][4];
        float xs[NT][4];
#pragma unroll
        for (int wi = 0; wi < WPT; ++wi) {
            // B pairs for word wi, in the order its A pairs unpack.
            u32 q[NT][4];
#pragma unroll
            for (int n = 0; n < NT; ++n) {
#if BITS == 4
                const u32 x0 = xw[n][4 * wi], x1 = xw[n][4 * wi + 1], x2 = xw[n][4 * wi + 2], x3 = xw[n][4 * wi + 3];
                q[n][0] = kc_prmt(x0, x2, 0x5410);   // (x0, x4)
                q[n][1] = kc_prmt(x0, x2, 0x7632);   // (x1, x5)
                q[n][2] = kc_prmt(x1, x3, 0x5410);   // (x2, x6)
                q[n][3] = kc_prmt(x1, x3, 0x7632);   // (x3, x7)
#else
                const u32 x0 = xw[n][2 * wi], x1 = xw[n][2 * wi + 1];
                q[n][0] = kc_prmt(x0, x1, 0x5410);   // (x0, x2) meets the low nibbles
                q[n][1] = kc_times16(q[n][0]);       // 16*(x0, x2) meets the high nibbles
                q[n][2] = kc_prmt(x0, x1, 0x7632);   // (x1, x3)
                q[n][3] = kc_times16(q[n][2]);
#endif
            }
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const bool more = (wi | half) != 0;
#pragma unroll
                for (int n = 0; n < NT; ++n)
                    kc_mma(xs[n], ones, ones, ones_hi, ones_hi, q[n][2 * half], q[n][2 * half + 1], more);
#pragma unroll
                for (int m = 0; m < MT; ++m) {
                    const u32 wg = w[m][0][wi], wg8 = w[m][1][wi];
                    const u32 a0 = kc_nib(wg, 2 * half), a1 = kc_nib(wg8, 2 * half);
                    const u32 a2 = kc_nib(wg, 2 * half + 1), a3 = kc_nib(wg8, 2 * half + 1);
#pragma unroll
                    for (int n = 0; n < NT; ++n)
                        kc_mma(t[m][n], a0, a1, a2, a3, q[n][2 * half], q[n][2 * half + 1], more);
                }
            }
        }
#endif
        // Fold: acc += s*t + (b - C*s)*xsum, rows g (e = 0, 1) and g+8 (e = 2, 3).
#if !SPK
        const u16* sc = reinterpret_cast<const u16*>(slot + ROWS * WSTRIDE);
#endif
#pragma unroll
        for (int m = 0; m < MT; ++m) {
#if SPK
            const float s0 = kc_half(sw[m][0][u >> 1], u & 1), s1 = kc_half(sw[m][1][u >> 1], u & 1);
            const float b0 = fmaf(-OFFSET, s0, kc_half(bw[m][0][u >> 1], u & 1));
            const float b1 = fmaf(-OFFSET, s1, kc_half(bw[m][1][u >> 1], u & 1));
#else
            const int r0 = 16 * m + g, r1 = r0 + 8;
#if TAIL
            const int us = u + ssh;   // the entry in the rows' windows
#else
            const int us = u;
#endif
            const float s0 = kc_bf16(sc[r0 * (SSTRIDE / 2) + us]), s1 = kc_bf16(sc[r1 * (SSTRIDE / 2) + us]);
            const float b0 = fmaf(-OFFSET, s0, kc_bf16(sc[(ROWS + r0) * (SSTRIDE / 2) + us]));
            const float b1 = fmaf(-OFFSET, s1, kc_bf16(sc[(ROWS + r1) * (SSTRIDE / 2) + us]));
#endif
#pragma unroll
            for (int n = 0; n < NT; ++n) {
                acc[m][n][0] = fmaf(s0, t[m][n][0], fmaf(b0, xs[n][0], acc[m][n][0]));
                acc[m][n][1] = fmaf(s0, t[m][n][1], fmaf(b0, xs[n][1], acc[m][n][1]));
                acc[m][n][2] = fmaf(s1, t[m][n][2], fmaf(b1, xs[n][2], acc[m][n][2]));
                acc[m][n][3] = fmaf(s1, t[m][n][3], fmaf(b1, xs[n][3], acc[m][n][3]));
            }
        }
    };

    // Steps warp, warp+KW, ...: the KW warps of a block read neighbouring
    // stretches of the same rows. Each warp streams its steps through its own
    // ring of D slots with cp.async (D-1 steps in flight), so no block-wide
    // barrier is needed until the final reduction. Without XT, x for the
    // next group is loaded while the current group's math runs.
#if XT > 0 && !XE
    x = kc_grid_wait_for(x);   // x travels in the ring with the first steps' weights
#endif
#pragma unroll
    for (int d = 0; d < D - 1; ++d) {
        if (warp + d * KW < nsteps) issue(d, warp + d * KW, !XE);
        kc_commit();
    }
#if XT > 0 && XE
    // The first steps' weights are in flight; their x follows once the grid
    // ahead is done, one commit group a step after the weights' D-1. The
    // loop's wait<D-1> at step i (i+1 groups more) then leaves D+i groups
    // done: step i's x is group D-1+i for i < D-1, and from there on each
    // step's group is D-1+i too.
    x = kc_grid_wait_for(x);
#pragma unroll
    for (int d = 0; d < D - 1; ++d) {
        if (warp + d * KW < nsteps) issue_x(d, warp + d * KW);
        kc_commit();
    }
#endif
#if XT == 0
    u32 xa[NT][4 * XLD], xb[NT][4 * XLD];
    x = kc_grid_wait_for(x);   // the first steps' weights are in flight; x is the grid ahead's
#pragma unroll
    for (int n = 0; n < NT; ++n)
        xrow[n] = x + (long long)min(tok0 + 8 * n + g, tokens - 1) * in + tig * VPT;
    if (warp < nsteps) load_x(xa, warp * U);
#else
    u32 xa[NT][4 * XLD];
#endif
    int d = 0;
    for (int st = warp; st < nsteps; st += KW) {
        const int ahead = st + (D - 1) * KW;
        if (ahead < nsteps) issue(d == 0 ? D - 1 : d - 1, ahead, true);
        kc_commit();
        kc_wait<D - 1>();
        __syncwarp();
        const unsigned char* slot = ring + d * SLOT;
        // The step's scales and biases of this lane's rows: U bf16 each, in
        // whole-row vector reads.
        u32 sw[MT][2][SW], bw[MT][2][SW];
#if SPK
#pragma unroll
        for (int m = 0; m < MT; ++m)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int r = 16 * m + 8 * h + g;
                kc_lds_words<SW>(sw[m][h], slot + ROWS * WSTRIDE + r * SSTRIDE);
                kc_lds_words<SW>(bw[m][h], slot + ROWS * WSTRIDE + (ROWS + r) * SSTRIDE);
#if TAIL
                // The row's entries start ssh into the window: shift its
                // words by that many halves, with the window's next word.
                const u32 sx = *reinterpret_cast<const u32*>(slot + ROWS * WSTRIDE + r * SSTRIDE + 4 * SW);
                const u32 bx = *reinterpret_cast<const u32*>(slot + ROWS * WSTRIDE + (ROWS + r) * SSTRIDE + 4 * SW);
#pragma unroll
                for (int k = 0; k < SW; ++k) {
                    sw[m][h][k] = __funnelshift_r(sw[m][h][k], k + 1 < SW ? sw[m][h][k + 1] : sx, 16 * ssh);
                    bw[m][h][k] = __funnelshift_r(bw[m][h][k], k + 1 < SW ? bw[m][h][k + 1] : bx, 16 * ssh);
                }
#endif
            }
#endif
        const int ng = TAIL && st == nsteps - 1 ? TAIL : U;   // the step's groups
#if XT > 0
        // x from the slot: this lane's 16-value run of group u for token
        // row g of each n-tile (rows past XT repeat the last).
#pragma unroll
        for (int u = 0; u < U; ++u) {
            if (TAIL && u >= ng) break;
#pragma unroll
            for (int n = 0; n < NT; ++n)
#pragma unroll
                for (int i = 0; i < XLD; ++i) {
                    const kc_u4 v = *reinterpret_cast<const kc_u4*>(
                        slot + XOFF + min(8 * n + g, XT - 1) * XSTRIDE + (u * GROUP + tig * VPT + 8 * i) * 2);
                    xa[n][4 * i + 0] = v.x;
                    xa[n][4 * i + 1] = v.y;
                    xa[n][4 * i + 2] = v.z;
                    xa[n][4 * i + 3] = v.w;
                }
            group_math(slot, u, xa, sw, bw);
        }
#else
#pragma unroll
        for (int u = 0; u < U; u += 2) {
            // x of the next group (the first group of the next step after the last).
            const int nx = (u + 1 < U) ? st * U + u + 1 : (st + KW) * U;
            if (nx < groups) load_x(xb, nx);
            if (TAIL && u >= ng) break;   // the last step's groups are done (no step follows it)
            group_math(slot, u, xa, sw, bw);
            if (u + 1 < U) {
                const int nx2 = (u + 2 < U) ? st * U + u + 2 : (st + KW) * U;
                if (nx2 < groups) load_x(xa, nx2);
                if (!TAIL || u + 1 < ng) group_math(slot, u + 1, xb, sw, bw);
            } else {
#pragma unroll
                for (int n = 0; n < NT; ++n)
#pragma unroll
                    for (int i = 0; i < 4 * XLD; ++i) xa[n][i] = xb[n][i];
            }
        }
#endif
        __syncwarp();
        d = (d + 1 == D) ? 0 : d + 1;
    }
    kc_wait<0>();

    // Output: acc[m][n][e] is row row0+16m+g+8(e>>1), token tok0+8n+2tig+(e&1).
#if KW > 1
    __syncthreads();                                  // every warp is done with its ring
    float* red = reinterpret_cast<float*>(smem);      // [KW][NT*8][MT*16], over the rings
    constexpr int RT = MT * 16, TT = NT * 8;
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int n = 0; n < NT; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int r = 16 * m + g + 8 * (e >> 1), tt = 8 * n + 2 * tig + (e & 1);
                red[(warp * TT + tt) * RT + r] = acc[m][n][e];
            }
    __syncthreads();
    for (int i = threadIdx.x; i < RT * TT; i += 32 * KW) {
        const int tt = i / RT, r = i - tt * RT;
        const int row = row0 + r, tok = tok0 + tt;
        if (row < out && tok < tokens) {
            float v = 0.f;
#pragma unroll
            for (int k = 0; k < KW; ++k) v += red[(k * TT + tt) * RT + r];
            if (bias != nullptr) v += kc_bf16(kc_ldh(bias + row));
            y[(long long)tok * out + row] = kc_to_bf16(v);
        }
    }
#else
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int n = 0; n < NT; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int row = row0 + 16 * m + g + 8 * (e >> 1), tok = tok0 + 8 * n + 2 * tig + (e & 1);
                if (row < out && tok < tokens) {
                    float v = acc[m][n][e];
                    if (bias != nullptr) v += kc_bf16(kc_ldh(bias + row));
                    y[(long long)tok * out + row] = kc_to_bf16(v);
                }
            }
#endif
}
