// wg.cu: wgmma (sm_90a) kernel for the affine family at many tokens, int4
// group 64: QMM's Hopper candidate (plugins/qmm/wgmma.go). Checked and timed
// standalone by `python3 scripts/affine_kernels.py --wg`.
//
//   y[t][o] = sum_i x[t][i] * (scale[o][i/64] * q[o][i] + biases[o][i/64])  (+ bias[o])
//
// Two entry points, launched in this order on one stream:
//   affine_wg_prep(x, xp, tokens, in_features)
//     grid (ceil(tokens/BN), in/64), block BN: one thread per (token, group).
//     Writes one STAGE_BYTES block per (token tile, group): x in the
//     B-operand layout below (permuted to match the A unpacking), then the
//     BN per-token sums of the group's x in fp32. Tokens past the end are 0.
//   affine_wg(xp, weight, scales, biases, bias, y, tokens, in, out, band)
//     grid (ceil(out/ROWS) * ceil(tokens/BN)), block THREADS, dynamic shared
//     memory SMEM_BYTES; blocks are rastered in bands of `band` row blocks.
// Workspace: xp = ceil(tokens/BN) * (in/64) * STAGE_BYTES bytes.
// Needs in_features a multiple of 128 (scales are copied in pairs of
// groups, so at least two groups) and band >= 1.
//
// METHOD
//   Warp specialised, no block barrier in the main loop. The last
//   warpgroup produces (and gives its registers to the consumers with
//   setmaxnreg): its first warp streams the token tile's x stages into a
//   ring of STAGES slots with one bulk copy each (cp.async.bulk, completion
//   counted on the slot's "full" mbarrier); its second warp copies weight
//   words, scales and biases of AG groups for the block's ROWS rows into a
//   ring of AST slots with 16-byte cp.async (coalesced, 16 lanes per row).
//   A slot is refilled once every consumer warp has arrived on its "empty"
//   mbarrier. WGS consumer warpgroups each own 64 rows and share the x tile.
//   A (weights) comes from registers: each warp owns 16 rows with the
//   mma.m16n8k16 A fragment; a lane's quad position tig owns a 16-value run
//   of each group and unpacks it exactly as stream.cu does:
//   lop3(w >> 4j, 0x000F000F, 0x43004300) = bf16 pair (128+v_j, 128+v_j+4).
//   The next group's words and scales are read from shared memory while
//   this group's wgmmas run.
//   B (x) is in shared memory without swizzle, as 8x8 core matrices (8
//   tokens x 8 k, 16 bytes per token): LBO (next 8 k) = 128 B, SBO (next 8
//   tokens) = 256 B; one k16 step of BN tokens is BN*32 bytes. Per group,
//   four wgmma m64nBNk16 accumulate into a group accumulator t; after
//   wgmma.wait_group 0 it is folded exactly as acc += s*t + (b - 128*s)*xsum.
//   While one warpgroup folds, the other's wgmmas keep the tensor cores busy.
//
// COST (H200, bench/NOTES.md): the consumers are issue bound; the fold's
// two FFMA per accumulator per group are about half of the loop's
// instructions.
//
// MACROS: BN (64 or 128 tokens per CTA), STAGES (>= 2 x slots), WGS (1..3
// consumer warpgroups, 64 rows each), AST (weight slots of AG = 8 groups).

typedef unsigned int u32;
typedef unsigned short u16;
typedef unsigned long long u64;

#ifndef BN
#define BN 128
#endif
#ifndef STAGES
#define STAGES 4
#endif
#if STAGES < 2
#error "STAGES must be at least 2"
#endif
#ifndef WGS
#define WGS 2
#endif
#if BN != 64 && BN != 128
#error "BN must be 64 or 128 (the wgmma shapes written out below)"
#endif
#if WGS < 1 || WGS > 3
#error "WGS must be 1, 2 or 3"
#endif
#ifndef AST
#define AST 2   // weight stages (AG groups each) in the ring
#endif
#if AST < 2
#error "AST must be at least 2: a consumer releases a weight stage only after reading the next one's first group"
#endif
#define GROUP 64
#define STEP_BYTES (BN * 32)                 // one k16 step of B
#define XT_BYTES (4 * STEP_BYTES)            // one group of B
#define STAGE_BYTES (XT_BYTES + BN * 4)      // B plus the group's x sums
#define NACC (BN / 2)                        // fp32 accumulators per thread
#define ROWS (64 * WGS)                      // weight rows per CTA
#define AG 8                                 // groups per weight stage
#define AROW_BYTES (AG * 32 + 32)            // one row of a weight stage, padded against bank conflicts
#define ASCALE_OFF (ROWS * AROW_BYTES)        // then scales [ROWS][AG] and biases [ROWS][AG], bf16
#define ASTAGE_BYTES (ROWS * (AROW_BYTES + 4 * AG))
#define SMEM_BYTES (STAGES * STAGE_BYTES + AST * ASTAGE_BYTES)
#define THREADS (WGS * 128 + 128)            // consumers, then the producer warpgroup
#define PRODUCER_REGS 40
#define CONSUMER_REGS_RAW ((65536 - 128 * PRODUCER_REGS) / (128 * WGS) / 8 * 8)
#define CONSUMER_REGS (CONSUMER_REGS_RAW > 240 ? 240 : CONSUMER_REGS_RAW)

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
// Prep: x [tokens][in] -> per (tile, group) block:
//   [step 0..3][nb][kb 0..1][r 0..7][8] bf16, then float xsum[BN].
// Step s, slot k (0..15) holds x[grp*64 + a], a = 16*((k&7)>>1) + 8*(s>>1)
// + 2*(s&1) + (k>>3) + 4*(k&1): the value the A pair of lane tig = (k&7)>>1
// puts in that slot (see stream.cu).
extern "C" __global__ void __launch_bounds__(BN)
affine_wg_prep(const u16* __restrict__ x, unsigned char* __restrict__ xp, int tokens, int in_features)
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

    unsigned char* base = xp + ((long long)tile * groups + grp) * STAGE_BYTES;
    reinterpret_cast<float*>(base + XT_BYTES)[n] = s;
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

// mbarrier and bulk-copy wrappers (PTX ISA 8.0, sm_90).
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
KC_DEV void kc_bulk(u32 dst, const void* src, u32 bytes, u32 bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 :: "r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}

KC_DEV void kc_cp16(u32 dst, const void* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(dst), "l"(src) : "memory");
}
KC_DEV void kc_cp4(u32 dst, const void* src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" :: "r"(dst), "l"(src) : "memory");
}
// Arrives on bar once this thread's earlier cp.async copies have landed.
KC_DEV void kc_cp_arrive(u32 bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" :: "r"(bar) : "memory");
}

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
// Orders the A fragment registers' writes before what follows.
template <int N> KC_DEV void kc_fence_words(u32 (&a)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+r"(a[i]) :: "memory");
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

extern "C" __global__ void __launch_bounds__(THREADS, 1)
affine_wg(const unsigned char* __restrict__ xp, const u32* __restrict__ weight,
          const u16* __restrict__ scales, const u16* __restrict__ biases, const u16* __restrict__ bias,
          u16* __restrict__ y, int tokens, int in_features, int out_features, int band)
{
    extern __shared__ __align__(128) unsigned char smem[];
    // full[STAGES], empty[STAGES] for x; afull[AST], aempty[AST] for weights
    __shared__ __align__(8) u64 bars[2 * STAGES + 2 * AST];
    const int tid = threadIdx.x;
    const int lane = tid & 31, warp = tid >> 5;
    const int groups = in_features / GROUP;

    // Raster: bands of `band` row blocks; inside a band, row blocks vary
    // fastest, so the CTAs running together share x tiles and weight rows.
    const int row_blocks = (out_features + ROWS - 1) / ROWS;
    const int tiles = (tokens + BN - 1) / BN;
    const int per_band = band * tiles;
    const int bid = blockIdx.x / per_band, rem = blockIdx.x - bid * per_band;
    const int bsz = min(band, row_blocks - bid * band);
    const int row0 = (bid * band + rem % bsz) * ROWS, tile = rem / bsz;

    const u32 sbase = kc_smem(smem), abase = sbase + STAGES * STAGE_BYTES;
    const u32 full0 = kc_smem(&bars[0]), empty0 = full0 + 8 * STAGES;
    const u32 afull0 = empty0 + 8 * STAGES, aempty0 = afull0 + 8 * AST;
    if (tid == 0) {
        for (int s = 0; s < STAGES; ++s) {
            kc_bar_init(full0 + 8 * s, 1);
            kc_bar_init(empty0 + 8 * s, WGS * 4);
        }
        for (int s = 0; s < AST; ++s) {
            kc_bar_init(afull0 + 8 * s, 32);
            kc_bar_init(aempty0 + 8 * s, WGS * 4);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    if (warp >= WGS * 4) {
        // Producer warpgroup: its first warp streams x, its second the
        // weights; each refills a slot once every consumer warp has released
        // the slot's previous use.
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" :: "n"(PRODUCER_REGS));
        if (warp == WGS * 4) {
            // x: one bulk copy per group, issued by one lane.
            if (lane == 0) {
                const unsigned char* xsrc = xp + (long long)tile * groups * STAGE_BYTES;
                for (int g = 0; g < groups; ++g) {
                    const int s = g % STAGES;
                    if (g >= STAGES) kc_bar_wait(empty0 + 8 * s, ((g / STAGES) + 1) & 1);
                    kc_bar_expect(full0 + 8 * s, STAGE_BYTES);
                    kc_bulk(sbase + s * STAGE_BYTES, xsrc + (long long)g * STAGE_BYTES, STAGE_BYTES, full0 + 8 * s);
                }
            }
        } else if (warp == WGS * 4 + 1) {
            // Weights, scales and biases of AG groups per stage, by cp.async
            // from all 32 lanes (16 lanes per 256-byte row of words); each
            // lane's arrival on afull fires once its copies have landed.
            // Rows past the end repeat the last row.
            const unsigned char* wsrc = reinterpret_cast<const unsigned char*>(weight);
            const long long row_bytes = in_features / 2;
            for (int g = 0; g < groups; g += AG) {
                const int h = g / AG, as = h % AST, ng = min(AG, groups - g);
                if (h >= AST) kc_bar_wait(aempty0 + 8 * as, ((h / AST) + 1) & 1);
                const u32 dst = abase + as * ASTAGE_BYTES;
                const unsigned char* src = wsrc + g * 32;
                if (ng == AG) {
#pragma unroll 8
                    for (int c = lane; c < ROWS * 2 * AG; c += 32) {
                        const int r = c / (2 * AG), k = c % (2 * AG);
                        const long long row = min(row0 + r, out_features - 1);
                        kc_cp16(dst + r * AROW_BYTES + k * 16, src + row * row_bytes + k * 16);
                    }
                } else {
                    for (int c = lane; c < ROWS * 2 * ng; c += 32) {
                        const int r = c / (2 * ng), k = c % (2 * ng);
                        const long long row = min(row0 + r, out_features - 1);
                        kc_cp16(dst + r * AROW_BYTES + k * 16, src + row * row_bytes + k * 16);
                    }
                }
                // Scales then biases, [ROWS][AG] each: 16-byte copies when
                // every row's run is 16-byte aligned, else 4-byte ones
                // (groups is even, so each pair of groups is).
                const u32 sdst = dst + ASCALE_OFF;
                if (groups % 8 == 0) {
                    for (int c = lane; c < 2 * ROWS; c += 32) {
                        const int arr = c / ROWS, r = c % ROWS;
                        const long long row = min(row0 + r, out_features - 1);
                        kc_cp16(sdst + (arr * ROWS + r) * (2 * AG), (arr ? biases : scales) + row * groups + g);
                    }
                } else {
                    const int pairs = ng / 2;
                    for (int c = lane; c < 2 * ROWS * pairs; c += 32) {
                        const int arr = c / (ROWS * pairs), rr = c % (ROWS * pairs);
                        const int r = rr / pairs, k = rr % pairs;
                        const long long row = min(row0 + r, out_features - 1);
                        kc_cp4(sdst + (arr * ROWS + r) * (2 * AG) + 4 * k, (arr ? biases : scales) + row * groups + g + 2 * k);
                    }
                }
                kc_cp_arrive(afull0 + 8 * as);
            }
        }
        return;
    }

    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" :: "n"(CONSUMER_REGS));
    const int wg = warp >> 2, wi = warp & 3;
    const int g8 = lane >> 2, tig = lane & 3;
    const int rl0 = 64 * wg + 16 * wi + g8;          // local rows rl0 and rl0 + 8
    const int rbase = row0 + rl0;
    const unsigned char* abuf = smem + STAGES * STAGE_BYTES;
    // This lane's words of group c for rows rl0 (.x .y) and rl0 + 8 (.z .w).
    auto words = [&](int c) {
        const unsigned char* a = abuf + ((c / AG) % AST) * ASTAGE_BYTES + rl0 * AROW_BYTES + (c % AG) * 32 + tig * 8;
        const uint2 lo = *reinterpret_cast<const uint2*>(a);
        const uint2 hi = *reinterpret_cast<const uint2*>(a + 8 * AROW_BYTES);
        return uint4{lo.x, lo.y, hi.x, hi.y};
    };
    // Scales (.x rl0, .y rl0 + 8) and biases (.z, .w) of group c.
    auto scaling = [&](int c) {
        const unsigned char* a = abuf + ((c / AG) % AST) * ASTAGE_BYTES + ASCALE_OFF + rl0 * (2 * AG) + (c % AG) * 2;
        const u16* p = reinterpret_cast<const u16*>(a);
        const int row8 = 8 * AG, arr = ROWS * AG;   // in u16 units
        return uint4{p[0], p[row8], p[arr], p[arr + row8]};
    };

    float acc[NACC], ga[NACC];
#pragma unroll
    for (int i = 0; i < NACC; ++i) acc[i] = 0.f;

    // Fold group accumulator t (finished) with its rows' scales and the x
    // sums in slot.
    auto fold = [&](const float (&t)[NACC], const uint4 sc, int slot) {
        const float s0 = kc_bf16(sc.x), s1 = kc_bf16(sc.y);
        const float c0 = fmaf(-128.f, s0, kc_bf16(sc.z)), c1 = fmaf(-128.f, s1, kc_bf16(sc.w));
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

    kc_bar_wait(afull0, 0);
    uint4 next = words(0), next_sc = scaling(0);
    int slot = 0;
    u32 phase = 0;   // of the x slot's "full" barrier
    for (int grp = 0; grp < groups; ++grp) {
        const uint4 cw = next, sc = next_sc;
        // Unpack all four k16 fragments before wgmma.fence: registers written
        // after the fence and read by a wgmma would have ptxas serialise it.
        u32 fa[16];
#pragma unroll
        for (int st = 0; st < 4; ++st) {
            const u32 wr0 = (st < 2) ? cw.x : cw.y, wr1 = (st < 2) ? cw.z : cw.w;
            const int j = 2 * (st & 1);
            fa[4 * st + 0] = kc_nib(wr0, j);
            fa[4 * st + 1] = kc_nib(wr1, j);
            fa[4 * st + 2] = kc_nib(wr0, j + 1);
            fa[4 * st + 3] = kc_nib(wr1, j + 1);
        }
        kc_bar_wait(full0 + 8 * slot, phase);
        const u32 bstep = sbase + slot * STAGE_BYTES;
        kc_fence_words(fa);
        kc_fence_operands(ga);
        KC_WG_FENCE();
#pragma unroll
        for (int st = 0; st < 4; ++st)
            kc_wgmma(ga, fa[4 * st], fa[4 * st + 1], fa[4 * st + 2], fa[4 * st + 3],
                     kc_desc(bstep + st * STEP_BYTES), st);
        KC_WG_COMMIT();
        // While the wgmmas run: the next group's words and scales, and the
        // weight stage released once its last group is in registers.
        if (grp + 1 < groups) {
            const int h = (grp + 1) / AG;
            if ((grp + 1) % AG == 0) kc_bar_wait(afull0 + 8 * (h % AST), (h / AST) & 1);
            next = words(grp + 1);
            next_sc = scaling(grp + 1);
        }
        if (grp % AG == AG - 1 || grp == groups - 1) {
            __syncwarp();
            if (lane == 0) kc_bar_arrive(aempty0 + 8 * ((grp / AG) % AST));
        }
        kc_wg_wait<0>();
        kc_fence_operands(ga);
        fold(ga, sc, slot);
        __syncwarp();
        if (lane == 0) kc_bar_arrive(empty0 + 8 * slot);
        if (++slot == STAGES) {
            slot = 0;
            phase ^= 1u;
        }
    }

    // Store: element 4j+e is row rbase (e < 2) or rbase + 8, token
    // tile*BN + 8j + 2tig + (e&1).
    const int rows[2] = {rbase, rbase + 8};
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
