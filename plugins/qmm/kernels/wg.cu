// wg.cu: EXPERIMENTAL wgmma (sm_90a) kernel for the affine family at many
// tokens, int4 group 64 only. Not wired into the plugin yet: it is exercised
// by `python3 scripts/affine_kernels.py --wg` (correctness, then timing).
//
//   y[t][o] = sum_i x[t][i] * (scale[o][i/64] * q[o][i] + biases[o][i/64])  (+ bias[o])
//
// Two entry points, launched in this order on one stream:
//   affine_wg_prep(x, xp, xsum, tokens, in_features)
//     grid (ceil(tokens/BN), in/64), block BN: one thread per (token, group)
//     writes x in the B-operand layout below (permuted to match the A
//     unpacking) and per-group x sums in fp32. Tokens past the end are zeros.
//   affine_wg(xp, xsum, weight, scales, biases, bias, y, tokens, in, out)
//     grid (ceil(out/64), ceil(tokens/BN)), block 128 (one warpgroup), dynamic
//     shared memory STAGES*STAGE_BYTES.
// Workspace: xp  = ceil(tokens/BN)*BN * in * 2 bytes,
//            xsum = ceil(tokens/BN)*BN * (in/64) * 4 bytes.
//
// METHOD
//   A (weights, 64 rows per CTA) comes from registers: each warp owns 16
//   rows with the mma.m16n8k16 A fragment; a lane's quad position tig owns a
//   16-value run of each group and unpacks it exactly as stream.cu does:
//   lop3(w >> 4j, 0x000F000F, 0x43004300) = bf16 pair (128+v_j, 128+v_j+4).
//   B (x) is in shared memory without swizzle, as 8x8 core matrices (8
//   tokens x 8 k, 16 bytes per token): LBO (next 8 k) = 128 B, SBO (next 8
//   tokens) = 256 B; one k16 step of BN tokens is BN*32 bytes. The prep
//   kernel writes x already permuted so that slot k of step s holds the x
//   value the A fragment pairs with it. Per group, four wgmma m64nBNk16
//   accumulate into a group accumulator t; after wgmma.wait_group 0 it is
//   folded as acc += s*t + (b - 128*s)*xsum. Other CTAs on the SM overlap
//   their wgmmas with this one's fold. (Folding the previous group while
//   the next one's wgmmas run, with two accumulator sets, made ptxas
//   serialise the wgmmas and was no faster.)
//
// STATUS (H200, bench/NOTES.md): correct on 15 cases (tokens 33..300, odd
// shapes, bias), but 0.27-0.33x torch bf16 at 256 and 4096 tokens, about
// what the tiled mma.sync kernel reaches; the per-group wait + fold and two
// block barriers per group leave the tensor cores mostly idle.
//
// MACROS: BN (64 or 128), STAGES (>= 3: the group being multiplied, the one
// last folded, and STAGES-2 in flight), APF (groups of A words and scales
// loaded ahead into a register ring).

typedef unsigned int u32;
typedef unsigned short u16;
typedef unsigned long long u64;

#ifndef BN
#define BN 128
#endif
#ifndef STAGES
#define STAGES 5
#endif
#if STAGES < 3
#error "STAGES must be at least 3"
#endif
#ifndef APF
#define APF 8   // groups of A words and scales in flight ahead
#endif
#define GROUP 64
#define STEP_BYTES (BN * 32)                 // one k16 step of B
#define XT_BYTES (4 * STEP_BYTES)            // one group of B
#define STAGE_BYTES (XT_BYTES + BN * 4)      // B plus the group's x sums
#define NACC (BN / 2)                        // fp32 accumulators per thread

#define KC_DEV __device__ __forceinline__
struct alignas(16) kc_u4 { u32 x, y, z, w; };

KC_DEV float kc_bf16(u32 h) { return __uint_as_float(h << 16); }
KC_DEV u32 kc_prmt(u32 a, u32 b, u32 sel) {
    u32 d;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
    return d;
}
KC_DEV u32 kc_nib(u32 w, int j) {
    u32 d;
    const u32 v = w >> (4 * j);
    asm("lop3.b32 %0, %1, 0x000F000F, 0x43004300, 0xEA;" : "=r"(d) : "r"(v));
    return d;
}

// ---------------------------------------------------------------------------
// Prep: x [tokens][in] -> xp [tile][group][step 0..3][nb][kb 0..1][r 0..7][8]
// (bf16), xsum [tile*BN + n][group] (fp32).
// Step s, slot k (0..15) holds x[grp*64 + a], a = 16*((k&7)>>1) + 8*(s>>1)
// + 2*(s&1) + (k>>3) + 4*(k&1): the value the A pair of lane tig = (k&7)>>1
// puts in that slot (see stream.cu).
extern "C" __global__ void __launch_bounds__(BN)
affine_wg_prep(const u16* __restrict__ x, u16* __restrict__ xp, float* __restrict__ xsum,
               int tokens, int in_features)
{
    const int n = threadIdx.x;
    const int tile = blockIdx.x;
    const int grp = blockIdx.y;
    const int groups = in_features / GROUP;
    const int tok = tile * BN + n;
    u32 w[32];
    if (tok < tokens) {
        const kc_u4* src = reinterpret_cast<const kc_u4*>(x + (long long)tok * in_features + grp * GROUP);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const kc_u4 v = src[i];
            w[4 * i] = v.x; w[4 * i + 1] = v.y; w[4 * i + 2] = v.z; w[4 * i + 3] = v.w;
        }
    } else {
#pragma unroll
        for (int i = 0; i < 32; ++i) w[i] = 0u;
    }
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < 32; ++i) s += __uint_as_float(w[i] << 16) + __uint_as_float(w[i] & 0xFFFF0000u);
    xsum[(long long)tok * groups + grp] = s;

    unsigned char* base = reinterpret_cast<unsigned char*>(xp) + ((long long)tile * groups + grp) * XT_BYTES;
    const int nb = n >> 3, r = n & 7;
#pragma unroll
    for (int st = 0; st < 4; ++st) {
        const int b = 8 * (st >> 1) + 2 * (st & 1);   // even: pairs (b + 16t, b + 16t + 4)
        // Word holding x[a] is w[a/2]; a = b + 16t (+4) with b even, so x[a]
        // is the low half of w[(b+16t)/2] and x[a+1] its high half.
        u32 lo[4], hi[4];
#pragma unroll
        for (int t = 0; t < 4; ++t) {
            const u32 p = w[(b + 16 * t) / 2], q = w[(b + 16 * t + 4) / 2];
            lo[t] = kc_prmt(p, q, 0x5410);   // (x[a], x[a+4])        slots 2t, 2t+1
            hi[t] = kc_prmt(p, q, 0x7632);   // (x[a+1], x[a+5])      slots 8+2t, 8+2t+1
        }
        unsigned char* dst = base + st * STEP_BYTES + nb * 256 + r * 16;
        *reinterpret_cast<kc_u4*>(dst) = kc_u4{lo[0], lo[1], lo[2], lo[3]};
        *reinterpret_cast<kc_u4*>(dst + 128) = kc_u4{hi[0], hi[1], hi[2], hi[3]};
    }
}

// ---------------------------------------------------------------------------
KC_DEV u32 kc_smem(const void* p) { return (u32)__cvta_generic_to_shared(p); }
KC_DEV void kc_cp16(u32 dst, const void* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(dst), "l"(src) : "memory");
}
KC_DEV void kc_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> KC_DEV void kc_wait() { asm volatile("cp.async.wait_group %0;" :: "n"(N) : "memory"); }

// Shared-memory matrix descriptor: no swizzle, LBO 128 B (k), SBO 256 B (n).
KC_DEV u64 kc_desc(u32 saddr) {
    return (u64)((saddr & 0x3FFFF) >> 4) | ((u64)(128 >> 4) << 16) | ((u64)(256 >> 4) << 32);
}

#define KC_WG_FENCE() asm volatile("wgmma.fence.sync.aligned;" ::: "memory")
// Keeps the compiler from moving accumulator registers across async wgmma.
template <int N> KC_DEV void kc_fence_operands(float (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i]) :: "memory");
}
#define KC_WG_COMMIT() asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory")
template <int N> KC_DEV void kc_wg_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"(N) : "memory"); }

#if BN == 128
#define KC_WG_ACC_LIST \
    "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31," \
    "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}"
#define KC_WG_A "{%64,%65,%66,%67}"
#define KC_WG_REST "%68, p, 1, 1, 0;"
#define KC_WG_P "%69"
#define KC_WG_SHAPE "m64n128k16"
#define KC_ACC_OUT(d) \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
    "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
    "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
    "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
    "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
    "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
    "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
    "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#else
#define KC_WG_ACC_LIST \
    "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}"
#define KC_WG_A "{%32,%33,%34,%35}"
#define KC_WG_REST "%36, p, 1, 1, 0;"
#define KC_WG_P "%37"
#define KC_WG_SHAPE "m64n64k16"
#define KC_ACC_OUT(d) \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
    "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
    "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
    "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#endif

// d (+)= A(regs) * B(desc); accumulate unless first.
KC_DEV void kc_wgmma(float (&d)[NACC], u32 a0, u32 a1, u32 a2, u32 a3, u64 desc, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, " KC_WG_P ", 0;\n"
        "wgmma.mma_async.sync.aligned." KC_WG_SHAPE ".f32.bf16.bf16 " KC_WG_ACC_LIST ", " KC_WG_A ", " KC_WG_REST "\n}\n"
        : KC_ACC_OUT(d)
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc), "r"(accumulate));
}

extern "C" __global__ void __launch_bounds__(128, 1)
affine_wg(const u16* __restrict__ xp, const float* __restrict__ xsum, const u32* __restrict__ weight,
          const u16* __restrict__ scales, const u16* __restrict__ biases, const u16* __restrict__ bias,
          u16* __restrict__ y, int tokens, int in_features, int out_features)
{
    extern __shared__ __align__(128) unsigned char smem[];
    const int tid = threadIdx.x;
    const int lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, tig = lane & 3;
    const int groups = in_features / GROUP;
    const int row0 = blockIdx.x * 64;
    const int tile = blockIdx.y;
    const int r0 = min(row0 + 16 * warp + g, out_features - 1), r1 = min(r0 + 8, out_features - 1);
    const long long row_words = in_features / 8;
    const u32* w0p = weight + r0 * row_words + tig * 2;
    const u32* w1p = weight + r1 * row_words + tig * 2;
    const unsigned char* xsrc = reinterpret_cast<const unsigned char*>(xp) + (long long)tile * groups * XT_BYTES;
    const float* ssrc = xsum + (long long)tile * BN * groups;
    const u32 sbase = kc_smem(smem);

    // Stage group grp into ring slot: the B tile (XT_BYTES) and BN x sums.
    auto issue = [&](int slot, int grp) {
        const u32 dst = sbase + slot * STAGE_BYTES;
        const unsigned char* src = xsrc + (long long)grp * XT_BYTES;
#pragma unroll
        for (int i = 0; i < XT_BYTES / 16 / 128; ++i)
            kc_cp16(dst + (tid + 128 * i) * 16, src + (tid + 128 * i) * 16);
        // x sums: xsum is [token][group]; gather BN floats with 4-byte copies.
        for (int n = tid; n < BN; n += 128)
            asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" :: "r"(dst + XT_BYTES + 4 * n),
                         "l"(ssrc + (long long)n * groups + grp) : "memory");
    };

    float acc[NACC], ga[NACC];
#pragma unroll
    for (int i = 0; i < NACC; ++i) acc[i] = 0.f;

    // Ring of STAGES slots; STAGES-2 groups are in flight ahead. (Two slots
    // stay out of the ring's way: the group being multiplied and the one
    // before, which the overlapping variant folded while grp ran.)
#pragma unroll
    for (int s = 0; s < STAGES - 2; ++s) {
        if (s < groups) issue(s, s);
        kc_commit();
    }

    // Fold group accumulator t (finished) with the scales of its rows and the
    // x sums in slot.
    auto fold = [&](const float (&t)[NACC], u32 s0b, u32 s1b, u32 b0b, u32 b1b, int slot) {
        const float s0 = kc_bf16(s0b), s1 = kc_bf16(s1b);
        const float c0 = fmaf(-128.f, s0, kc_bf16(b0b)), c1 = fmaf(-128.f, s1, kc_bf16(b1b));
        const float* xs = reinterpret_cast<const float*>(smem + slot * STAGE_BYTES + XT_BYTES);
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
            const float2 v = *reinterpret_cast<const float2*>(xs + 8 * j + 2 * tig);
            acc[4 * j + 0] = fmaf(s0, t[4 * j + 0], fmaf(c0, v.x, acc[4 * j + 0]));
            acc[4 * j + 1] = fmaf(s0, t[4 * j + 1], fmaf(c0, v.y, acc[4 * j + 1]));
            acc[4 * j + 2] = fmaf(s1, t[4 * j + 2], fmaf(c1, v.x, acc[4 * j + 2]));
            acc[4 * j + 3] = fmaf(s1, t[4 * j + 3], fmaf(c1, v.y, acc[4 * j + 3]));
        }
    };

    // No overlap inside the warpgroup: multiply, wait, fold; other CTAs on
    // the SM keep the tensor cores busy meanwhile. A words and scales come
    // APF groups ahead (a register ring, indexed statically by unrolling).
    uint2 ra0[APF], ra1[APF];
    u32 rs0[APF], rs1[APF], rb0[APF], rb1[APF];
#pragma unroll
    for (int u = 0; u < APF; ++u) {
        const int gq = min(u, groups - 1);
        ra0[u] = *reinterpret_cast<const uint2*>(w0p + gq * 8);
        ra1[u] = *reinterpret_cast<const uint2*>(w1p + gq * 8);
        rs0[u] = scales[(long long)r0 * groups + gq]; rs1[u] = scales[(long long)r1 * groups + gq];
        rb0[u] = biases[(long long)r0 * groups + gq]; rb1[u] = biases[(long long)r1 * groups + gq];
    }
    for (int grp0 = 0; grp0 < groups; grp0 += APF) {
#pragma unroll
        for (int u = 0; u < APF; ++u) {
            const int grp = grp0 + u;
            if (grp < groups) {
                const int slot = grp % STAGES;
                if (grp + STAGES - 2 < groups) issue((grp + STAGES - 2) % STAGES, grp + STAGES - 2);
                kc_commit();
                kc_wait<STAGES - 2>();
                asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
                __syncthreads();
                const uint2 c0 = ra0[u], c1 = ra1[u];
                const u32 cs0 = rs0[u], cs1 = rs1[u], cb0 = rb0[u], cb1 = rb1[u];
                const int gn = grp + APF;
                if (gn < groups) {
                    ra0[u] = *reinterpret_cast<const uint2*>(w0p + gn * 8);
                    ra1[u] = *reinterpret_cast<const uint2*>(w1p + gn * 8);
                    rs0[u] = scales[(long long)r0 * groups + gn]; rs1[u] = scales[(long long)r1 * groups + gn];
                    rb0[u] = biases[(long long)r0 * groups + gn]; rb1[u] = biases[(long long)r1 * groups + gn];
                }
                const u32 bstep = sbase + slot * STAGE_BYTES;
                kc_fence_operands(ga);
                KC_WG_FENCE();
#pragma unroll
                for (int st = 0; st < 4; ++st) {
                    const u32 wr0 = (st < 2) ? c0.x : c0.y, wr1 = (st < 2) ? c1.x : c1.y;
                    const int j = 2 * (st & 1);
                    kc_wgmma(ga, kc_nib(wr0, j), kc_nib(wr1, j), kc_nib(wr0, j + 1), kc_nib(wr1, j + 1),
                             kc_desc(bstep + st * STEP_BYTES), st);
                }
                KC_WG_COMMIT();
                kc_wg_wait<0>();
                kc_fence_operands(ga);
                fold(ga, cs0, cs1, cb0, cb1, slot);
                __syncthreads();
            }
        }
    }

    // Store: element 4j+e is row r0 (e < 2) or r1, token tile*BN + 8j + 2tig + (e&1).
    const int rows[2] = {row0 + 16 * warp + g, row0 + 16 * warp + g + 8};
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int row = rows[e >> 1];
            const int tok = tile * BN + 8 * j + 2 * tig + (e & 1);
            if (row < out_features && tok < tokens) {
                float v = acc[4 * j + e];
                if (bias != nullptr) v += kc_bf16(bias[row]);
                u16 h;
                asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(v));
                y[(long long)tok * out_features + row] = h;
            }
        }
}
