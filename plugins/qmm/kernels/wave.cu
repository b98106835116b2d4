// wave.cu: QMM's small-batch kernel for 9..32 tokens of 4-bit MLX affine
// weights in groups of 64, qmm/wave (plugins/qmm/wave.go). Checked and
// timed standalone by `python3 scripts/wave_kernel.py`. Up to 16 tokens one
// token tile (TT 1); above, two (TT 2): every unpacked weight then meets two
// mma, one a tile (twentieth session, 32 tokens: 8192->28672 67.1 us against
// qmm/wgmma's 102.0, 28672->8192 63.5 against qmm/stream's 96.9; twenty-first,
// with at most 5 n-tiles a warp so that the sums need no spills: 8192->28672
// 62.8-63.0).
//
//   y[t][o] = sum_i x[t][i] * (scale[o][i/64] * q[o][i] + biases[o][i/64])  (+ bias[o])
//
// Status (bench/NOTES.md, nineteenth session, H200, 16 tokens, the whole
// call, two machines): 8192->28672 43.2-44.5 us (2.48-2.52x torch's bf16
// matmul, which read 107-112 us; qmm/bulk 56.4-56.9), 28672->8192 in
// 128-row pairs 46.0-47.1 (2.43-2.55x over a torch of 112-118 us; qmm/bulk
// 57.3-57.4; 3-6 % faster than 64-row blocks in the same calls),
// 4096->14336 16.0-16.2 (1.86-1.92x; 19.2-19.3). Blocks of 32 rows (4096
// outputs) stream more x than weights and lost to qmm/bulk; in clusters
// of two 64-row blocks over halves of the inputs, 14336->4096 takes
// 17.6-17.7 (1.76-1.84x; qmm/bulk 20.2-20.3) and 4096^2 10.1-10.2
// (qmm/stream 8.2-8.3 is faster). Tried there and slower (the
// NOTES have the tables): separate rings for weights and x with a second
// copier warp, L2 prefetches of lines ahead, a second accumulator set,
// 12 consumer warps, and wgmma m64n16k16 with the weights as A
// (branch experiment/wave-wgmma).
//
// Design: one block per R output rows and all of K (R = rows / SMs rounded
// up to a multiple of 8 WR, at most 256: about one wave, and no partial
// sums leave the block). Where that would be under 64 rows (few outputs),
// a thread-block cluster of KS blocks takes KS times the rows and each
// block 1/KS of the lines; the blocks add their sums in distributed shared
// memory and rank 0 writes y. Where that gives exactly 64 rows over long
// inputs (56 or more lines a block after the split), a cluster of two
// takes twice the rows: half the x per weight byte, which pays where the
// power cap holds the product back (28672->8192).
// A producer warp streams "lines" (256 inputs of each of the R rows: one
// 128-byte swizzled tensor-map box, with the line's prepared x) into a ring
// of NS slots, and each pair of lines' scales and biases (8 groups: a box
// of 16 bytes a row) into a ring of NSB slots; CW = WR x WK consumer warps:
// WR row groups of NT n-tiles (8 rows each) x WK warps that take every
// WK-th line, summed in shared memory at the end. mma.sync m16n8k16 with
// each tile's 16 tokens as M (A = x / sigma in fp16, sigma a power of two per token
// and line, prepared once per call in fragment order) and the rows as N
// (B = s*q or 16 s*q, dequantised in registers: lop3 to 1024 + q or
// 1024 + 16q, then one fma with (s, -1024 s), exact but for the one
// rounding of the product; x at the 16q positions is prepared divided by
// 16). A lane owns one group of a line per n-tile (the two
// 16-byte chunks 2 tig and 2 tig + 1 of its row: conflict-free under the
// 128-byte swizzle), so its scale constants serve 64 weights. The biases'
// share, sum_g b[o][g] * XS[t][g] with XS the group sums of x / sigma, is
// one more mma per line (A: XS in fp16, its high parts in kslots 0..3 and
// the low parts in 8..11; B: the line's 4 biases in both). A line's sums
// are then scaled by sigma into the accumulators.
//
// Numerics: s*q is rounded to fp16 once (2^-11 relative), x / sigma is
// exact for values within 2^18 of its line's largest (2^22 at the positions
// not divided by 16), and the biases' share keeps 22 bits of XS. Scales are
// taken to fp16: below 2^-14 they lose bits, below 2^-24 they are 0, and at
// 64 or more -1024 s overflows (outputs turn NaN); quantised model weights
// are far inside that range.
//
// Entry points, in launch order on one stream (the main kernel with early
// start; xprep without, so that its blocks do not wait beside the main
// kernel ahead, which releases its dependents after its loop):
//   affine_wave_xprep(x, ws, tokens, in)   any grid (TT in/256 or fewer), block 256
//   affine_wave(wmap, smap, bmap, ws, bias, y, tokens, in, out)
//       grid ceil(out/R) * KS (cluster dimension KS, compiled in), block
//       32*(CW+1), dynamic shared memory SMEM_BYTES
// Workspace ws: in/256 lines of XLINE_BYTES, each TT token tiles of
// XTILE_BYTES: 16 steps x 32 lanes x 16 bytes of A fragments, then the XS
// fragments (512 bytes), then the tile's 16 sigma (floats).
// Tensor maps (cuTensorMapEncodeTiled, rank 2, innermost first):
//   wmap  uint32 [out][in/8], box {32, R}, SWIZZLE_128B
//   smap  bf16 [out][in/64], box {8, R}, no swizzle; bmap the biases, same
// Needs 1 <= tokens <= 16 TT, in % (512 KS) == 0 (whole pairs of lines per
// block), out % 8 == 0.
//
// Diagnostics (development only; the outputs are wrong): KC_DIAG_NOMATH
// releases each line unread (the feed alone), KC_DIAG_NOFEED copies
// nothing and computes on whatever shared memory holds (the arithmetic
// alone), KC_DIAG_RACE runs both side by side without waiting on each
// other (the copier reuses a slot once its last copy has landed, the
// consumers never wait): what perfect overlap would give; KC_DIAG_NOX
// copies the weights but never x: what x's traffic costs (twenty-first
// session, 16 tokens: 28672->8192 46.5-46.7 us against 43.8, 14336->4096
// 17.7-17.8 against 16.5-16.6, 8192->28672 within 2 %). Nineteenth
// session, 16 tokens, the product alone (bench/NOTES.md): 8192->28672
// 40.7 us, side by side 38.4, the feed alone 33.4, the arithmetic alone
// 30.1; 28672->8192 (64-row blocks) 44.9, 44.7, 35.8 and 30.9. At these
// two shapes the 700 W power cap lowers the SM clock to 1650-1830 MHz once
// the feed and the arithmetic run together (each alone runs at 1980): at
// 28672->8192 the two add up by power alone, at 8192->28672 waiting costs
// 2.3 us more; at 4096->14336 (13.4, side by side 9.4) the waiting is
// what costs.

typedef unsigned int u32;
typedef unsigned short u16;
typedef unsigned long long u64;

#ifndef NT
#define NT 8   // n-tiles (8 rows) per consumer warp
#endif
#ifndef WR
#define WR 1   // row groups of consumer warps
#endif
#ifndef WK
#define WK 8   // consumer warps per row group, each taking every WK-th line
#endif
#ifndef NS
#define NS 8   // line slots in the ring (a multiple of WK: below)
#endif
#ifndef NSB
#define NSB 4  // scale and bias slots, each serving two lines (2 NSB a multiple of WK)
#endif
#ifndef TT
#define TT 1   // token tiles of 16 (1: up to 16 tokens, 2: up to 32): each unpacked weight meets TT mma
#endif
#if TT != 1 && TT != 2
#error "TT must be 1 or 2"
#endif
#ifndef KS
#define KS 1   // blocks of a thread-block cluster that share a block's rows, each over 1/KS of the lines
#endif
#ifndef KC_DIAG_NOMATH
#define KC_DIAG_NOMATH 0   // diagnostics (see the header): 1 releases each line unread
#endif
#ifndef KC_DIAG_NOFEED
#define KC_DIAG_NOFEED 0   // 1 copies nothing
#endif
#ifndef KC_DIAG_NOX
#define KC_DIAG_NOX 0      // 1 copies the weights but never x (x's traffic left out)
#endif
#ifndef KC_DIAG_RACE
#define KC_DIAG_RACE 0     // 1 runs the feed and the arithmetic side by side, unsynchronised
#endif
#if KC_DIAG_NOMATH + KC_DIAG_NOFEED + KC_DIAG_RACE + KC_DIAG_NOX > 1
#error "the diagnostics KC_DIAG_NOMATH, KC_DIAG_NOFEED, KC_DIAG_RACE and KC_DIAG_NOX exclude each other"
#endif
#if KS != 1 && KS != 2 && KS != 4 && KS != 8
#error "KS must be 1, 2, 4 or 8 (a portable cluster)"
#endif
#define R (8 * NT * WR)                         // rows per block
#define CW (WR * WK)                            // consumer warps
#define THREADS (32 * (CW + 1))
#define WLINE_BYTES (R * 128)                   // one line of weights: R rows x 128 bytes, 128-byte swizzle
#define XTILE_BYTES (17 * 512 + 64)             // one token tile of a line of x: 16 steps, XS, 16 sigma
#define XLINE_BYTES (TT * XTILE_BYTES)          // one line of x: its token tiles in turn
#define LINE_BYTES ((WLINE_BYTES + XLINE_BYTES + 1023) / 1024 * 1024)
#define SB_BYTES (R * 16)                       // scales (or biases) of two lines: R rows x 8 groups
#define SMEM_BYTES (NS * LINE_BYTES + NSB * 2 * SB_BYTES + 1024)   // + alignment slack
#define RED_BYTES (WK * R * 16 * TT * 4)        // the K warps' sums [WK][16 TT tokens][R]
#if R > 256
#error "a tensor-map box holds at most 256 rows"
#endif
#define SHARE_BYTES (KS > 1 ? 16 * TT * R * 4 : 0)  // a cluster block's sums [16 TT tokens][R], read by rank 0
#if RED_BYTES + SHARE_BYTES > NS * LINE_BYTES
#error "the sums must fit in the ring"
#endif
#if NS < 2 || NSB < 1
#error "NS >= 2 and NSB >= 1"
#endif
// A warp waits on a slot's barrier by parity, which is sound only if it saw
// the slot's previous phase complete: so the lines of a slot must always be
// the same K warp's (NS a multiple of WK), and so must the pairs of lines
// of a scale slot (2 NSB a multiple of WK). Otherwise a warp that runs ahead
// could pass its wait while an earlier line is still in flight.
#if NS % WK != 0 || (2 * NSB) % WK != 0
#error "NS must be a multiple of WK, and 2 NSB too"
#endif

#define KC_DEV __device__ __forceinline__

KC_DEV u32 kc_smem(const void* p) { return (u32)__cvta_generic_to_shared(p); }
KC_DEV void kc_bar_init(u32 bar, u32 count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(bar), "r"(count) : "memory");
}
KC_DEV void kc_bar_expect(u32 bar, u32 bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"(bytes) : "memory");
}
KC_DEV void kc_bar_arrive(u32 bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(bar) : "memory");
}
KC_DEV void kc_bar_wait(u32 bar, u32 parity) {
    u32 done;
    do {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    } while (!done);
}
KC_DEV void kc_tma2d(u32 dst, const void* map, int c0, int c1, u32 bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
                 :: "r"(dst), "l"(map), "r"(c0), "r"(c1), "r"(bar) : "memory");
}
KC_DEV void kc_bulk(u32 dst, const void* src, u32 bytes, u32 bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 :: "r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}
struct alignas(64) kc_tmap { unsigned long long v[16]; };   // CUtensorMap
KC_DEV void kc_grid_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
KC_DEV void kc_grid_release() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }

KC_DEV float kc_bf16(u32 h) { return __uint_as_float(h << 16); }
KC_DEV u32 kc_f16x2(float lo, float hi) {
    u32 d;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
    return d;
}
// Nibbles under mask (0x000F000F or 0x00F000F0) of w as an fp16 pair:
// 1024 + q, or 1024 + 16q.
template <u32 MASK> KC_DEV u32 kc_nib16(u32 w) {
    u32 d;
    asm("lop3.b32 %0, %1, %2, 0x64006400, 0xEA;" : "=r"(d) : "r"(w), "n"(MASK));
    return d;
}
// v rounded to fp16 and back.
KC_DEV float kc_f16_round(float v) {
    unsigned short h;
    float r;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
    asm("cvt.f32.f16 %0, %1;" : "=f"(r) : "h"(h));
    return r;
}
KC_DEV u32 kc_hfma2(u32 a, u32 b, u32 c) {
    u32 d;
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}
KC_DEV u32 kc_hmul2(u32 a, u32 b) {
    u32 d;
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}
KC_DEV void kc_mma(float (&c)[4], const uint4& a, u32 b0, u32 b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "r"(b0), "r"(b1));
}
// Thread-block clusters (sm_90): a barrier over every thread of the
// cluster, ordering shared memory writes before it against reads after it
// (every warp of each block calls it, the producer too); the address of a
// shared variable in block `rank` of the cluster; a load from such an
// address.
KC_DEV void kc_cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
KC_DEV u32 kc_cluster_addr(u32 saddr, int rank) {
    u32 d;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(d) : "r"(saddr), "r"(rank));
    return d;
}
KC_DEV float kc_ld_cluster(u32 addr) {
    float v;
    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(addr) : "memory");
    return v;
}
KC_DEV uint4 kc_lds128(u32 addr) {
    uint4 v;
    asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr));
    return v;
}
KC_DEV u32 kc_lds32(u32 addr) {
    u32 v;
    asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(addr));
    return v;
}
KC_DEV u32 kc_lds16(u32 addr) {
    unsigned short v;
    asm volatile("ld.shared.u16 %0, [%1];" : "=h"(v) : "r"(addr));
    return v;
}


// ---------------------------------------------------------------------------
// Xprep: one block per line L (256 inputs) and token tile: its 16 token
// slots, tokens 16 tt.. (slots past the end are zeros). The tokens' pieces of the line arrive in shared
// memory; per token, sigma = 2^k with max|x| / sigma in [2^8, 2^9) over the
// line (k clamped to [-126, 127]), so that x / sigma and its group sums fit
// fp16. Step s, lane (gid, tig): a0/a1 (token gid / gid + 8) pair kslots
// (2 tig, 2 tig + 1) and a2/a3 pair (2 tig + 8, 2 tig + 9), from inputs
// base + {0, 4} and base + {1, 5} (these divided by 16 as well: their
// weights unpack to 1024 + 16q), base = 64 tig + 8 (s >> 1) + 2 (s & 1)
// in the line: the positions whose weights the main kernel's lane tig
// unpacks for that step (its group tig of the line, word s >> 1, nibbles
// (0, 4) and (1, 5), or (2, 6) and (3, 7)). Then the XS fragments: kslot
// 2 tig + e (tig < 2) holds the high part of XS[t][2 tig + e] of the line's
// 4 groups and kslot 2 tig + 8 + e its low part, other kslots 0; then the
// 16 sigma.
extern "C" __global__ void __launch_bounds__(256)
affine_wave_xprep(const u16* __restrict__ x, unsigned char* __restrict__ ws, int tokens, int in_features)
{
    __shared__ __align__(16) u16 xt[16][256];
    __shared__ float inv[16], xs[16][4];
    kc_grid_release();
    kc_grid_wait();
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    for (int LT = blockIdx.x; LT < in_features / 256 * TT; LT += gridDim.x) {   // any grid: (line, token tile) in turn
        const int L = LT / TT, t0 = 16 * (LT % TT);
        unsigned char* out = ws + (long long)L * XLINE_BYTES + (LT % TT) * XTILE_BYTES;
        __syncthreads();   // the last tile's reads of xt, inv and xs are done
#pragma unroll
        for (int h = 0; h < 2; ++h) {   // 512 pieces of 8: token t0 + i / 32, piece i % 32
            const int i = tid + 256 * h, t = i >> 5, c = i & 31;
            uint4 v = make_uint4(0u, 0u, 0u, 0u);
            if (t0 + t < tokens) v = *reinterpret_cast<const uint4*>(x + (long long)(t0 + t) * in_features + 256 * L + 8 * c);
            *reinterpret_cast<uint4*>(&xt[t][8 * c]) = v;
        }
        __syncthreads();
        // Warp w: tokens 2w and 2w + 1. max|x| as bf16 bits (monotonic).
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int t = 2 * warp + h;
            const uint4 v = *reinterpret_cast<const uint4*>(&xt[t][8 * lane]);
            u32 m = max(max(v.x & 0x7FFF7FFFu, v.y & 0x7FFF7FFFu), max(v.z & 0x7FFF7FFFu, v.w & 0x7FFF7FFFu)) >> 16;
            m = max(m, max(max(v.x & 0x7FFFu, v.y & 0x7FFFu), max(v.z & 0x7FFFu, v.w & 0x7FFFu)));
            m = __reduce_max_sync(0xFFFFFFFFu, m);
            const int k = max(-126, min((int)(m >> 7) - 127 - 8, 127));
            if (lane == 0) {
                inv[t] = __int_as_float((127 - k) << 23);   // exact
                reinterpret_cast<float*>(out + 17 * 512)[t] = __int_as_float((127 + k) << 23);
            }
            // XS of the token's 4 groups: 8 lanes a group, 8 values a lane.
            float sum = 0.f;
#pragma unroll
            for (int e = 0; e < 4; ++e) sum += kc_bf16(e == 0 ? v.x & 0xFFFFu : e == 1 ? v.y & 0xFFFFu : e == 2 ? v.z & 0xFFFFu : v.w & 0xFFFFu)
                                              + kc_bf16(e == 0 ? v.x >> 16 : e == 1 ? v.y >> 16 : e == 2 ? v.z >> 16 : v.w >> 16);
#pragma unroll
            for (int o = 4; o > 0; o >>= 1) sum += __shfl_xor_sync(0xFFFFFFFFu, sum, o);
            if ((lane & 7) == 0) xs[t][lane >> 3] = sum * __int_as_float((127 - k) << 23);
        }
        __syncthreads();
        // Fragments: thread (step s, lane) for s = tid / 32 and tid / 32 + 8.
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int s = warp + 8 * h, gid = lane >> 2, tig = lane & 3;
            const int base = 64 * tig + 8 * (s >> 1) + 2 * (s & 1);
            u32 a[4];
#pragma unroll
            for (int r = 0; r < 2; ++r) {   // token gid (r 0), gid + 8 (r 1)
                const int t = gid + 8 * r;
                const float iv = inv[t], iv16 = iv * 0.0625f;   // exact: powers of two
                const u16* p = &xt[t][base];
                a[r] = kc_f16x2(kc_bf16(p[0]) * iv, kc_bf16(p[4]) * iv);
                a[2 + r] = kc_f16x2(kc_bf16(p[1]) * iv16, kc_bf16(p[5]) * iv16);   // meet 1024 + 16q
            }
            *reinterpret_cast<uint4*>(out + s * 512 + lane * 16) = make_uint4(a[0], a[1], a[2], a[3]);
        }
        if (tid < 32) {   // XS: high parts in kslots 2 tig + e, low parts in 2 tig + 8 + e (tig < 2)
            const int gid = lane >> 2, tig = lane & 3;
            u32 f[4] = {0u, 0u, 0u, 0u};
            if (tig < 2) {
#pragma unroll
                for (int r = 0; r < 2; ++r) {
                    const float v0 = xs[gid + 8 * r][2 * tig], v1 = xs[gid + 8 * r][2 * tig + 1];
                    f[r] = kc_f16x2(v0, v1);
                    f[2 + r] = kc_f16x2(v0 - kc_f16_round(v0), v1 - kc_f16_round(v1));
                }
            }
            *reinterpret_cast<uint4*>(out + 16 * 512 + lane * 16) = make_uint4(f[0], f[1], f[2], f[3]);
        }
    }
}

// ---------------------------------------------------------------------------
extern "C" __global__ void __launch_bounds__(THREADS, 1)
#if KS > 1
__cluster_dims__(KS, 1, 1)
#endif
affine_wave(const __grid_constant__ kc_tmap wmap, const __grid_constant__ kc_tmap smap,
            const __grid_constant__ kc_tmap bmap, unsigned char* __restrict__ ws, const u16* __restrict__ bias,
            u16* __restrict__ y, int tokens, int in_features, int out_features)
{
    extern __shared__ unsigned char smem_raw[];
    // full/empty per line slot; sfull/sempty per scale and bias slot
    __shared__ __align__(8) u64 full[NS], empty[NS], sfull[NSB], sempty[NSB];
    const u32 sbase = (kc_smem(smem_raw) + 1023) & ~1023u;
    const u32 sbbase = sbase + NS * LINE_BYTES;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int gid = lane >> 2, tig = lane & 3;
    // With KS > 1 the KS blocks of a cluster share rows row0.. and each
    // takes an even run of the lines (in_features % (512 KS) == 0).
    const int rank = (int)blockIdx.x % KS;
    const int row0 = (int)blockIdx.x / KS * R;
    const int lines = in_features / 256 / KS;   // this block's, from line L0 on
    const int L0 = rank * lines;
    const unsigned char* xlines = ws + (long long)L0 * XLINE_BYTES;

    if (threadIdx.x == 0) {
        for (int i = 0; i < NS; ++i) {
            kc_bar_init(kc_smem(&full[i]), 1);
            kc_bar_init(kc_smem(&empty[i]), WR);       // the warps that use the line
        }
        for (int i = 0; i < NSB; ++i) {
            kc_bar_init(kc_smem(&sfull[i]), 1);
            kc_bar_init(kc_smem(&sempty[i]), 2 * WR);  // theirs, for each of the two lines
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    if (warp == CW) {   // producer
#if KC_DIAG_NOFEED
        if (false) {   // diagnostic: the arithmetic alone, on whatever shared memory holds (outputs wrong)
#else
        if (lane == 0) {
#endif
            // The block's line L (L0 + L of the row): its weights and x into
            // slot L % NS; with an even L, the scales and biases of lines L
            // and L + 1 into slot (L / 2) % NSB.
            auto issue_sb = [&](int L) {
                const int u = L >> 1, slot = u % NSB;
#if KC_DIAG_RACE
                if (u >= NSB) kc_bar_wait(kc_smem(&sfull[slot]), ((u / NSB) - 1) & 1);   // its last copy landed
#else
                if (u >= NSB) kc_bar_wait(kc_smem(&sempty[slot]), ((u / NSB) - 1) & 1);
#endif
                const u32 bar = kc_smem(&sfull[slot]), dst = sbbase + slot * 2 * SB_BYTES;
                kc_bar_expect(bar, 2 * SB_BYTES);
                kc_tma2d(dst, &smap, (L0 / 2 + u) * 8, row0, bar);
                kc_tma2d(dst + SB_BYTES, &bmap, (L0 / 2 + u) * 8, row0, bar);
            };
            auto issue_w = [&](int L) {
                const int slot = L % NS;
#if KC_DIAG_RACE
                if (L >= NS) kc_bar_wait(kc_smem(&full[slot]), ((L / NS) - 1) & 1);   // its last copy landed
#else
                if (L >= NS) kc_bar_wait(kc_smem(&empty[slot]), ((L / NS) - 1) & 1);
#endif
                const u32 bar = kc_smem(&full[slot]);
                kc_bar_expect(bar, WLINE_BYTES + (KC_DIAG_NOX ? 0 : XLINE_BYTES));
                kc_tma2d(sbase + slot * LINE_BYTES, &wmap, (L0 + L) * 32, row0, bar);
            };
            auto issue_x = [&](int L) {
                if (KC_DIAG_NOX) return;   // diagnostic: x is never copied (outputs wrong)
                const int slot = L % NS;
                kc_bulk(sbase + slot * LINE_BYTES + WLINE_BYTES, xlines + (long long)L * XLINE_BYTES, XLINE_BYTES,
                        kc_smem(&full[slot]));
            };
            // The first lines' weights, scales and biases need nothing from
            // the kernels ahead: in flight before the grid wait.
            const int first = min(min(NS, lines), 2 * NSB);
            for (int L = 0; L < first; ++L) {
                if ((L & 1) == 0) issue_sb(L);
                issue_w(L);
            }
            kc_grid_wait();
            for (int L = 0; L < first; ++L) issue_x(L);
            for (int L = first; L < lines; ++L) {
                if ((L & 1) == 0) issue_sb(L);
                issue_w(L);
                issue_x(L);
            }
#if KC_DIAG_RACE
            // no copy may be in flight when the block ends
            for (int L = max(0, lines - NS); L < lines; ++L) kc_bar_wait(kc_smem(&full[L % NS]), (L / NS) & 1);
            for (int u = max(0, (lines + 1) / 2 - NSB); u < (lines + 1) / 2; ++u)
                kc_bar_wait(kc_smem(&sfull[u % NSB]), (u / NSB) & 1);
#endif
        }
        __syncwarp();
#if KS > 1
        kc_cluster_sync();   // the two cluster barriers of the epilogue (below), without relying
        kc_cluster_sync();   // on exited threads counting as arrived
#endif
        return;
    }

    const int r = warp % WR, kk = warp / WR;
    float acc[TT][NT][4];   // token tile, n-tile, the mma's four sums
#pragma unroll
    for (int tt = 0; tt < TT; ++tt)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[tt][j][e] = 0.f;
    const u32 neg1024 = 0xE400E400u;

    for (int L = kk; L < lines; L += WK) {   // this warp's lines (1-4 % faster than skipping the others')
        const int slot = L % NS, u = L >> 1, sslot = u % NSB, l = L & 1;
        {
#if !KC_DIAG_NOFEED && !KC_DIAG_RACE
            kc_bar_wait(kc_smem(&full[slot]), (L / NS) & 1);
            kc_bar_wait(kc_smem(&sfull[sslot]), (u / NSB) & 1);
#endif
#if KC_DIAG_NOMATH
            __syncwarp();   // diagnostic: the feed alone, each line released unread (outputs wrong)
            if (lane == 0) {
                kc_bar_arrive(kc_smem(&empty[slot]));
                kc_bar_arrive(kc_smem(&sempty[sslot]));
            }
            continue;
#endif
            const u32 wl = sbase + slot * LINE_BYTES;
            const u32 xl = wl + WLINE_BYTES;
            const u32 sc = sbbase + sslot * 2 * SB_BYTES, bi = sc + SB_BYTES;
            u32 q[NT][8], s2[NT], c2[NT];
            float tmp[TT][NT][4];
#pragma unroll
            for (int tt = 0; tt < TT; ++tt)
#pragma unroll
                for (int j = 0; j < NT; ++j)
#pragma unroll
                    for (int e = 0; e < 4; ++e) tmp[tt][j][e] = 0.f;
#pragma unroll
            for (int j = 0; j < NT; ++j) {
                const int row = (r * NT + j) * 8 + gid;
                const uint4 lo = kc_lds128(wl + row * 128 + (((2 * tig) ^ (row & 7)) << 4));
                const uint4 hi = kc_lds128(wl + row * 128 + (((2 * tig + 1) ^ (row & 7)) << 4));
                q[j][0] = lo.x; q[j][1] = lo.y; q[j][2] = lo.z; q[j][3] = lo.w;
                q[j][4] = hi.x; q[j][5] = hi.y; q[j][6] = hi.z; q[j][7] = hi.w;
                const float sf = kc_bf16(kc_lds16(sc + row * 16 + (4 * l + tig) * 2));
                s2[j] = kc_f16x2(sf, sf);
                c2[j] = kc_hmul2(s2[j], neg1024);
            }
#pragma unroll
            for (int w = 0; w < 8; ++w) {
                uint4 a0[TT], a1[TT];
#pragma unroll
                for (int tt = 0; tt < TT; ++tt) {
                    a0[tt] = kc_lds128(xl + tt * XTILE_BYTES + (2 * w) * 512 + lane * 16);
                    a1[tt] = kc_lds128(xl + tt * XTILE_BYTES + (2 * w + 1) * 512 + lane * 16);
                }
#pragma unroll
                for (int j = 0; j < NT; ++j) {
                    const u32 v = q[j][w], v8 = v >> 8;
                    const u32 b0 = kc_hfma2(kc_nib16<0x000F000Fu>(v), s2[j], c2[j]);
                    const u32 b1 = kc_hfma2(kc_nib16<0x00F000F0u>(v), s2[j], c2[j]);
#pragma unroll
                    for (int tt = 0; tt < TT; ++tt) kc_mma(tmp[tt][j], a0[tt], b0, b1);
                    const u32 b2 = kc_hfma2(kc_nib16<0x000F000Fu>(v8), s2[j], c2[j]);
                    const u32 b3 = kc_hfma2(kc_nib16<0x00F000F0u>(v8), s2[j], c2[j]);
#pragma unroll
                    for (int tt = 0; tt < TT; ++tt) kc_mma(tmp[tt][j], a1[tt], b2, b3);
                }
            }
            uint4 xsf[TT];
#pragma unroll
            for (int tt = 0; tt < TT; ++tt) xsf[tt] = kc_lds128(xl + tt * XTILE_BYTES + 16 * 512 + lane * 16);
#pragma unroll
            for (int j = 0; j < NT; ++j) {
                u32 bb = 0u;
                if (tig < 2) {
                    const int row = (r * NT + j) * 8 + gid;
                    const u32 pair = kc_lds32(bi + row * 16 + (4 * l + 2 * tig) * 2);
                    bb = kc_f16x2(kc_bf16(pair & 0xFFFFu), kc_bf16(pair >> 16));
                }
#pragma unroll
                for (int tt = 0; tt < TT; ++tt) kc_mma(tmp[tt][j], xsf[tt], bb, bb);   // XS high parts meet kslots 0..3, low parts 8..11
            }
            float sg0[TT], sg1[TT];
#pragma unroll
            for (int tt = 0; tt < TT; ++tt) {
                sg0[tt] = __uint_as_float(kc_lds32(xl + tt * XTILE_BYTES + 17 * 512 + gid * 4));
                sg1[tt] = __uint_as_float(kc_lds32(xl + tt * XTILE_BYTES + 17 * 512 + (gid + 8) * 4));
            }
            __syncwarp();
#if !KC_DIAG_RACE
            if (lane == 0) {
                kc_bar_arrive(kc_smem(&empty[slot]));
                kc_bar_arrive(kc_smem(&sempty[sslot]));
            }
#endif
#pragma unroll
            for (int tt = 0; tt < TT; ++tt)
#pragma unroll
                for (int j = 0; j < NT; ++j) {
                    acc[tt][j][0] = fmaf(sg0[tt], tmp[tt][j][0], acc[tt][j][0]);
                    acc[tt][j][1] = fmaf(sg0[tt], tmp[tt][j][1], acc[tt][j][1]);
                    acc[tt][j][2] = fmaf(sg1[tt], tmp[tt][j][2], acc[tt][j][2]);
                    acc[tt][j][3] = fmaf(sg1[tt], tmp[tt][j][3], acc[tt][j][3]);
                }
        }
    }

    kc_grid_release();   // after the loop: a dependent started earlier would only wait beside it
    // Sum the K warps' shares in shared memory (the ring is free: every
    // stage has been consumed; the barrier orders the last reads).
    asm volatile("bar.sync 1, %0;" :: "n"(CW * 32) : "memory");
    float* red = reinterpret_cast<float*>(smem_raw + (sbase - kc_smem(smem_raw)));   // [WK][16 TT][R]
#pragma unroll
    for (int tt = 0; tt < TT; ++tt)
#pragma unroll
        for (int j = 0; j < NT; ++j) {
            const int o = (r * NT + j) * 8 + 2 * tig;
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int t = 16 * tt + gid + 8 * (e >> 1), oo = o + (e & 1);
                red[(kk * 16 * TT + t) * R + oo] = acc[tt][j][e];
            }
        }
    asm volatile("bar.sync 1, %0;" :: "n"(CW * 32) : "memory");
    kc_grid_wait();   // long done (the producer waited before x); orders y after the kernels ahead
#if KS > 1
    // Each block of the cluster sums its K warps into its share; rank 0
    // adds the others' (distributed shared memory) and writes y. The
    // second barrier keeps every share alive until rank 0 has read it.
    float* share = red + WK * 16 * TT * R;
    for (int idx = threadIdx.x; idx < 16 * TT * R; idx += CW * 32) {
        float v = 0.f;
#pragma unroll
        for (int k2 = 0; k2 < WK; ++k2) v += red[k2 * 16 * TT * R + idx];
        share[idx] = v;
    }
    kc_cluster_sync();
    if (rank == 0) {
        for (int idx = threadIdx.x; idx < 16 * TT * R; idx += CW * 32) {
            const int t = idx / R, oo = idx - t * R, o = row0 + oo;
            if (t >= tokens || o >= out_features) continue;
            float v = share[idx];
#pragma unroll
            for (int q = 1; q < KS; ++q) v += kc_ld_cluster(kc_cluster_addr(kc_smem(share + idx), q));
            if (bias != nullptr) v += kc_bf16(bias[o]);
            u16 h;
            asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(v));
            y[(long long)t * out_features + o] = h;
        }
    }
    kc_cluster_sync();
#else
    for (int idx = threadIdx.x; idx < 16 * TT * R; idx += CW * 32) {
        const int t = idx / R, oo = idx - t * R, o = row0 + oo;
        if (t >= tokens || o >= out_features) continue;
        float v = 0.f;
#pragma unroll
        for (int k2 = 0; k2 < WK; ++k2) v += red[(k2 * 16 * TT + t) * R + oo];
        if (bias != nullptr) v += kc_bf16(bias[o]);
        u16 h;
        asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(v));
        y[(long long)t * out_features + o] = h;
    }
#endif
}
