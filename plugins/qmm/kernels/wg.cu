// wg.cu: wgmma (sm_90a) kernel for the affine family at many tokens, 2-,
// 3-, 4-, 5-, 6- or 8-bit weights (BITS) in quantisation groups of 32, 64
// or 128 (QGROUP): QMM's Hopper candidate
// (plugins/qmm/wgmma.go). Checked and timed standalone by
// `python3 scripts/affine_kernels.py --wg`.
//
//   y[t][o] = sum_i x[t][i] * (scale[o][i/QGROUP] * q[o][i] + biases[o][i/QGROUP])  (+ bias[o])
//
// Entry points, launched in this order on one stream (the main kernel and
// the reduction with early start: see kc_grid_wait):
//   affine_wg_xprep(x, ws, tokens, in_features, out_features, splits, row_first, counters)
//     grid (ceil(tokens/BN) * BN / XPREP_TOKENS), block XPREP_THREADS,
//     dynamic shared memory XPREP_TOKENS * in_features * 2 bytes (so
//     in_features <= 57344 fits). Reads x once: each token's power-of-two
//     scale sigma, with max|x| / sigma in [2^14, 2^15), so that x / sigma
//     fits fp16 and keeps every value within 2^-28 of the token's largest
//     exact; then one STAGE_BYTES block per (token tile, group): x / sigma
//     in fp16, in the B-operand layout below (permuted to match the A
//     unpacking). Tokens past the end are 0. With splits > 1 it also
//     clears the tokens' split-K sums (the slices of two shares) of
//     outputs row_first and up; its block 0 clears `counters` ints,
//     stream-K's tile counters and its ticket (0: none).
//   affine_wg(ws, weight, scales, biases, bias, y, tokens, in, out, band, splits, full, sk)
//     grid (full + (T - full) * splits), or with stream-K (sk > 0) full +
//     sk, with T = ceil(out/ROWS) * ceil(tokens/BN) tiles, block THREADS,
//     dynamic shared memory SMEM_BYTES. Tiles are rastered in bands of
//     `band` row blocks; the first `full` tiles (whole waves) take one
//     block each and write y; each later tile takes `splits` blocks, split
//     s computing the s-th share of the groups (whole weight stages) and
//     adding its fp32 share into slice s/2 of the sums (red.global.add):
//     a slice takes at most two shares, and two additions onto zero give
//     the same bits in either order (a + b = b + a), so the sums do not
//     depend on which share finished first. With an odd number of shares
//     the last, which always has groups, stores its slice alone. Compiled with
//     CLUSTER = splits, the shares of a tile are instead one thread-block
//     cluster (so full is a multiple of CLUSTER and every share has
//     groups) that adds them in shared memory and writes y itself.
//     Compiled with STREAMK and given sk > 0 (splits 1, no CLUSTER), the
//     sk blocks after the first `full` share the later tiles' weight
//     stages evenly as one run instead, each at most part of two tiles
//     (T - full <= sk <= their stages); the block whose run reaches a
//     tile's end finishes it with the partial sums of the blocks before it
//     (see affine_wg) and writes y: no reduce launch. With a split and no
//     CLUSTER,
//   affine_wg_reduce(ws, bias, y, tokens, in, out, splits, row_first)
//     (any grid, block 256) writes y = bf16(the slices added in order +
//     bias) for outputs row_first and up, the split tiles' rows: row_first
//     = full * ROWS (full > 0 only with a single token tile, whose tiles
//     are its row blocks in order).
// Workspace ws: the stages, ceil(tokens/BN) * (in/64) * STAGE_BYTES bytes,
// then ceil(tokens/BN) * BN floats of sigma, then (splits > 1 without
// CLUSTER) ceil(splits/2) slices of sums, each tokens * (out - row_first)
// floats, whose splits/2 slices of two shares xprep clears when its splits
// argument is above 1 (previously one sum took every share: three or four
// shares' float additions landed in whatever order they finished, and the
// last bit of the sums varied from run to run); or, with stream-K, T - full
// int counters and a ticket (rounded up to 16 bytes), which xprep clears as
// its `counters`,
// then sk partials of NACC * WGS * 128 floats.
// Needs in_features a multiple of 64 and of QGROUP and, unless compiled
// with ODDK, of 2 * max(64, QGROUP) (without it scales are copied in pairs
// of entries, from an even one, and 3- and 5-bit rows in 16-byte pieces),
// out_features a multiple of 8, band >= 1,
// splits >= 1 and 0 <= full <= T, with full == 0 unless ceil(tokens/BN) == 1
// or stream-K.
//
// NUMERICS
//   Weights are dequantised to fp16 in registers, s*q + b with one rounding
//   (q is exact, then one fma.rn.f16x2): a relative error of at most 2^-11
//   per weight, 8x below bf16's, for |s*q + b| >= 2^-14 (smaller weights
//   are fp16 subnormals, an absolute error under 2^-25; scales and biases
//   below 2^-24 flush to zero). x / sigma is exact in fp16 for values
//   within 2^-28 of the token's largest |x| (smaller ones keep an absolute
//   error under 2^-25 of that largest). Products and sums are fp32 in the
//   tensor cores. Weights with |s*q + b| >= 65504 overflow fp16; quantised
//   model weights are many orders of magnitude smaller.
//
// METHOD
//   Warp specialised, no block barrier in the main loop (stream-K has
//   one between a block's two segments, where it stores a partial). The last
//   warpgroup produces (and gives its registers to the consumers with
//   setmaxnreg): its first warp streams the token tile's x stages into a
//   ring of STAGES slots with one bulk copy each (cp.async.bulk, completion
//   counted on the slot's "full" mbarrier); its next AW warps copy weight
//   words, scales and biases of AG groups for the block's ROWS rows into a
//   ring of AST slots with 16-byte cp.async (coalesced, 16 lanes per row;
//   one warp alone could not keep the consumers fed: bench/NOTES.md, ninth
//   session, 3-18 % slower on eight of ten shape and token cells at 256
//   and 4096 tokens).
//   With BITS 8 a weight stage holds AG = 4 groups, the same 256 bytes of
//   each row; with 2 and 3 bits 8 groups (128 and 192 bytes), with 5 and 6
//   bits 4 (160 and 192).
//   A slot is refilled once every consumer warp has arrived on its "empty"
//   mbarrier. WGS consumer warpgroups each own 64 rows and share the x tile.
//   A (weights) comes from registers: each warp owns 16 rows with the
//   mma.m16n8k16 A fragment; a lane's quad position tig owns a 16-value run
//   of each group, whose nibble pairs (j, j+4) of a word become fp16 pairs
//   by lop3 with 0x6400 (1024 + q, or 1024 + 16q for the odd nibbles, which
//   saves the shifts) and one exact fma to q; with BITS 8, byte j of two
//   words (values j and j+4 of a run of 8) by prmt, then the same lop3
//   and fma.
//   Other widths (2, 3, 5 and 6 bits; KC_GENERAL): a lane's run of 16
//   values is 2*BITS bytes, which at 3 and 5 bits starts mid-word; the lane
//   reads the words around it and shifts them once, so that value i sits
//   at bits [BITS*i, BITS*(i+1)). It pairs value i with i + PD (PD 8 at 2,
//   3 and 5 bits, 4 at 6 bits), whose bits mostly start at the same offset
//   e within their bytes: one prmt gathers both values' bytes into the
//   halves of a word and the lop3 with 0x6400 masks them where they lie,
//   giving (1024 + 2^e v_i, 1024 + 2^e v_j), exact while BITS + e <= 10
//   (else a shift first, and e = 0); the first fma then multiplies by 2^-e
//   and subtracts 2^(10-e). 2-bit pairs, 16 bits apart, need no prmt; pairs
//   whose offsets differ (3 of 8 at 5 bits) take a funnel shift per value
//   first. Then the second fma, s*q + b, as at 4 bits. These are the stream
//   kernel's pairs (internal/affinegpu/kernels/stream.cu), in fp16. xprep
//   lays x out by the same pairs (PD).
//   B (x) is in shared memory without swizzle, as 8x8 core matrices (8
//   tokens x 8 k, 16 bytes per token): LBO (next 8 k) = 128 B, SBO (next 8
//   tokens) = 256 B; one k16 step of BN tokens is BN*32 bytes.
//   Per group, four wgmma m64nBNk16 accumulate straight into the block's
//   accumulators. The last FSETS - 1 groups' wgmmas stay in flight while
//   the next group is dequantised into the fragment set that
//   wgmma.wait_group FSETS - 1 has just freed, with its x slot.
//
// MACROS: BN (64, 128 or 256 tokens per CTA; 16- and 32-token tiles were
// timed and lost to the stream kernel at 9-32 tokens, bench/NOTES.md),
// STAGES (>= FSETS x slots), WGS (1..3 consumer warpgroups, 64 rows each),
// AST (weight slots of AG groups), QGROUP (32, 64 or 128 inputs a scale;
// "groups" elsewhere are 64 inputs), FSETS (2 or 3 A fragment sets), AW
// (1..3 weight-copying warps, default 3), BITS (2, 3, 4, 5, 6 or 8), CLUSTER (0, or 2
// K shares of a tile per thread-block cluster; clusters of four 216 KB
// blocks measured twice as slow on the H200, as if they could not all be
// placed at once, bench/NOTES.md, and the epilogue's exchange now serves
// pairs only), STREAMK (0, or 1 for the stream-K tail: without it the
// kernel is the one-segment code alone, which the compiler keeps tighter,
// bench/NOTES.md, fifteenth session), ODDK (0, or 1 where in_features is
// not a multiple of 2 * max(64, QGROUP): see its definition), KC_TIMELINE (diagnostics:
// scripts/wg_timeline.py).

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
#if BN != 64 && BN != 128 && BN != 256
#error "BN must be 64, 128 or 256 (the wgmma shapes written out below)"
#endif
#ifndef AW
#define AW 3   // producer warps that copy the weights (1..3; see METHOD)
#endif
#if AW < 1 || AW > 3
#error "AW must be 1, 2 or 3 (the producer warpgroup's warps after the x warp)"
#endif
#if WGS < 1 || WGS > 3
#error "WGS must be 1, 2 or 3"
#endif
#ifndef AST
#define AST 2   // weight stages (AG groups each) in the ring
#endif
#ifndef FSETS
#define FSETS 3   // A fragment sets: groups whose wgmmas may be in flight while the next is dequantised
#endif
#if FSETS != 2 && FSETS != 3
#error "FSETS must be 2 or 3"
#endif
#if STAGES < FSETS
#error "STAGES must be at least FSETS: a group's x slot is released FSETS - 1 groups later"
#endif
#if AST < 2
#error "AST must be at least 2: a consumer releases a weight stage only after reading the next one's first group"
#endif
// GROUP: 64 inputs, the unit of x's stages and of the weights' runs (a
// lane's 16 values); "groups" in this file are these. The quantisation
// group, whose scale and bias the weights share, is QGROUP inputs: 32, 64
// or 128.
#define GROUP 64
#ifndef QGROUP
#define QGROUP 64
#endif
#if QGROUP != 32 && QGROUP != 64 && QGROUP != 128
#error "QGROUP must be 32, 64 or 128"
#endif
#ifndef CLUSTER
#define CLUSTER 0   // > 0: the K shares of a tile are one thread-block cluster that sums them in shared memory (see affine_wg's epilogue)
#endif
#if CLUSTER != 0 && CLUSTER != 2
#error "CLUSTER must be 0 or 2"
#endif
#ifndef STREAMK
#define STREAMK 0   // 1: the stream-K tail (sk > 0) is compiled in; the plan asks it only of such variants
#endif
#if STREAMK && CLUSTER
#error "stream-K blocks are not clusters"
#endif
#ifndef WG_DIAG_NORED
#define WG_DIAG_NORED 0   // diagnostic only: 1 skips the split-K reductions and stores (wrong results, and an odd last share's
                          // slice is left as it was, which may hold NaN; times their cost)
#endif
#define STEP_BYTES (BN * 32)                 // one k16 step of B
#define XT_BYTES (4 * STEP_BYTES)            // one group of B
#define STAGE_BYTES XT_BYTES                 // one group of x per stage
#define NACC (BN / 2)                        // fp32 accumulators per thread
#define ROWS (64 * WGS)                      // weight rows per CTA
#ifndef BITS
#define BITS 4
#endif
#if BITS != 2 && BITS != 3 && BITS != 4 && BITS != 5 && BITS != 6 && BITS != 8
#error "BITS must be 2, 3, 4, 5, 6 or 8"
#endif
// 4 and 8 bits unpack whole words; 2, 3, 5 and 6 bits take the general
// path (kc_pair16; "Other widths" in METHOD).
#define KC_GENERAL (BITS != 4 && BITS != 8)
#define GB (8 * BITS)                        // bytes of one row's group of 64 weights
// Groups per weight stage: 256 bytes of each row at 4 and 8 bits; at the
// other widths 128-192 bytes (whole 16-byte pieces: AG even at 3 and 5
// bits), which keeps the 256-token variants' rings within 227 KB.
#define AG (BITS == 2 || BITS == 3 || BITS == 4 ? 8 : 4)
#if AG * GB % 16 != 0 || (AG != 4 && AG != 8) || AG * GB > 256
#error "a weight stage's row must be 4 or 8 groups in whole 16-byte pieces, at most 256 bytes"
#endif
// One row of a weight stage, padded so that the rows a quarter warp (BITS
// 8, 16-byte reads: 2 rows), a half warp (BITS 4, 8-byte reads: 4 rows)
// or a warp (other widths, 4-byte reads: 8 rows; 3 bits share banks in
// pairs) reads at once fall in different banks.
#define AROW_BYTES (AG * GB + (BITS == 8 ? 64 : BITS == 4 ? 32 : 16))
// Pairs of a lane's 16-value run (kc_pi): values i and i + PD. 4 and 8
// bits, and 6 bits, pair i with i + 4; 2, 3 and 5 bits with i + 8, whose
// bits (but for 3 pairs of 8 at 5 bits) start at the same offset within
// their bytes. xprep lays x out by the same pairs.
#define PD (BITS == 2 || BITS == 3 || BITS == 5 ? 8 : 4)
#define SG (AG * GROUP / QGROUP)             // scales (and biases) of a row in a weight stage
// ODDK (0 or 1): in_features is not a multiple of 2 * max(64, QGROUP), as
// gpt-oss's 2880 (45 groups of 64): a row's scales may start at any entry
// (an odd number of them a row), a last weight stage may hold an odd
// number of groups, and at 3 and 5 bits rows are not whole 16-byte pieces.
// Such variants copy 8-byte pieces of weights at 3 and 5 bits, and each
// row's scales and biases as a window of SCP-entry pieces from the piece
// holding its first entry; the row keeps SCP entries more (SROW), and a
// lane reads from its rows' offset in the window (kc_scale_shift).
#ifndef ODDK
#define ODDK 0
#endif
#if ODDK != 0 && ODDK != 1
#error "ODDK must be 0 or 1"
#endif
#define SCP (SG % 4 == 0 ? 4 : 2)             // ODDK: scale entries a copy (8 or 4 bytes); divides SG
#define SROW (SG + (ODDK ? SCP : 0))          // entries a stage row keeps for its scales (and biases)
#define ASCALE_OFF (ROWS * AROW_BYTES)        // then scales [ROWS][SROW] and biases [ROWS][SROW], bf16
#define ASTAGE_BYTES (ROWS * (AROW_BYTES + 4 * SROW))
#define RING_BYTES (STAGES * STAGE_BYTES + AST * ASTAGE_BYTES)
#define KC_MAX(a, b) ((a) > (b) ? (a) : (b))
#define THREADS (WGS * 128 + 128)            // consumers, then the producer warpgroup
#ifndef XPREP_THREADS
#define XPREP_THREADS 128                    // affine_wg_xprep's block (the plugin compiles 256 where x is mid-sized: wgmma.go, chooseWG)
#endif
#ifndef XPREP_TOKENS
#define XPREP_TOKENS 2                       // tokens per affine_wg_xprep block (whole 32-byte sectors of each store)
#endif
#if (XPREP_THREADS / 32) % XPREP_TOKENS != 0 || BN % XPREP_TOKENS != 0
#error "xprep gives each token the same number of warps, and its blocks must not straddle token tiles"
#endif
#define OTILE_LD (ROWS + 8)                  // output tile row (bf16), padded against bank conflicts
#define FTILE_LD (ROWS + 4)                  // the same in fp32, for split-K sums
#if BN * OTILE_LD * 2 > STAGES * STAGE_BYTES
#error "the output tile must fit in the x ring"
#endif
#if CLUSTER
#define QROWS (ROWS / CLUSTER)               // rows of the tile each block of a cluster finishes
#define QTILE_LD (QROWS + 4)                 // one token of a share of those rows (fp32), padded against bank conflicts
#define SHARE_BYTES (BN * QTILE_LD * 4)      // one share: [BN][QTILE_LD] fp32
#if QROWS % 16 != 0
#error "each warp's 16 rows must fall to one block of the cluster"
#endif
#endif
// Dynamic shared memory: the rings, which the epilogue reuses for the fp32
// output tile and, in a cluster, the shares that arrive and the outgoing
// one; where those are larger than the rings (the 2- and 3-bit weight
// stages are small), the block takes their bytes (wgmma.go's sharedBytes
// mirrors this).
#if CLUSTER
#define SMEM_BYTES KC_MAX(KC_MAX(RING_BYTES, BN * FTILE_LD * 4), (CLUSTER + 1) * SHARE_BYTES)
#else
#define SMEM_BYTES KC_MAX(RING_BYTES, BN * FTILE_LD * 4)
#endif
#if SMEM_BYTES + 2048 > 232448
#error "the rings and the static shared memory must fit the 227 KB a block may have"
#endif
// The producer warpgroup's registers after setmaxnreg. At 40 its weight
// copy loop spilled (88 local loads and stores, ptxas); at 72 it nearly
// does not, and the consumers keep 216 (two warpgroups) or 240. Same-call
// A/B, 72 against 40: 0-5 % faster at 128 and 256 tokens, 3-13 % at 8
// bits, never clearly slower (bench/NOTES.md, fifteenth session).
#ifndef PRODUCER_REGS
#define PRODUCER_REGS 72
#endif
#if PRODUCER_REGS % 8 != 0 || PRODUCER_REGS < 24 || PRODUCER_REGS > 256
#error "PRODUCER_REGS must be a multiple of 8 from 24 to 256 (setmaxnreg)"
#endif
#define CONSUMER_REGS_RAW ((65536 - 128 * PRODUCER_REGS) / (128 * WGS) / 8 * 8)
#define CONSUMER_REGS (CONSUMER_REGS_RAW > 240 ? 240 : CONSUMER_REGS_RAW)

#define KC_DEV __device__ __forceinline__
struct alignas(16) kc_u4 { u32 x, y, z, w; };
#if BITS == 8
struct kc_words { uint4 lo, hi; };   // a lane's words of one group: rows rl0 and rl0 + 8
#endif

KC_DEV float kc_bf16(u32 h) { return __uint_as_float(h << 16); }
// Nibbles under mask (0x000F000F or 0x00F000F0) of w as an fp16 pair:
// 1024 + q, or 1024 + 16q.
KC_DEV u32 kc_nib16(u32 w, u32 mask) {
    u32 d;
    asm("lop3.b32 %0, %1, %2, 0x64006400, 0xEA;" : "=r"(d) : "r"(w), "r"(mask));
    return d;
}
// Byte j of a and byte j of b as an fp16 pair (1024 + a.j, 1024 + b.j),
// a's in the lower half.
template <int J> KC_DEV u32 kc_byte16(u32 a, u32 b) {
    u32 t;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(t) : "r"(a), "r"(b), "n"(J | (J << 4) | ((4 + J) << 8) | ((4 + J) << 12)));
    return kc_nib16(t, 0x00FF00FFu);
}
KC_DEV u32 kc_hfma2(u32 a, u32 b, u32 c) {
    u32 d;
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}
#if KC_GENERAL
// Other widths ("Other widths" in METHOD). A lane's run of 16 values of a
// row's group is RBYTES bytes from byte tig * RBYTES, which at 3 and 5
// bits starts mid-word: the lane reads the LW words from the one holding
// its first byte and shifts them once (kc_words_at), so that r[] holds
// value i at bits [BITS*i, BITS*(i+1)).
#define RBYTES (2 * BITS)
#define RW ((16 * BITS + 31) / 32)
#define LW ((16 * BITS + (RBYTES % 4 != 0 ? 16 : 0) + 31) / 32)
struct kc_words { u32 r[2][RW]; };   // a lane's runs of one group: rows rl0 and rl0 + 8
KC_DEV u32 kc_prmt(u32 a, u32 b, u32 sel) {
    u32 d;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
    return d;
}
// (a & b) | c in one lop3.
KC_DEV u32 kc_and_or(u32 a, u32 b, u32 c) {
    u32 d;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}
// Pair p (0..7) of the run: values kc_pi(p) and kc_pj(p) = kc_pi(p) + PD.
KC_DEV constexpr int kc_pi(int p) { return p / PD * 2 * PD + p % PD; }
KC_DEV constexpr int kc_pj(int p) { return kc_pi(p) + PD; }
KC_DEV u32 kc_rword(const u32 (&r)[RW], int k) { return k < RW ? r[k] : 0u; }
// The run's bits from bit b on, in the low bits of a word.
KC_DEV u32 kc_bits_from(const u32 (&r)[RW], int b) {
    const int w = b >> 5, sh = b & 31;
    return sh == 0 ? r[w] : __funnelshift_r(r[w], kc_rword(r, w + 1), sh);
}
// Where kc_pair16 leaves pair (i, j): the bit e of each half at which the
// values start, with BITS + e <= 10, so that the half reads as the fp16
// 1024 + 2^e v, exact. Values whose bits start at the same offset within
// their bytes (one prmt lines them up at that offset d) keep it where
// BITS + d <= 10, which saves the shift; the 2-bit pairs, 16 bits apart,
// keep their offset within the word likewise. Others start at 0.
KC_DEV constexpr int kc_pair_kind(int i, int j) {   // 0: 16 bits apart, 1: one prmt, 2: a funnel shift each
    return BITS * j - BITS * i == 16 && ((BITS * j + BITS - 1) >> 5) == ((BITS * i) >> 5) ? 0
           : ((BITS * j) & 7) == ((BITS * i) & 7) &&
                     ((BITS * j) >> 3) - 4 * ((BITS * i) >> 5) + (((BITS * i) & 7) + BITS + 7) / 8 - 1 <= 7
               ? 1
               : 2;
}
KC_DEV constexpr int kc_pair_bit(int i, int j) {
    return kc_pair_kind(i, j) == 0   ? ((BITS * i) & 31) + BITS <= 10 ? (BITS * i) & 31 : 0
           : kc_pair_kind(i, j) == 1 ? ((BITS * i) & 7) + BITS <= 10 ? (BITS * i) & 7 : 0
                                     : 0;
}
// fp16 pair (1024 + 2^e v_i, 1024 + 2^e v_j), e = kc_pair_bit(i, j), exact;
// i and j are constants once the loop over pairs is unrolled, and so is
// every branch. One prmt (or none), a shift where e stays below the
// values' offset, and the lop3; pairs whose offsets differ (some at 5 bits)
// take a funnel shift per value first.
KC_DEV u32 kc_pair16(const u32 (&r)[RW], int i, int j) {
    const int pi = BITS * i, pj = BITS * j, d = pi & 7, e = kc_pair_bit(i, j);
    const int w = pi >> 5;
    const int lo = (pi >> 3) - 4 * w, hi = (pj >> 3) - 4 * w;   // bytes of the pair in r[w], r[w+1]
    const int nb = (d + BITS + 7) >> 3;                        // bytes a value spans
    u32 v;
    if (kc_pair_kind(i, j) == 0) {
        v = r[w] >> ((pi & 31) - e);                            // v_i at bit e, v_j at bit 16 + e
    } else if (kc_pair_kind(i, j) == 1) {
        const u32 sel = lo | (nb > 1 ? lo + 1 : lo) << 4 | hi << 8 | (nb > 1 ? hi + 1 : hi) << 12;
        v = kc_prmt(r[w], kc_rword(r, w + 1), sel) >> (d - e);  // both at bit e of their halves
    } else {
        v = kc_prmt(kc_bits_from(r, pi), kc_bits_from(r, pj), 0x5410);
    }
    return kc_and_or(v, (((1u << BITS) - 1u) << e) * 0x10001u, 0x64006400u);
}
// The fp16 pair (2^-e, 2^-e) and (-2^(10-e), -2^(10-e)): one fma of them
// takes kc_pair16's 1024 + 2^e v to v, exact.
KC_DEV constexpr u32 kc_unit(int e) { return (u32)(15 - e) << 10 | (u32)(15 - e) << 26; }
KC_DEV constexpr u32 kc_offset(int e) { return (0x8000u | (u32)(25 - e) << 10) * 0x10001u; }
// The lane's runs in rows p and p + rows8 (p: the 4-byte word holding the
// run's first byte; shift: the run's bits before it in that word).
KC_DEV kc_words kc_words_at(const unsigned char* p, int rows8, u32 shift) {
    kc_words cw;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const u32* q = reinterpret_cast<const u32*>(p + h * rows8);
        u32 l[LW];
#pragma unroll
        for (int k = 0; k < LW; ++k) l[k] = q[k];
#pragma unroll
        for (int k = 0; k < RW; ++k)
            cw.r[h][k] = RBYTES % 4 == 0 ? l[k] : __funnelshift_r(l[k], l[LW > k + 1 ? k + 1 : k], shift);
    }
    return cw;
}
#endif
// (hi, lo) as an fp16 pair, hi in the upper half.
KC_DEV u32 kc_f16x2(float hi, float lo) {
    u32 d;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
    return d;
}
// The sigma array of the workspace, after the stages.
KC_DEV long long kc_sigma_offset(int tokens, int in_features) {
    return (long long)((tokens + BN - 1) / BN) * (in_features / GROUP) * STAGE_BYTES;
}
// The split-K fp32 sums (only with splits > 1 outside a cluster), after
// sigma: [ceil(splits/2)][tokens][out - row_first], slice j shares 2j and
// 2j + 1's.
KC_DEV long long kc_sum_offset(int tokens, int in_features) {
    return kc_sigma_offset(tokens, in_features) + (long long)((tokens + BN - 1) / BN) * BN * 4;
}
// Stream-K (sk > 0), in place of the sums: one int counter per shared
// tile (the contributors that have stored their partials), then the
// ticket that numbers the stream-K blocks in the order they start,
// rounded up to 16 bytes; then one partial per stream-K block: NACC / 4
// float4 for each of the WGS * 128 consumer threads, [i][thread], so that
// stores and loads are coalesced.
KC_DEV int* kc_counters(unsigned char* ws, int tokens, int in_features) {
    return reinterpret_cast<int*>(ws + kc_sum_offset(tokens, in_features));
}
KC_DEV float4* kc_partials(unsigned char* ws, int tokens, int in_features, int shared_tiles) {
    return reinterpret_cast<float4*>(ws + kc_sum_offset(tokens, in_features) + (long long)(shared_tiles + 4) / 4 * 16);
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

// Programmatic dependent launch (sm_90). The Go plan launches the main and
// reduce kernels with early start: each may begin while the kernel ahead of
// it finishes, and waits for it (kc_grid_wait: that grid has completed and
// its writes are visible) before touching the workspace or y. Each kernel
// releases its dependents at its start, so that the next one's blocks can
// be placed as soon as SMs free up (stream-K blocks then wait for xprep
// before anything else, to take their ticket). Both are no-ops in an
// ordinary launch.
KC_DEV void kc_grid_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
KC_DEV void kc_grid_release() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }

KC_DEV unsigned long long kc_gtime() {   // the global timer, ns
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

#ifdef KC_TIMELINE
// Diagnostics (scripts/wg_timeline.py). kc_tl[block]: %globaltimer (ns)
// when the main kernel's consumer thread 0 starts (slot 0), passes its
// grid wait (1), has the first weight stage of its (last) segment (2) and
// the first x stage (3),
// ends the main loop (4), passes the epilogue's first barrier (5) and ends
// (6); when the x warp's lane 0 passes its grid wait (7); the SM (8);
// when it passes the epilogue's second barrier (9).
// kc_tlp[block]: when xprep's thread 0 starts and when its block ends.
__device__ unsigned long long kc_tl[4096][10];
__device__ unsigned long long kc_tlp[8192][2];
#define KC_TL(slot) do { if (blockIdx.x < 4096) kc_tl[blockIdx.x][slot] = kc_gtime(); } while (0)
#define KC_TLP(slot) do { if (blockIdx.x < 8192) kc_tlp[blockIdx.x][slot] = kc_gtime(); } while (0)
#else
#define KC_TL(slot) do {} while (0)
#define KC_TLP(slot) do {} while (0)
#endif

// Thread-block clusters (sm_90): a barrier over every thread of the
// cluster (threads that have exited count as arrived), ordering the shared
// memory writes before it against the reads after it; and the address of a
// shared variable in another block of the cluster.
KC_DEV void kc_cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
KC_DEV u32 kc_cluster_addr(u32 saddr, u32 rank) {
    u32 d;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(d) : "r"(saddr), "r"(rank));
    return d;
}

// m raised to the largest |x| of the 8 bf16 values in v, as bf16 bits
// (monotonic for non-NaN values).
KC_DEV u32 kc_absmax8(u32 m, kc_u4 v) {
    m = max(m, max(max(v.x & 0x7FFF7FFFu, v.y & 0x7FFF7FFFu), max(v.z & 0x7FFF7FFFu, v.w & 0x7FFF7FFFu)) >> 16);
    return max(m, max(max(v.x & 0x7FFFu, v.y & 0x7FFFu), max(v.z & 0x7FFFu, v.w & 0x7FFFu)));
}
// The token scale's exponent k (sigma = 2^k) for max|x| given as bf16 bits
// m: max|x| / sigma in [2^14, 2^15), k clamped to [-100, 127].
KC_DEV int kc_sigma_exponent(u32 m) {
    const int e = (int)(m >> 7) - 127;   // exponent of max|x|
    return max(-100, min(e - 14, 127));
}
// One item of x's conversion: token tok's words of group g that steps 2h
// and 2h + 1 take (PD 4: chunks 2t + h, t = 0..3; PD 8: words 8t + 2h,
// 8t + 2h + 1 and those four on), from its row xrow (bf16; nullptr for a
// token past the end, which gets zeros), times inv_sigma into fp16 pairs of
// those steps of the (tile, group) stage (layout below).
KC_DEV void kc_xconvert(const unsigned char* xrow, float inv_sigma, unsigned char* __restrict__ ws, int tok, int g,
                        int h, int groups)
{
    // v[4t + j] = word 8t + 4h + j of the group (PD 4: chunk 2t + h), or
    // word 8t + 2h + (j & 1) + 4 (j >> 1) (PD 8): either way v[4t + s] and
    // v[4t + s + 2] hold values PD apart.
    u32 v[16];
    if (xrow != nullptr) {
#if PD == 4
        const kc_u4* src = reinterpret_cast<const kc_u4*>(xrow + g * (GROUP * 2));
#pragma unroll
        for (int t = 0; t < 4; ++t) {
            const kc_u4 c = src[2 * t + h];
            v[4 * t] = c.x; v[4 * t + 1] = c.y; v[4 * t + 2] = c.z; v[4 * t + 3] = c.w;
        }
#else
        const uint2* src = reinterpret_cast<const uint2*>(xrow + g * (GROUP * 2));
#pragma unroll
        for (int t = 0; t < 4; ++t) {
            const uint2 a = src[4 * t + h], b = src[4 * t + h + 2];
            v[4 * t] = a.x; v[4 * t + 1] = a.y; v[4 * t + 2] = b.x; v[4 * t + 3] = b.y;
        }
#endif
    } else {
#pragma unroll
        for (int i = 0; i < 16; ++i) v[i] = 0u;
    }
    const int tile = tok / BN, n = tok % BN;
    unsigned char* base = ws + ((long long)tile * groups + g) * STAGE_BYTES + (n >> 3) * 256 + (n & 7) * 16;
#pragma unroll
    for (int s = 0; s < 2; ++s) {   // step 2h + s: b = kc_pi(4h + 2s) (8h + 2s, or 4h + 2s), word b/2 + 8t
        u32 lo[4], hi[4];
#pragma unroll
        for (int t = 0; t < 4; ++t) {
            const u32 p = v[4 * t + s], q = v[4 * t + s + 2];   // x[b + 16t], x[b + 16t + PD] in their low halves
            // (x[a], x[a+PD]) for slots 2t, 2t+1; (x[a+1], x[a+1+PD]) for 8+2t, 8+2t+1
            lo[t] = kc_f16x2(__uint_as_float(q << 16) * inv_sigma, __uint_as_float(p << 16) * inv_sigma);
            hi[t] = kc_f16x2(__uint_as_float(q & 0xFFFF0000u) * inv_sigma, __uint_as_float(p & 0xFFFF0000u) * inv_sigma);
        }
        unsigned char* dst = base + (2 * h + s) * STEP_BYTES;
        *reinterpret_cast<kc_u4*>(dst) = kc_u4{lo[0], lo[1], lo[2], lo[3]};
        *reinterpret_cast<kc_u4*>(dst + 128) = kc_u4{hi[0], hi[1], hi[2], hi[3]};
    }
}

// ---------------------------------------------------------------------------
// Xprep: one block per XPREP_TOKENS tokens of the padded tiles. Their rows
// of x arrive in shared memory by one bulk copy each; the block finds each
// token's max|x| and its scale sigma = 2^k with max|x| / sigma in
// [2^14, 2^15) (k clamped to [-100, 127]), then writes x / sigma in fp16
// into the per (tile, group) stages:
//   [step 0..3][nb][kb 0..1][r 0..7][8] fp16 of x / sigma,
// where step s, slot k (0..15) holds x[grp*64 + a], a = 16*((k&7)>>1) +
// kc_pi(2s + (k>>3)) + PD*(k&1) (with PD 4: 8*(s>>1) + 2*(s&1) + (k>>3) +
// 4*(k&1); with PD 8: 2s + (k>>3) + 8*(k&1)): the value the A pair of lane
// tig = (k&7)>>1 puts in that slot. Tokens past the end are 0. With
// splits > 1 it also clears its tokens' split-K sums of outputs row_first
// and up in the slices that take two shares, while the copy lands.
// Work item (group g, half h, token r): half 0 writes steps 0 and 1 (with
// PD 4 from the group's 16-byte chunks 0, 2, 4, 6), half 1 steps 2 and 3
// (chunks 1, 3, 5, 7); with PD 8 each half reads half of every chunk. r is
// the item's lowest bit, so a warp's two tokens fill
// whole 32-byte sectors of each 16-byte store.
extern "C" __global__ void __launch_bounds__(XPREP_THREADS)
affine_wg_xprep(const u16* __restrict__ x, unsigned char* __restrict__ ws, int tokens, int in_features,
                int out_features, int splits, int row_first, int counters)
{
    extern __shared__ __align__(16) unsigned char xrows[];   // XPREP_TOKENS rows of in_features bf16
    __shared__ __align__(8) u64 bar;
    __shared__ u32 part[XPREP_THREADS / 32];
    __shared__ float inv[XPREP_TOKENS];                       // 1 / sigma per token
    kc_grid_release();
    if (threadIdx.x == 0) KC_TLP(0);
    const int tid = threadIdx.x;
    const int tok0 = blockIdx.x * XPREP_TOKENS;
    const int real = max(0, min(XPREP_TOKENS, tokens - tok0));   // tokens of this block inside x
    const int groups = in_features / GROUP;
    const u32 row_bytes = (u32)in_features * 2;
    if (blockIdx.x == 0)   // stream-K's tile counters (the main kernel counts only past its kc_grid_wait)
        for (int i = tid; i < counters; i += XPREP_THREADS) kc_counters(ws, tokens, in_features)[i] = 0;

    if (real > 0) {
        const u32 sbar = kc_smem(&bar);
        if (tid == 0) {
            kc_bar_init(sbar, 1);
            asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        }
        __syncthreads();
        if (tid == 0) {
            kc_bar_expect(sbar, real * row_bytes);
            for (int r = 0; r < real; ++r)
                kc_bulk(kc_smem(xrows) + r * row_bytes, x + (long long)(tok0 + r) * in_features, row_bytes, sbar);
        }
        if (CLUSTER == 0 && splits > 1) {   // clear the tokens' split-K sums in the slices of two shares (a cluster has none)
            const int per = (out_features - row_first) / 4, slices = splits / 2;
            float4* const sums = reinterpret_cast<float4*>(ws + kc_sum_offset(tokens, in_features));
            for (int i = tid; i < slices * real * per; i += XPREP_THREADS) {
                const int j = i / (real * per), rest = i - j * (real * per), r = rest / per;
                sums[((long long)j * tokens + tok0 + r) * per + (rest - r * per)] = make_float4(0.f, 0.f, 0.f, 0.f);
            }
        }
        kc_bar_wait(sbar, 0);
        // max|x| as bf16 bits, two at a time (monotonic for non-NaN): the
        // block's warps split evenly over its tokens.
        const int warps_per_token = (XPREP_THREADS / 32) / XPREP_TOKENS, r = (tid >> 5) / warps_per_token;
        u32 m = 0;
        if (r < real) {
            const kc_u4* row = reinterpret_cast<const kc_u4*>(xrows + r * row_bytes);
            for (int i = tid % (32 * warps_per_token); i < in_features / 8; i += 32 * warps_per_token) {
                const kc_u4 v = row[i];
                m = kc_absmax8(m, v);
            }
        }
        m = __reduce_max_sync(0xFFFFFFFFu, m);
        if ((tid & 31) == 0) part[tid >> 5] = m;
        __syncthreads();
        if (tid < real) {   // thread r finishes token r
            m = part[tid * warps_per_token];
#pragma unroll
            for (int w = 1; w < warps_per_token; ++w) m = max(m, part[tid * warps_per_token + w]);
            const int k = kc_sigma_exponent(m);
            reinterpret_cast<float*>(ws + kc_sigma_offset(tokens, in_features))[tok0 + tid] = __int_as_float((127 + k) << 23);
            inv[tid] = __int_as_float((127 - k) << 23);   // 1 / sigma, exact
        }
        __syncthreads();
    }

    for (int it = tid; it < groups * 2 * XPREP_TOKENS; it += XPREP_THREADS) {
        const int r = it % XPREP_TOKENS, h = (it / XPREP_TOKENS) & 1, g = it / (2 * XPREP_TOKENS);
        kc_xconvert(r < real ? xrows + r * row_bytes : nullptr, r < real ? inv[r] : 0.f, ws, tok0 + r, g, h, groups);
    }
#ifdef KC_TIMELINE
    __syncthreads();
    if (threadIdx.x == 0) KC_TLP(1);
#endif
}

KC_DEV void kc_cp16(u32 dst, const void* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(dst), "l"(src) : "memory");
}
KC_DEV void kc_cp8(u32 dst, const void* src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" :: "r"(dst), "l"(src) : "memory");
}
KC_DEV void kc_cp4(u32 dst, const void* src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" :: "r"(dst), "l"(src) : "memory");
}
// Arrives on bar once this thread's earlier cp.async copies have landed.
KC_DEV void kc_cp_arrive(u32 bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" :: "r"(bar) : "memory");
}

// Barrier 1 among the consumer warpgroups only (the producer has left).
KC_DEV void kc_consumer_sync() { asm volatile("bar.sync 1, %0;" :: "n"(WGS * 128) : "memory"); }

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

#if BN == 256
#define KC_WG_ACC_LIST \
    "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31," \
    "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63," \
    "%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95," \
    "%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}"
#define KC_WG_A "{%128,%129,%130,%131}"
#define KC_WG_REST "%132, p, 1, 1, 0;"
#define KC_WG_SHAPE "m64n256k16"
#define KC_ACC_OUT(d) \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
    "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
    "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
    "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
    "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
    "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
    "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
    "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), \
    "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
    "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), \
    "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), \
    "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), \
    "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), \
    "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), \
    "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), \
    "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
#elif BN == 128
#define KC_WG_ACC_LIST \
    "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31," \
    "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}"
#define KC_WG_A "{%64,%65,%66,%67}"
#define KC_WG_REST "%68, p, 1, 1, 0;"
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
#define KC_WG_SHAPE "m64n64k16"
#define KC_ACC_OUT(d) \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
    "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
    "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
    "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#endif

// d += A(regs) * B(desc).
KC_DEV void kc_wgmma(float (&d)[NACC], u32 a0, u32 a1, u32 a2, u32 a3, u64 desc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.eq.u32 p, 1, 1;\n"
        "wgmma.mma_async.sync.aligned." KC_WG_SHAPE ".f32.f16.f16 " KC_WG_ACC_LIST ", " KC_WG_A ", " KC_WG_REST "\n}\n"
        : KC_ACC_OUT(d)
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc));
}

#if STREAMK
// A stream-K contributor's sums, as they are, into its partial (thread
// tid's NACC / 4 float4 at part + i * WGS * 128); then, once every
// consumer's stores are made (the barrier), one release-add on the tile's
// counter.
KC_DEV void kc_store_partial(const float (&acc)[NACC], float4* part, int tid, int* counter) {
#pragma unroll
    for (int i = 0; i < NACC / 4; ++i)
        __stcg(part + (tid + i * (WGS * 128)), make_float4(acc[4 * i], acc[4 * i + 1], acc[4 * i + 2], acc[4 * i + 3]));
    kc_consumer_sync();
    if (tid == 0) asm volatile("red.release.gpu.global.add.s32 [%0], %1;" :: "l"(counter), "r"(1) : "memory");
}
KC_DEV int kc_load_acquire(const int* p) {
    int v;
    asm volatile("ld.acquire.gpu.global.s32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
#endif

extern "C" __global__ void __launch_bounds__(THREADS, 1)
#if CLUSTER
__cluster_dims__(CLUSTER, 1, 1)
#endif
affine_wg(unsigned char* __restrict__ xp, const u32* __restrict__ weight,
          const u16* __restrict__ scales, const u16* __restrict__ biases, const u16* __restrict__ bias,
          u16* __restrict__ y, int tokens, int in_features, int out_features, int band, int splits, int full, int sk)
{
    extern __shared__ __align__(128) unsigned char smem[];
    // full[STAGES], empty[STAGES] for x; afull[AST], aempty[AST] for
    // weights; then the share that arrives from the other block of a cluster
    __shared__ __align__(8) u64 bars[2 * STAGES + 2 * AST + 1];
    __shared__ __align__(16) float ssigma[BN];   // the tile's token scales
    __shared__ __align__(16) u16 sbias[ROWS];    // the block's output bias (0 without)
    const int tid = threadIdx.x;
    const int lane = tid & 31, warp = tid >> 5;
    const int groups = in_features / GROUP;

    // Raster: bands of `band` row blocks; inside a band, row blocks vary
    // fastest, so the CTAs running together share x tiles and weight rows.
    const int row_blocks = (out_features + ROWS - 1) / ROWS;
    const int tiles = (tokens + BN - 1) / BN;
    const int per_band = band * tiles;
    // Tiles before `full` take one block each, later ones `splits` blocks.
    const bool whole = (int)blockIdx.x < full;
    const int nsplit = whole ? 1 : splits;
    const int split = whole ? 0 : ((int)blockIdx.x - full) % splits;
    kc_grid_release();
#ifdef KC_TIMELINE
    if (tid == 0) {
        KC_TL(0);
        u32 sm;
        asm("mov.u32 %0, %%smid;" : "=r"(sm));
        if (blockIdx.x < 4096) kc_tl[blockIdx.x][8] = sm;
    }
#endif
#if !STREAMK
    const int block = whole ? (int)blockIdx.x : full + ((int)blockIdx.x - full) / splits;
    const int bid = block / per_band, rem = block - bid * per_band;
    const int bsz = min(band, row_blocks - bid * band);
    const int row0 = (bid * band + rem % bsz) * ROWS, tile = rem / bsz;
    // This block's groups: [g0, g0 + n), an even share of whole weight
    // stages (so scale copies start at a multiple of SG entries); a share
    // is empty only when there are fewer stages than splits.
    const int wstages = (groups + AG - 1) / AG;
    const int g0 = split * wstages / nsplit * AG;
    const int n = min(groups, (split + 1) * wstages / nsplit * AG) - g0;
    constexpr int na = 0;   // (stream-K's first segment: none)
    if (sk != 0) asm volatile("trap;");   // stream-K asked of a variant without it
#else
    // Stream-K (sk > 0): the sk blocks after the first `full` share the
    // later tiles' weight stages evenly as one run: block p takes stages
    // [p*U/sk, (p+1)*U/sk) of the U, at most part of two tiles (sk >= the
    // tiles shared). Where the run holds a tile's end, the block finishes
    // that tile: it waits for the `wait` blocks before it that hold the
    // tile's earlier stages (their partials), adds theirs to its sums and
    // writes y. Elsewhere it contributes (wait -1): its sums go to its
    // partial in the workspace, then the tile's counter counts it. A run
    // over two tiles computes the later one first (segment A, where it
    // contributes), so that its partial is stored before it waits on the
    // earlier one's; a block waits only for lower-numbered ones. The
    // numbers are tickets taken as the blocks start (CUDA does not promise
    // to place blocks in index order, and under MPS or beside other
    // kernels not all of them may fit at once), so every block a finisher
    // waits for is already running and every wait ends; the wait below is
    // bounded all the same (a trap after 10 s, not a hang). Segment A ends inside
    // its tile, so it is whole weight stages, and the rings' group and
    // stage counts run on into the last segment. The other blocks are as
    // without stream-K.
    const int wstages = (groups + AG - 1) / AG;
    const bool streamk = sk > 0 && !whole;
    const int shared_tiles = row_blocks * tiles - full, units = shared_tiles * wstages;
    int skb = (int)blockIdx.x - full;                         // this block among the stream-K ones: its ticket
    if (streamk) {
        __shared__ int ticket;
        if (tid == 0) {
            kc_grid_wait();   // xprep cleared the ticket
            ticket = atomicAdd(kc_counters(xp, tokens, in_features) + shared_tiles, 1);
            if (ticket >= sk) asm volatile("trap;");   // a launch without xprep ahead of it (the ticket not cleared)
        }
        __syncthreads();
        skb = ticket;
    }
    int row0, tile, g0, n, wait = 0;                          // the (last) segment: tile, groups [g0, g0 + n), contributors or -1
    int row0a = 0, tilea = 0, g0a = 0, na = 0, tlo = 0, thi = 0;   // segment A (na groups; 0: none); the run's tiles
    {
        auto place = [&](int t, int& r0, int& tt) {
            const int bid = t / per_band, rem = t - bid * per_band;
            const int bsz = min(band, row_blocks - bid * band);
            r0 = (bid * band + rem % bsz) * ROWS;
            tt = rem / bsz;
        };
        if (!streamk) {
            place(whole ? (int)blockIdx.x : full + ((int)blockIdx.x - full) / splits, row0, tile);
            g0 = split * wstages / nsplit * AG;
            n = min(groups, (split + 1) * wstages / nsplit * AG) - g0;
        } else {
            // 32-bit arithmetic on the launch's parameters and the ticket, so
            // that it stays uniform across the block: the plan keeps units * sk
            // below 2^31 (and the ticket is below sk).
            const int run0 = skb * units / sk, run1 = (skb + 1) * units / sk;
            auto segment = [&](int tr, int& r0, int& tt, int& sg0, int& sn) {
                const int first = tr * wstages, last = first + wstages;
                const int a = max(run0, first), b = min(run1, last);
                place(full + tr, r0, tt);
                sg0 = (a - first) * AG;
                sn = min(groups, (b - first) * AG) - sg0;
                // the first block of the tile: the one whose run holds unit `first`
                return b == last ? skb - ((first + 1) * sk - 1) / units : -1;
            };
            tlo = run0 / wstages;
            thi = (run1 - 1) / wstages;
            wait = segment(tlo, row0, tile, g0, n);
            const int wait_a = thi != tlo ? segment(thi, row0a, tilea, g0a, na) : -1;
            // A run over more than two tiles, or over two with the later
            // whole, would need an epilogue while the rings refill; the plan
            // asks none (sk >= shared tiles, sk <= units). A wrong launch
            // stops here.
            if (splits != 1 || sk < shared_tiles || sk > units || (long long)units * sk >= (1ll << 31) || thi - tlo > 1 ||
                wait_a >= 0)
                asm volatile("trap;");
        }
    }
    __builtin_assume(na >= 0 && g0 >= 0);   // (ring positions: unsigned arithmetic)
#endif
#if CLUSTER
    // A cluster is the shares of one tile (or whole tiles, which do not
    // talk), and every share has groups: else blocks would write into one
    // that has exited. The plan guarantees both; a wrong launch stops here.
    u32 rank;
    asm("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    if (splits != CLUSTER || full % CLUSTER != 0 || n <= 0 || rank != (u32)split) asm volatile("trap;");
#endif
    if (n <= 0) return;
    {   // the launch must give the block its bytes (wgmma.go's sharedBytes mirrors SMEM_BYTES)
        u32 dyn;
        asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dyn));
        if (dyn < SMEM_BYTES) asm volatile("trap;");
    }

    const u32 sbase = kc_smem(smem), abase = sbase + STAGES * STAGE_BYTES;
    const u32 full0 = kc_smem(&bars[0]), empty0 = full0 + 8 * STAGES;
    const u32 afull0 = empty0 + 8 * STAGES, aempty0 = afull0 + 8 * AST;
    if (tid == 0) {
        for (int s = 0; s < STAGES; ++s) {
            kc_bar_init(full0 + 8 * s, 1);
            kc_bar_init(empty0 + 8 * s, WGS * 4);
        }
        for (int s = 0; s < AST; ++s) {
            kc_bar_init(afull0 + 8 * s, 32 * AW);
            kc_bar_init(aempty0 + 8 * s, WGS * 4);
        }
        kc_bar_init(aempty0 + 8 * AST, 1);   // the share from the other block of a cluster
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    if (warp >= WGS * 4) {
        // Producer warpgroup: its first warp streams x, the next AW the
        // weights; each refills a slot once every consumer warp has released
        // the slot's previous use (the warps after the AW weight warps have
        // no work).
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" :: "n"(PRODUCER_REGS));
        if (warp == WGS * 4) {
            // x: one bulk copy per group, issued by one lane.
            if (lane == 0) {
                kc_grid_wait();   // the preparation's stages (the weight warps start at once, but for stream-K blocks, which waited for their ticket)
                KC_TL(7);
                // Each segment: groups [sg0, sg0 + sn) of token tile tl, from
                // ring position i0 (without stream-K, one segment).
#if STREAMK
                for (int si = na > 0 ? 0 : 1; si < 2; ++si) {
                    const int tl = si ? tile : tilea, sg0 = si ? g0 : g0a, sn = si ? n : na, i0 = si ? na : 0;
#else
                {
                    const int tl = tile, sg0 = g0, sn = n, i0 = 0;
#endif
                    const unsigned char* xsrc = xp + (long long)tl * groups * STAGE_BYTES;
                    for (int j = 0; j < sn; ++j) {
                        const int i = i0 + j, s = i % STAGES;
                        if (i >= STAGES) kc_bar_wait(empty0 + 8 * s, ((i / STAGES) + 1) & 1);
                        kc_bar_expect(full0 + 8 * s, STAGE_BYTES);
                        kc_bulk(sbase + s * STAGE_BYTES, xsrc + (long long)(sg0 + j) * STAGE_BYTES, STAGE_BYTES, full0 + 8 * s);
                    }
                }
            }
        } else if (warp <= WGS * 4 + AW) {
            // Weights, scales and biases of AG groups per stage, by cp.async
            // from the AW warps' 32*AW lanes (16 lanes per 256-byte row of
            // words); each lane's arrival on afull fires once its copies
            // have landed.
            // Rows past the end repeat the last row.
            const unsigned char* wsrc = reinterpret_cast<const unsigned char*>(weight);
            const long long row_bytes = (long long)in_features * BITS / 8;
            const int qgroups = in_features / QGROUP;   // a row's scales
            const int pl = (warp - (WGS * 4 + 1)) * 32 + lane;   // this lane among the AW warps' lanes
            // Each segment: groups [sg0, sg0 + sn) of rows r0.., from weight
            // stage h0 of the ring (without stream-K, one segment).
#if STREAMK
            for (int si = na > 0 ? 0 : 1; si < 2; ++si) {
                const int r0 = si ? row0 : row0a, sg0 = si ? g0 : g0a, sn = si ? n : na, h0 = si ? na / AG : 0;
#else
            {
                const int r0 = row0, sg0 = g0, sn = n, h0 = 0;
#endif
                for (int i = 0; i < sn; i += AG) {
                    const int g = sg0 + i, h = h0 + i / AG, as = h % AST, ng = min(AG, sn - i);
                    if (h >= AST) kc_bar_wait(aempty0 + 8 * as, ((h / AST) + 1) & 1);
                    const u32 dst = abase + as * ASTAGE_BYTES;
                    const unsigned char* src = wsrc + (long long)g * GB;
                    // WPB-byte pieces of a row's AG groups: 16 bytes, or 8 at 3
                    // and 5 bits with ODDK, whose rows and odd groups are not
                    // whole 16-byte pieces (without ODDK ng is even there).
                    constexpr int WPB = ODDK && (BITS == 3 || BITS == 5) ? 8 : 16;
                    constexpr int PR = AG * GB / WPB;
                    auto piece = [&](int r, int k) {
                        const long long row = min(r0 + r, out_features - 1);
                        if (WPB == 16)
                            kc_cp16(dst + r * AROW_BYTES + k * 16, src + row * row_bytes + k * 16);
                        else
                            kc_cp8(dst + r * AROW_BYTES + k * 8, src + row * row_bytes + k * 8);
                    };
                    if (ng == AG) {
#pragma unroll 8
                        for (int c = pl; c < ROWS * PR; c += 32 * AW) piece(c / PR, c % PR);
                    } else {
                        const int pn = ng * GB / WPB;
                        for (int c = pl; c < ROWS * pn; c += 32 * AW) piece(c / pn, c % pn);
                    }
                    // Scales then biases, [ROWS][SROW] each, from entry sg of
                    // each row's qgroups (sg a multiple of SG: stages, and so
                    // shares and stream-K segments, start at multiples of AG
                    // groups).
                    const u32 sdst = dst + ASCALE_OFF;
                    const int sg = g * GROUP / QGROUP;
#if ODDK
                    // A window of SCP-entry pieces from the one holding the
                    // row's first entry e0, which lands at e0 % SCP in the
                    // window (kc_scale_shift). The last piece holds an entry
                    // of the row's run, so it lies inside the array (a
                    // multiple of 16 bytes: out_features is a multiple of 8).
                    {
                        const int cnt = ng * GROUP / QGROUP;           // the stage's entries a row
                        constexpr int SN = SG / SCP + 1;               // pieces a row at most
                        for (int c = pl; c < 2 * ROWS * SN; c += 32 * AW) {
                            const int arr = c / (ROWS * SN), rr = c % (ROWS * SN), r = rr / SN, k = rr % SN;
                            const long long row = min(r0 + r, out_features - 1);
                            const long long e0 = row * qgroups + sg;
                            const int sh = (int)(e0 % SCP);
                            if (k * SCP >= sh + cnt) continue;
                            const u32 d = sdst + (arr * ROWS + r) * (2 * SROW) + k * (2 * SCP);
                            const u16* src = (arr ? biases : scales) + (e0 - sh + k * SCP);
                            if (SCP == 4)
                                kc_cp8(d, src);
                            else
                                kc_cp4(d, src);
                        }
                    }
#else
                    // The row's 2*SG bytes in copies of up to 16 when every
                    // row's run is that aligned (qgroups a multiple of SG),
                    // else 4-byte ones (qgroups and sg are even: without
                    // ODDK, at 128 inputs a group there is an even number
                    // of them, and at 32 or 64 an even number of groups).
                    if (groups % AG == 0) {
                        constexpr int SP = 2 * SG >= 16 ? 16 : 2 * SG, SN = 2 * SG / SP;   // bytes a copy, copies a row
                        for (int c = pl; c < 2 * ROWS * SN; c += 32 * AW) {
                            const int arr = c / (ROWS * SN), rr = c % (ROWS * SN), r = rr / SN, k = rr % SN;
                            const long long row = min(r0 + r, out_features - 1);
                            const u32 d = sdst + (arr * ROWS + r) * (2 * SG) + k * SP;
                            const u16* src = (arr ? biases : scales) + row * qgroups + sg + k * (SP / 2);
                            if (SP == 16)
                                kc_cp16(d, src);
                            else if (SP == 8)
                                kc_cp8(d, src);
                            else
                                kc_cp4(d, src);
                        }
                    } else {
                        const int pairs = ng * GROUP / QGROUP / 2;
                        for (int c = pl; c < 2 * ROWS * pairs; c += 32 * AW) {
                            const int arr = c / (ROWS * pairs), rr = c % (ROWS * pairs);
                            const int r = rr / pairs, k = rr % pairs;
                            const long long row = min(r0 + r, out_features - 1);
                            kc_cp4(sdst + (arr * ROWS + r) * (2 * SG) + 4 * k, (arr ? biases : scales) + row * qgroups + sg + 2 * k);
                        }
                    }
#endif
                    kc_cp_arrive(afull0 + 8 * as);
                }
            }
        }
        return;
    }

    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" :: "n"(CONSUMER_REGS));
    const int wg = warp >> 2, wi = warp & 3;
    const int g8 = lane >> 2, tig = lane & 3;
    const int rl0 = 64 * wg + 16 * wi + g8;          // local rows rl0 and rl0 + 8
    const unsigned char* abuf = smem + STAGES * STAGE_BYTES;
    // This lane's words of group c (its 16-value run): with BITS 4 rows rl0
    // (.x .y) and rl0 + 8 (.z .w), two words each; with BITS 8 four words
    // of each row.
#if BITS == 8
    auto words = [&](int c) {
        const unsigned char* a = abuf + ((c / AG) % AST) * ASTAGE_BYTES + rl0 * AROW_BYTES + (c % AG) * GB + tig * 16;
        return kc_words{*reinterpret_cast<const uint4*>(a), *reinterpret_cast<const uint4*>(a + 8 * AROW_BYTES)};
    };
#elif KC_GENERAL
    const int run_base = (tig * RBYTES) & ~3;           // the word holding the run's first byte
    const u32 run_shift = 8 * ((tig * RBYTES) & 3);     // and the run's bits before it
    auto words = [&](int c) {
        return kc_words_at(abuf + ((c / AG) % AST) * ASTAGE_BYTES + rl0 * AROW_BYTES + (c % AG) * GB + run_base,
                           8 * AROW_BYTES, run_shift);
    };
#else
    auto words = [&](int c) {
        const unsigned char* a = abuf + ((c / AG) % AST) * ASTAGE_BYTES + rl0 * AROW_BYTES + (c % AG) * GB + tig * 8;
        const uint2 lo = *reinterpret_cast<const uint2*>(a);
        const uint2 hi = *reinterpret_cast<const uint2*>(a + 8 * AROW_BYTES);
        return uint4{lo.x, lo.y, hi.x, hi.y};
    };
#endif
    // Scales (.x rl0, .y rl0 + 8) and biases (.z, .w) of group c.
    // The lane's entry in a stage row's scales for group c: with QGROUP 32
    // a group of 64 inputs has two, and the lane's run is in the first
    // (tig 0, 1) or the second; with 128 two groups share one.
    // With ODDK the rows' entries start kc_scale_shift into their windows:
    // row0 + rl0's first entry of a stage is (row0 + rl0) * qgroups + sg,
    // where row0 (a multiple of 64) and sg (of SG) are multiples of SCP;
    // rl0 + 8 is at the same offset. Rows past the end, which copy row
    // out_features - 1, may then read another entry: their outputs are
    // never stored, and no other row's sums depend on them.
#if ODDK
    const int kc_scale_shift = rl0 * (in_features / QGROUP) % SCP;
#else
    constexpr int kc_scale_shift = 0;
#endif
    auto scaling = [&](int c) {
        const int e = kc_scale_shift + (QGROUP == 32 ? 2 * (c % AG) + (tig >> 1) : (c % AG) * GROUP / QGROUP);
        const unsigned char* a = abuf + ((c / AG) % AST) * ASTAGE_BYTES + ASCALE_OFF + rl0 * (2 * SROW) + e * 2;
        const u16* p = reinterpret_cast<const u16*>(a);
        const int row8 = 8 * SROW, arr = ROWS * SROW;   // in u16 units
        return uint4{p[0], p[row8], p[arr], p[arr + row8]};
    };

    float acc[NACC];

    // Group c's A fragments as fp16 weights s*q + b (one rounding). Each
    // run of 8 values (k .. k+7) gives pairs j = 0..3 of values (k+j,
    // k+j+4): with BITS 4 nibbles (j, j+4) of one word, odd j read as
    // 1024 + 16q; with BITS 8 byte j of its first word and byte j of its
    // second.
#if BITS == 8
    auto dequant = [&](u32 (&fa)[16], const kc_words cw, const uint4 sc) {
        const u32 s0 = kc_f16x2(kc_bf16(sc.x), kc_bf16(sc.x)), s1 = kc_f16x2(kc_bf16(sc.y), kc_bf16(sc.y));
        const u32 b0 = kc_f16x2(kc_bf16(sc.z), kc_bf16(sc.z)), b1 = kc_f16x2(kc_bf16(sc.w), kc_bf16(sc.w));
        const u32 one = 0x3C003C00u, m1024 = 0xE400E400u;
#pragma unroll
        for (int h = 0; h < 2; ++h) {   // values 0..7 of the run (k16 steps 0, 1), then 8..15 (steps 2, 3)
            const u32 sr[2] = {s0, s1}, br[2] = {b0, b1};
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const uint4 w = r ? cw.hi : cw.lo;
                const u32 a = h ? w.z : w.x, b = h ? w.w : w.y;
                fa[8 * h + r] = kc_hfma2(kc_hfma2(kc_byte16<0>(a, b), one, m1024), sr[r], br[r]);
                fa[8 * h + 2 + r] = kc_hfma2(kc_hfma2(kc_byte16<1>(a, b), one, m1024), sr[r], br[r]);
                fa[8 * h + 4 + r] = kc_hfma2(kc_hfma2(kc_byte16<2>(a, b), one, m1024), sr[r], br[r]);
                fa[8 * h + 6 + r] = kc_hfma2(kc_hfma2(kc_byte16<3>(a, b), one, m1024), sr[r], br[r]);
            }
        }
    };
#elif KC_GENERAL
    auto dequant = [&](u32 (&fa)[16], const kc_words& cw, const uint4 sc) {
        const u32 s0 = kc_f16x2(kc_bf16(sc.x), kc_bf16(sc.x)), s1 = kc_f16x2(kc_bf16(sc.y), kc_bf16(sc.y));
        const u32 b0 = kc_f16x2(kc_bf16(sc.z), kc_bf16(sc.z)), b1 = kc_f16x2(kc_bf16(sc.w), kc_bf16(sc.w));
        const u32 sr[2] = {s0, s1}, br[2] = {b0, b1};
#pragma unroll
        for (int p = 0; p < 8; ++p) {   // pair p: k16 step p/2, the fragment's first (p even) or second k half
            const int e = kc_pair_bit(kc_pi(p), kc_pj(p));   // a constant once unrolled
#pragma unroll
            for (int r = 0; r < 2; ++r)
                fa[4 * (p >> 1) + 2 * (p & 1) + r] =
                    kc_hfma2(kc_hfma2(kc_pair16(cw.r[r], kc_pi(p), kc_pj(p)), kc_unit(e), kc_offset(e)), sr[r], br[r]);
        }
    };
#else
    auto dequant = [&](u32 (&fa)[16], const uint4 cw, const uint4 sc) {
        const u32 s0 = kc_f16x2(kc_bf16(sc.x), kc_bf16(sc.x)), s1 = kc_f16x2(kc_bf16(sc.y), kc_bf16(sc.y));
        const u32 b0 = kc_f16x2(kc_bf16(sc.z), kc_bf16(sc.z)), b1 = kc_f16x2(kc_bf16(sc.w), kc_bf16(sc.w));
        const u32 one = 0x3C003C00u, m1024 = 0xE400E400u, sixteenth = 0x2C002C00u, m64 = 0xD400D400u;
#pragma unroll
        for (int h = 0; h < 2; ++h) {   // words .x/.z (k16 steps 0, 1), then .y/.w (steps 2, 3)
            const u32 wr[2] = {h ? cw.y : cw.x, h ? cw.w : cw.z};
            const u32 sr[2] = {s0, s1}, br[2] = {b0, b1};
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const u32 w8 = wr[r] >> 8;
                const u32 q0 = kc_hfma2(kc_nib16(wr[r], 0x000F000Fu), one, m1024);
                const u32 q1 = kc_hfma2(kc_nib16(wr[r], 0x00F000F0u), sixteenth, m64);
                const u32 q2 = kc_hfma2(kc_nib16(w8, 0x000F000Fu), one, m1024);
                const u32 q3 = kc_hfma2(kc_nib16(w8, 0x00F000F0u), sixteenth, m64);
                // step 2h takes pairs j = 0, 1; step 2h + 1 pairs j = 2, 3
                fa[8 * h + r] = kc_hfma2(q0, sr[r], br[r]);
                fa[8 * h + 2 + r] = kc_hfma2(q1, sr[r], br[r]);
                fa[8 * h + 4 + r] = kc_hfma2(q2, sr[r], br[r]);
                fa[8 * h + 6 + r] = kc_hfma2(q3, sr[r], br[r]);
            }
        }
    };
#endif

    // One group: its wgmmas (fragments cur, x slot of grp) go in flight;
    // then the group FSETS - 1 back is waited for, which frees its x slot
    // and its fragment set nxt, into which the next group before `end` is
    // dequantised.
    auto step = [&](u32 (&cur)[16], u32 (&nxt)[16], int grp, int end) {
        const int slot = grp % STAGES;
        kc_bar_wait(full0 + 8 * slot, (grp / STAGES) & 1);
#ifdef KC_TIMELINE
        if (grp == 0 && tid == 0) KC_TL(3);
#endif
        const u32 bstep = sbase + slot * STAGE_BYTES;
        kc_fence_words(cur);
        kc_fence_operands(acc);
        KC_WG_FENCE();
#pragma unroll
        for (int st = 0; st < 4; ++st)
            kc_wgmma(acc, cur[4 * st], cur[4 * st + 1], cur[4 * st + 2], cur[4 * st + 3],
                     kc_desc(bstep + st * STEP_BYTES));
        KC_WG_COMMIT();
        kc_fence_operands(acc);
        kc_wg_wait<FSETS - 1>();
        kc_fence_operands(acc);
        if (grp >= FSETS - 1) {
            __syncwarp();
            if (lane == 0) kc_bar_arrive(empty0 + 8 * ((grp - (FSETS - 1)) % STAGES));
        }
        if (grp + 1 < end) {
            const int h = (grp + 1) / AG;
            if ((grp + 1) % AG == 0) kc_bar_wait(afull0 + 8 * (h % AST), (h / AST) & 1);
            const auto cw = words(grp + 1);
            const uint4 sc = scaling(grp + 1);
            if (grp % AG == AG - 1) {   // the stage holding grp is read in full
                __syncwarp();
                if (lane == 0) kc_bar_arrive(aempty0 + 8 * ((grp / AG) % AST));
            }
            dequant(nxt, cw, sc);
        }
    };

    // The epilogue's token scales and bias, loaded while the rings fill
    // (read after the epilogue's first consumer barrier); the scales, and
    // with a split K the cleared sums, are xprep's, so wait for it.
    kc_grid_wait();
    if (tid == 0) KC_TL(1);
    const float* sigma = reinterpret_cast<const float*>(xp + kc_sigma_offset(tokens, in_features));
    for (int i = tid; i < BN; i += WGS * 128) ssigma[i] = tile * BN + i < tokens ? sigma[tile * BN + i] : 0.f;
    for (int i = tid; i < ROWS; i += WGS * 128) sbias[i] = bias != nullptr ? bias[min(row0 + i, out_features - 1)] : (u16)0;

    // The rings' groups [first, end) into acc, from zero: FSETS fragment
    // sets, rotated by unrolling the group loop FSETS times.
    u32 fa0[16], fa1[16];
#if FSETS == 3
    u32 fa2[16];
#endif
    auto run = [&](int first, int end) {
#pragma unroll
        for (int i = 0; i < NACC; ++i) acc[i] = 0.f;
        kc_bar_wait(afull0 + 8 * ((first / AG) % AST), (first / AG / AST) & 1);
        if (tid == 0) KC_TL(2);
        dequant(fa0, words(first), scaling(first));
        int grp = first;
#if FSETS == 2
        for (; grp + 1 < end; grp += 2) {
            step(fa0, fa1, grp, end);
            step(fa1, fa0, grp + 1, end);
        }
        if (grp < end) step(fa0, fa1, grp, end);
#else
        for (; grp + 2 < end; grp += 3) {
            step(fa0, fa1, grp, end);
            step(fa1, fa2, grp + 1, end);
            step(fa2, fa0, grp + 2, end);
        }
        if (grp < end) step(fa0, fa1, grp, end);
        if (grp + 1 < end) step(fa1, fa2, grp + 1, end);
#endif
        kc_wg_wait<0>();
        kc_fence_operands(acc);
    };
#if STREAMK
    float4* const partials = streamk ? kc_partials(xp, tokens, in_features, shared_tiles) : nullptr;
    int* const counters = streamk ? kc_counters(xp, tokens, in_features) : nullptr;
    if (na > 0) {
        // Segment A, where the block contributes: its sums go to its partial
        // as they are (the finisher scales the tile's total). The last
        // segment then runs on in the rings: its steps release segment A's
        // last x slots as one loop would have; the last weight stage, which
        // the loop keeps, is given back here.
        run(0, na);
        kc_store_partial(acc, partials + (long long)skb * (NACC / 4) * (WGS * 128), tid, counters + thi);
        __syncwarp();
        if (lane == 0) kc_bar_arrive(aempty0 + 8 * (((na - 1) / AG) % AST));
    }
#endif
    run(na, na + n);
    if (tid == 0) KC_TL(4);
#if STREAMK
    if (streamk && wait < 0) {   // a contributor to the tile only
        kc_store_partial(acc, partials + (long long)skb * (NACC / 4) * (WGS * 128), tid, counters + tlo);
        if (tid == 0) KC_TL(6);
        return;
    }
    if (streamk && wait > 0) {
        // A finisher: once the tile's counter shows its `wait` contributors
        // (the stream-K blocks just before this one), add their partials.
        // The wait is bounded: a counter that never fills (a launch the
        // plan would not make, or blocks that could not all be placed)
        // stops the kernel after 10 s rather than hanging the device.
        if (tid == 0) {
            const unsigned long long start = kc_gtime();
            while (kc_load_acquire(counters + tlo) < wait) {
                if (kc_gtime() - start > 10000000000ull) asm volatile("trap;");
                __nanosleep(64);
            }
        }
        kc_consumer_sync();
        const float4* part = partials + tid;
        for (int c = skb - wait; c < skb; ++c) {
            // Four loads at a time: with all NACC / 4 hoisted ahead of the
            // adds they would spill.
#pragma unroll
            for (int k = 0; k < NACC / 16; ++k) {
                float4 v[4];
#pragma unroll
                for (int j = 0; j < 4; ++j) v[j] = __ldcg(part + ((long long)c * (NACC / 4) + 4 * k + j) * (WGS * 128));
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    float* a = acc + 16 * k + 4 * j;
                    a[0] += v[j].x; a[1] += v[j].y; a[2] += v[j].z; a[3] += v[j].w;
                }
                asm volatile("" ::: "memory");
            }
        }
    }
#endif

    // Epilogue, once every consumer is done with the x ring: the tile as
    // bf16 of acc * sigma + bias into shared memory (element 4j+e is local
    // row rl0 (e < 2) or rl0 + 8, local token 8j + 2tig + (e&1)), then
    // coalesced 16-byte stores of 8 rows each.
#if CLUSTER
    if (nsplit > 1) {
        // The tile's two K shares are the blocks of one cluster, block
        // (rank) r finishing rows [r*QROWS, (r+1)*QROWS) of the tile. Once
        // the block's consumers are past the main loop, each warp writes its
        // rows' acc * sigma in fp32 ([BN][QTILE_LD]) into this block's
        // shared memory: as share `split` where this block finishes the
        // rows, else into the outgoing buffer. Past a cluster barrier (the
        // other block is done with its rings too), one bulk copy moves the
        // outgoing buffer into the other block's share `split`, counted on
        // that block's mbarrier. Then each block adds its rows' shares in
        // order, adds the bias and stores y: no workspace sums, no reduce
        // launch, and a result that does not depend on timing. (Storing the
        // shares into the other block 4 bytes at a time took 2.2 us at
        // 4096^2 and 4.8 at 28672->8192, 256 tokens: bench/NOTES.md,
        // sixteenth session.)
        const u32 xbar = aempty0 + 8 * AST;
        const u32 other = (u32)(split ^ 1);
        const int owner = (64 * wg + 16 * wi) / QROWS, rq = rl0 - owner * QROWS;
        float* const out = reinterpret_cast<float*>(smem + (owner == split ? split : CLUSTER) * SHARE_BYTES);
        kc_consumer_sync();   // every consumer warp is past the main loop: the rings are free
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
            const float2 sg = *reinterpret_cast<const float2*>(ssigma + 8 * j + 2 * tig);
#pragma unroll
            for (int e = 0; e < 4; ++e)
                out[(8 * j + 2 * tig + (e & 1)) * QTILE_LD + rq + 8 * (e >> 1)] = acc[4 * j + e] * ((e & 1) ? sg.y : sg.x);
        }
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");   // the outgoing buffer, to the bulk copy
        kc_cluster_sync();
        if (tid == 0) {
            KC_TL(5);
            kc_bar_expect(xbar, SHARE_BYTES);   // the other block's share, into this one's
            asm volatile("cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                         :: "r"(kc_cluster_addr(sbase + split * SHARE_BYTES, other)), "r"(sbase + CLUSTER * SHARE_BYTES),
                            "n"(SHARE_BYTES), "r"(kc_cluster_addr(xbar, other)) : "memory");
        }
        kc_bar_wait(xbar, 0);
        // This block has both shares; the other may exit once it has too
        // (its copy reads this block's outgoing buffer until then).
        asm volatile("barrier.cluster.arrive.aligned;" ::: "memory");
        if (tid == 0) KC_TL(9);
        const float* sh = reinterpret_cast<const float*>(smem);
        constexpr int RUNS = BN * (QROWS / 8) / (WGS * 128);   // 8-row runs per thread
        static_assert(BN * (QROWS / 8) % (WGS * 128) == 0, "every thread takes the same number of runs");
#pragma unroll
        for (int it = 0; it < RUNS; ++it) {
            const int c = tid + it * WGS * 128;
            const int tl = c / (QROWS / 8), rloc = 8 * (c % (QROWS / 8));
            const int tok = tile * BN + tl, rt = split * QROWS + rloc, row = row0 + rt;
            const float* p0 = sh + tl * QTILE_LD + rloc;
            const float* p1 = p0 + BN * QTILE_LD;
            const float4 a0 = *reinterpret_cast<const float4*>(p0), a1 = *reinterpret_cast<const float4*>(p0 + 4);
            const float4 b0 = *reinterpret_cast<const float4*>(p1), b1 = *reinterpret_cast<const float4*>(p1 + 4);
            const kc_u4 bw = *reinterpret_cast<const kc_u4*>(sbias + rt);
            // the shares in order (share 0 first), then the bias
            const float v[8] = {a0.x + b0.x + kc_bf16(bw.x & 0xFFFFu), a0.y + b0.y + kc_bf16(bw.x >> 16),
                                a0.z + b0.z + kc_bf16(bw.y & 0xFFFFu), a0.w + b0.w + kc_bf16(bw.y >> 16),
                                a1.x + b1.x + kc_bf16(bw.z & 0xFFFFu), a1.y + b1.y + kc_bf16(bw.z >> 16),
                                a1.z + b1.z + kc_bf16(bw.w & 0xFFFFu), a1.w + b1.w + kc_bf16(bw.w >> 16)};
            u32 o[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(o[i]) : "f"(v[2 * i + 1]), "f"(v[2 * i]));
            if (tok < tokens && row < out_features)
                *reinterpret_cast<kc_u4*>(y + (long long)tok * out_features + row) = kc_u4{o[0], o[1], o[2], o[3]};
        }
        if (tid == 0) KC_TL(6);
        asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
        return;
    }
#endif
    kc_consumer_sync();
    if (nsplit > 1) {
        // Split along K: this block's share of acc * sigma is added into
        // slice split/2 of the fp32 sums in the workspace, which it shares
        // with one other share at most (bias and bf16 come in
        // affine_wg_reduce), through shared memory (both rings are free
        // now) as 16-byte reductions of 4 rows each; the last of an odd
        // number of shares has its slice alone and stores it.
        float* ftile = reinterpret_cast<float*>(smem);
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
            const float2 sg = *reinterpret_cast<const float2*>(ssigma + 8 * j + 2 * tig);
#pragma unroll
            for (int e = 0; e < 4; ++e)
                ftile[(8 * j + 2 * tig + (e & 1)) * FTILE_LD + rl0 + 8 * (e >> 1)] = acc[4 * j + e] * ((e & 1) ? sg.y : sg.x);
        }
        kc_consumer_sync();
        const int row_first = full * ROWS, width = out_features - row_first;
        const bool alone = splits % 2 == 1 && split == splits - 1;
        float* sum = reinterpret_cast<float*>(xp + kc_sum_offset(tokens, in_features)) + (long long)(split / 2) * tokens * width;
#pragma unroll 8
        for (int c = tid; c < BN * (ROWS / 4); c += WGS * 128) {
            const int tl = c / (ROWS / 4), rc = c % (ROWS / 4);
            const int tok = tile * BN + tl, row = row0 + 4 * rc;
            if (tok < tokens && row < out_features && !WG_DIAG_NORED) {
                const float4 v = *reinterpret_cast<const float4*>(ftile + tl * FTILE_LD + 4 * rc);
                float* const dst = sum + (long long)tok * width + row - row_first;
                if (alone)
                    __stcg(reinterpret_cast<float4*>(dst), v);
                else
                    asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};"
                                 :: "l"(dst), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w) : "memory");
            }
        }
        return;
    }
    // The tile as bf16 into shared memory ([BN][OTILE_LD], rows
    // contiguous) by stmatrix .trans: each 8x8 matrix of the accumulator
    // layout (8 rows of 8 tokens, a lane holding two tokens of one row) is
    // stored as 8 tokens of 8 rows; a lane gives the address of token ri
    // of matrix mi (0, 1: rows rl0 - g8 and + 8 of token block j; 2, 3:
    // those of block j + 1). Then 16-byte stores of 8 rows each.
    if (tid == 0) KC_TL(5);
    const float b0 = kc_bf16(sbias[rl0]), b1 = kc_bf16(sbias[rl0 + 8]);
    {
        const int mi = lane >> 3, ri = lane & 7;
        const u32 st_base = sbase + (u32)(((8 * (mi >> 1) + ri) * OTILE_LD + 64 * wg + 16 * wi + 8 * (mi & 1)) * 2);
#pragma unroll
        for (int j = 0; j < BN / 8; j += 2) {
            const float2 s0 = *reinterpret_cast<const float2*>(ssigma + 8 * j + 2 * tig);
            const float2 s1 = *reinterpret_cast<const float2*>(ssigma + 8 * j + 8 + 2 * tig);
            u32 r[4];
            asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r[0]) : "f"(acc[4 * j + 1] * s0.y + b0), "f"(acc[4 * j] * s0.x + b0));
            asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r[1]) : "f"(acc[4 * j + 3] * s0.y + b1), "f"(acc[4 * j + 2] * s0.x + b1));
            asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r[2]) : "f"(acc[4 * j + 5] * s1.y + b0), "f"(acc[4 * j + 4] * s1.x + b0));
            asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r[3]) : "f"(acc[4 * j + 7] * s1.y + b1), "f"(acc[4 * j + 6] * s1.x + b1));
            asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};"
                         :: "r"(st_base + (u32)(8 * j * OTILE_LD * 2)), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]) : "memory");
        }
    }
    kc_consumer_sync();
    if (tid == 0) KC_TL(9);
    const u16* otile = reinterpret_cast<const u16*>(smem);
    constexpr int RUNS = BN * (ROWS / 8) / (WGS * 128);   // 8-row runs per thread
    static_assert(BN * (ROWS / 8) % (WGS * 128) == 0, "every thread takes the same number of runs");
#pragma unroll
    for (int it = 0; it < RUNS; ++it) {
        const int c = tid + it * WGS * 128;
        const int tl = c / (ROWS / 8), rc = c % (ROWS / 8);
        const int tok = tile * BN + tl, row = row0 + 8 * rc;
        const kc_u4 v = *reinterpret_cast<const kc_u4*>(otile + tl * OTILE_LD + 8 * rc);
        if (tok < tokens && row < out_features)
            *reinterpret_cast<kc_u4*>(y + (long long)tok * out_features + row) = v;
    }
    if (tid == 0) KC_TL(6);
}

// ---------------------------------------------------------------------------
// Reduce (split-K only, after affine_wg): y = bf16(the slices of the sums
// added in order + bias), 8 outputs per thread, grid-stride.
extern "C" __global__ void __launch_bounds__(256)
affine_wg_reduce(const unsigned char* __restrict__ ws, const u16* __restrict__ bias, u16* __restrict__ y,
                 int tokens, int in_features, int out_features, int splits, int row_first)
{
    kc_grid_wait();   // the main kernel's sums
    const float* sum = reinterpret_cast<const float*>(ws + kc_sum_offset(tokens, in_features));
    const int width = out_features - row_first, per_tok = width / 8, slices = (splits + 1) / 2;
    const long long slice = (long long)tokens * width;
    const long long chunks = (long long)tokens * per_tok;
    for (long long c = blockIdx.x * 256ll + threadIdx.x; c < chunks; c += (long long)gridDim.x * 256) {
        const long long tok = c / per_tok;
        const int col = (int)(c - tok * per_tok) * 8, row = row_first + col;
        float v[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
        for (int j0 = 0; j0 < slices; j0 += 2) {
            // Two slices' loads in flight at once, then their sums in order.
            float4 a[2], b[2];
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                a[i] = b[i] = make_float4(0.f, 0.f, 0.f, 0.f);
                if (j0 + i < slices) {
                    const float* p = sum + (j0 + i) * slice + tok * width + col;
                    a[i] = *reinterpret_cast<const float4*>(p);
                    b[i] = *reinterpret_cast<const float4*>(p + 4);
                }
            }
#pragma unroll
            for (int i = 0; i < 2; ++i)
                if (j0 + i < slices) {
                    v[0] += a[i].x; v[1] += a[i].y; v[2] += a[i].z; v[3] += a[i].w;
                    v[4] += b[i].x; v[5] += b[i].y; v[6] += b[i].z; v[7] += b[i].w;
                }
        }
        u32 o[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            float lo = v[2 * i], hi = v[2 * i + 1];
            if (bias != nullptr) {
                lo += kc_bf16(bias[row + 2 * i]);
                hi += kc_bf16(bias[row + 2 * i + 1]);
            }
            asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(o[i]) : "f"(hi), "f"(lo));
        }
        *reinterpret_cast<kc_u4*>(y + tok * out_features + row) = kc_u4{o[0], o[1], o[2], o[3]};
    }
}
