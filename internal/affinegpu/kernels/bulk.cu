// bulk.cu: decode kernel for the affine family (MLX affine-quantised
// weights) in which copying and computing are separate warps. A producer
// warp (one per part of a stage, see PARTS) keeps a block-wide ring of
// shared-memory stages full with tensor copies (TMA); the consumer warps
// only compute. The gemv plugin serves it as its gemv/bulk candidate at 1..8
// tokens, and the qmm plugin as qmm/bulk at 9..16 tokens with K in slices
// (SPLITK); the kernel is correct for 1..16 tokens either way
// (scripts/affine_kernels.py tests them).
//
//   y[t][o] = sum_i x[t][i] * (scale[o][i/g] * q[o][i] + biases[o][i/g])  (+ bias[o])
//
// The arithmetic is the stream kernel's (internal/affinegpu/kernels/stream.cu):
// mma.sync m16n8k16 with the weights as A, unpacked in registers, x as B,
// and the group's scale and bias folded in from the accumulator and an
// x-sum mma; or (FP16) fp16 operands, below.
//
// Status (bench/NOTES.md, seventh to ninth sessions, H200, 1 token, int4
// g64): the copies alone move the weights at 4.14 TB/s. At 8192->28672 the
// kernel takes 33.7-34.8 us with FP16, stages in two parts and early start
// (3.8-3.9 TB/s), and 28672->8192 35.1-37.8 us in 64-row tiles; the stream
// kernel takes 38-42 us at both. Eleventh session, with constant offsets,
// the end path, the row order (FASTADDR, ENDR, ROWPERM) and 32-row tiles
// in one part with FP16, four runs: 8192->28672 32.6-33.5 us (3.94-4.05
// TB/s), 28672->8192 33.5-35.2 (3.75-3.94 TB/s), 4096->14336 11.6-12.4,
// 14336->4096 11.0-11.2, 4096^2 4.6-4.9. Tenth session: two warps on each stage
// where stages come in one part (14336->4096 11.6-11.8 us against
// 12.5-12.6), and stages of 24 to 56 groups where 16 do not divide a row
// (13824->5120 19.4-19.6 against 31.1-31.2). With the copies alone (no
// arithmetic) the kernel reads as fast as a plain read of the same bytes
// at every measured shape but 28672->8192 (4096->14336 9.2 us, the read
// 9.3; 28672->8192 32.7 against 30.5): the 1.5 to 4.2 us above that are
// the consumers'. FP16 is slower where in_features is large (14336,
// 28672): every block converts the whole of x before it starts
// (twenty-fifth session: with DP2A and x's loads in one round, not at
// 14336 inputs, 10.5 us against 11.1; still at 28672). At 4 to
// 16 tokens (above 8 in two n-tiles) with all of K per block the kernel is
// correct but slower than the stream kernel: x staged per stage crowds the
// ring, and its few consumer warps leave the arithmetic's latency exposed
// (tenth session: 128-row tiles with warps sharing stages did not change
// that). Twelfth session: at 9 to 16 tokens with K in slices (SPLITK, fp16
// x resident per slice) it is faster than the stream kernel at three of
// the five benchmark shapes, level at 14336->4096 (20.5 against
// 20.8-21.0 us) and slower at 4096^2; the arithmetic bounds it: at
// 8192->28672 60.9 us, 42.4 with the consumers releasing stages unread
// (KC_DIAG_NOMATH), 36.3 also without the adds into the workspace.
//
// FP16 (4 bits): the consumer warps first convert x, once per block,
// into shared memory that stays resident: per (token, group) sigma = the
// smallest power of two >= max|x|, and every 8 values x0..x7 become the
// fp16 pairs (x0, x4), (x1/16, x5/16), (x2, x6), (x3/16, x7/16), divided
// by sigma. That is exact while the result stays a normal fp16 (|x| >=
// 2^-14 sigma, 2^-10 sigma at the positions divided by 16); smaller values
// round, and each adds up to about 2^-15 sigma of error (E and O below are
// exact, so the rounding is not cancelled). The tests use x uniform in
// [-1, 1]; groups with large outliers are not covered yet. A packed word
// w then unpacks with one shift and four lop3 into fp16 pairs 1024 + v
// (nibbles 0, 4, 2, 6) and 1024 + 16v (nibbles 1, 5, 3, 7), which meet
// those x pairs in an fp16 mma; per group
// and token the kernel keeps sigma, -(1024*E + 64*O) and E + O (E, O: sums
// of x over the even and odd positions of each 8), and folds
//   acc += s*(sigma*t - (1024E + 64O)) + b*(E + O)
// in three fused multiply-adds (FOLD3), so no x-sum mma and no x permutes
// remain in the loop.
//
// DP2A (FP16, one token): no mma. At one token the mma multiplies 8
// columns of x of which 7 are copies, and with it the SM ran at 1.79 GHz
// against 1.97 without it (twenty-fifth session). x is converted instead
// to int16, x/sigma in units of 1/XQ (2^-14, or 2^-13 in groups of 128),
// every 8 values x0..x7 as the pairs (x0, x2), (x4, x6), (x1, x3), (x5,
// x7), and what that rounding left to int8 in units of 1/(128*XQ), as the
// bytes (x0, x2, x4, x6) and (x1, x3, x5, x7) (without them a group's small
// values lost their precision beside an outlier: channels 100 times the
// rest failed the check). A packed word w gives the bytes w & 0x0F0F0F0F
// (v0, v2, v4, v6) and (w >> 4) & 0x0F0F0F0F (v1, v3, v5, v7); four dp2a
// add the 8 products into a 32-bit sum, starting at 1.5*2^23: exact, and
// its bits are the float 1.5*2^23 + sum (|sum| < 2^22). Each lane sums its
// own VPT values (16 in groups of 64) of each of its rows and group (the 4
// lanes of a row take the group's quarters), folds acc += s*(sigma/XQ*sum)
// + b*(E + O)/4, and the 4 lanes add their acc before the tile's sums are
// flushed (kc_quad_sum). The residuals' products (two dp4a a word) are
// added only for the groups that need them (XLO), once the warp's run of
// the stage is done (kc_residuals). Same call, one token, UNR 8, us,
// against the mma with UNR 8: 4096->14336 10.3 against 10.6, 4096x4096 4.7
// against 4.7, 4096->6144 6.0 against 6.1, 8192->28672 32.2 against 32.2
// (the mma with UNR 4: 10.9, 4.8, 6.3, 32.0), with the residuals in every
// group. The conversion (kc_convert_x_int) costs about 10 instructions a
// value, on four lanes a group (XPC). With both (twenty-sixth session, the
// final run, us): 4096->14336 9.7, 14336->4096 9.8 (no hold past 8192
// inputs), 4096x4096 4.1, 8192->28672 32.4. The conversion alone, still
// on two lanes a group, read 9.9 / 10.7 / 4.4 at the first three (call
// 4); the one before it (about 20 instructions a value) 10.2 / 11.2 / 4.5
// (call 2, the same machine).
//
// XLO (DP2A): which groups get x's residuals. int16 alone rounds each
// value by at most sigma/(2*XQ); bf16 values of at least sigma/128 are
// exact in it, smaller ones are not, and beside a group's outlier those
// are most of them. A group goes without its residuals where what int16
// left, sum|residual|, is at most 2^-10 of sum|x| less the group's max|x|
// (the values but the largest, whose own rounding the sum's other values
// would otherwise excuse): its error is then bounded as a bf16 rounding of
// those values would be, with a factor of 2 to spare. Random inputs skip
// them everywhere (bf16 in [-1, 1] is exact down to 1/128); the harness's
// cases with channels 100 and 1000 times the rest take them in 22 of 64,
// 20 of 64, 32 of 32 and 139 of 224 groups. Twenty-sixth session, same call, one
// token, us, with the old conversion, against residuals everywhere (XLO
// 1) and none (XLO 0, wrong beside outliers): 4096->14336 10.2 / 10.3 /
// 10.1, 14336->4096 11.2 / 11.6 / 11.4, 4096x4096 4.5 / 4.7 / 4.4,
// 8192->28672 33.0 / 33.0 / 32.8.
//
// Compiled at run time by NVRTC for sm_90 (cp.async.bulk, tensor copies
// and mbarrier transaction counts). The file compiles standalone: no
// #include (bf16 travels as unsigned short). NVRTC options: -arch=sm_90
// -std=c++17 plus the -D macros below. Entry point is extern "C"
// (unmangled).
//
// ENTRY POINT
//   extern "C" __global__ void affine_bulk(
//       const __grid_constant__ kc_tmap wmap,  // tensor map of the weights
//       const __grid_constant__ kc_tmap smap,  // tensor map of the scales
//       const __grid_constant__ kc_tmap bmap,  // tensor map of the biases
//       const unsigned short* x,       // bf16 [tokens][in_features]
//       const unsigned short* bias,    // bf16 [out_features], or 0 (null) for none
//       unsigned short*       y,       // bf16 [tokens][out_features]
//       int tokens, int in_features, int out_features)
//   kc_tmap is a CUtensorMap (128 bytes, 64-byte aligned) passed by value:
//   the maps sit at parameter offsets 0, 128 and 256, x at 384. Each is
//   made by cuTensorMapEncodeTiled, rank 2, dims and box innermost first,
//   element strides {1, 1}:
//     wmap  the weights, uint32 [out_features][in_features*BITS/32]:
//           CU_TENSOR_MAP_DATA_TYPE_UINT32, dims {in*BITS/32, out}, row
//           stride in*BITS/8 bytes, box {32 words, TR rows},
//           CU_TENSOR_MAP_SWIZZLE_128B
//     smap  the scales, bf16 [out_features][in_features/GROUP]:
//           CU_TENSOR_MAP_DATA_TYPE_UINT16, dims {in/GROUP, out}, row stride
//           in/GROUP*2 bytes, box {U, TR}, CU_TENSOR_MAP_SWIZZLE_NONE
//     bmap  the biases, bf16 [out_features][in_features/GROUP]: as smap
//   and for all three CU_TENSOR_MAP_INTERLEAVE_NONE,
//   CU_TENSOR_MAP_L2_PROMOTION_L2_128B (what was measured; it affects
//   speed only) and CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE: rows past
//   out_features arrive as zeros.
//   Buffers must be 16-byte aligned (tensor maps and bulk copies need it);
//   out_features % 8 == 0; 1 <= tokens <= XT; in_features % (U*GROUP) == 0
//   (with SPLITK, kin % (U*GROUP) == 0)
//   (every copy is whole 16-byte pieces, and so are the row strides).
//
// MACROS (-D, all required unless a default is given)
//   BITS   4 or 8               GROUP  32, 64 or 128
//   MT     16-row m-tiles per tile (1, 2 or 4): a tile is TR = 16*MT rows
//   CW     consumer warps per block (1..16), in CW/WK stage groups
//   WK     consumer warps sharing each stage (default 1), a divisor of CW:
//          warp w is warp j = w % WK of stage group w / WK and takes the
//          j-th run of U/PARTS/WK consecutive groups of each part of the
//          group's stages (with FASTADDR 0: groups j, j + WK, ...), so a
//          stage's latency is shared out without smaller stages
//   U      groups per stage, a multiple of 8 up to 64 (scales move in
//          16-byte pieces): a stage holds SEG = U*GROUP*BITS/8 bytes of
//          each of the tile's rows, whole 128-byte swizzled lines
//   NS     stages in the ring (2..16), a multiple of SG = CW/WK: stage
//          group j then owns slots j, j+SG, ..., so the stage a warp waits
//          for always follows one it consumed itself in the same slot (a
//          parity wait cannot tell the phase it wants from the one before;
//          with NS < SG a warp passed its first wait before any data came)
//   XT     token rows of x a stage holds (1..16); the host passes the
//          token count. Tokens are the mma's B columns, in NT = ceil(XT/8)
//          n-tiles of 8 that share each unpacked A fragment
//   FP16   1: fp16 operands, x converted once per block and resident (4
//          bits only; default 0): see "FP16" above
//   PARTS  1 (default), 2 or 4: a stage is copied in PARTS parts, each with
//          its own pair of barriers and its own producer warp, and the
//          consumer releases each part but the last as soon as it has used
//          it, so the refill of the next stage in the slot overlaps the
//          arithmetic of the rest (the scales and biases come with the
//          first part, into one of two buffers by round of the ring). SEG
//          must split into whole 128-byte lines and U into whole groups,
//          and each part's groups among the WK warps
//   DP2A   FP16 at one token (XT 1), 1 or 0 (default): see "DP2A" above
//   XLO    DP2A: 2 (default) x's int8 residuals where a group needs them,
//          1 in every group, 0 in none (diagnostics; wrong beside
//          outliers): see "XLO" above
//   XPC    DP2A: 4 (default) or 2 lanes convert each group of x, a quarter
//          or a half each. Twenty-sixth session, same call, one token, us,
//          4 against 2: 4096->14336 9.7 against 9.9, 4096x4096 4.1 against
//          4.4, 14336->4096 10.0 against 10.7 (XCB 4 against 2: four
//          quarters against two halves a thread), 8192->28672 32.4 against
//          32.6
//   UNR    groups unrolled together in the consumer loop (default 4: 2 and
//          16 were slower; eleventh session, 8 with FASTADDR: 4096->14336
//          and 4096^2 0.1-0.2 us faster, 14336->4096 and 28672->8192 0.3
//          and 0.6 slower); with FASTADDR, UG = max(UNR, groups per line).
//          With DP2A, 8 where a warp's run is a multiple of 8 groups in 16-
//          and 32-row tiles (0.1 us faster at the 4096-input shapes)
//   FASTADDR  1 (default where it applies: runs of U/PARTS/WK groups that
//          are a multiple of UG) or 0: see "Offsets" in METHOD. Eleventh
//          session, same call, us, with against without: 4096->14336 12.4
//          against 12.8, 14336->4096 11.1 against 11.7, 28672->8192 33.5
//          against 35.1 (with ENDR), 4096^2 4.7 against 5.2
//   ROWPERM  1 (default) or 0: the order in which the mma's rows map to
//          tile rows (see pg in the kernel), so that the weight loads of
//          one wavefront meet every bank once. Eleventh session, same
//          call, us: 4096->14336 11.6 against 11.8 (groups of 128: 11.4
//          against 12.1), 14336->4096 11.0 against 11.2 (groups of 128:
//          11.2 against 11.3), 4096^2 and 4096->6144 0.1 faster; no
//          change at 8192->28672 and 28672->8192
//   ENDR   1 (default above one token) or 0 (default where DETRED is 1): the
//          block's last tile through the ring at its end (see METHOD), where
//          its last SG stages are all of that tile; 0 where the warps' sums
//          do not fit the ring. At one token (DETRED) the warps' slots make
//          the end path unneeded: twenty-seventh session, same call, two
//          rounds, us, 0 against 1: 4096->14336 9.3 / 9.3 against 9.4 / 9.4,
//          14336->4096 9.6 / 9.6 against 9.7 / 9.7, 4096^2 3.9 / 3.9 against
//          4.1 / 4.0, 8192->28672 31.6 / 31.6 against 31.8 / 31.9,
//          28672->8192 34.0 / 33.6 against 34.3 / 33.7, 5120->13824 11.5 /
//          11.6 against 11.7 / 11.7 (the median tail 0.9-1.4 us against
//          1.1-1.75)
//   DETRED 1 at one token (the default there), 0 (elsewhere, and at one
//          token for comparison): each warp stores its sums of a tile into
//          a slot of its own and they are added in warp order (see METHOD),
//          so a call's outputs are the same bits every time; 0 adds them with
//          shared float atomics in the order the warps finish. Twenty-seventh
//          session, same call, two rounds, us, 1 against 0: 4096->14336
//          9.5 / 9.6 against 9.8 / 9.8 (a flush every stage), 5120->13824
//          12.0 / 11.8 against 12.1 / 12.0, the other benchmark shapes within
//          0.2
//   SPLITK 1: K in slices (twelfth session, for 9..16 tokens): block
//          (x, s) takes inputs [s*kin, (s+1)*kin), kin = in/gridDim.y, and
//          y is a float workspace [tokens][out_features] that
//          affine_bulk_clear zeroed: each warp adds its sums over its
//          chunks of a tile into it (red.global.add), and
//          affine_bulk_finish rounds the total to bf16 with the bias (the
//          product takes bias null). Stages go out in rounds of SG tiles,
//          one per stage group, so a warp holds its sums over a whole
//          tile's chunks (kc_stage); ENDR is 0. kin must be a multiple of
//          U*GROUP. 16 tokens, us, against the stream kernel's: 4096->14336
//          19.8 / 24.3, 8192->28672 60.8 / 69.7, 28672->8192 60.9 / 71.1,
//          14336->4096 20.5 / 21.0, 4096^2 8.6 / 7.9
//   KC_TIMELINE   (diagnostics, scripts/bulk_timeline.py) lane 0 of every
//          warp records, in the __device__ array kc_tl, its start and end
//          (%globaltimer and clock64), the cycles it spent in barrier
//          waits, how many waits and how many found their data there, when
//          its first and last wait ended and when its last flush began
//   FOLD3  FP16, 1 (default) or 0: the fold as s*(sigma*t - (1024E + 64O))
//          + b*(E + O), three fused multiply-adds per sum, with the
//          constant stored negated; 0: s*sigma*t - s*(1024E + 64O) +
//          b*(E + O), a multiply and three. Twelfth session, same call,
//          two rounds, us, 1 against 0, 16 tokens: 8192->28672 57.1 / 56.5
//          against 59.7 / 59.7, 28672->8192 57.5 / 57.5 against 59.8 /
//          59.8, 4096->14336 19.5 / 19.5 against 19.7 / 19.6, 14336->4096
//          20.5 / 20.6 against 20.8 / 20.8, 4096^2 9.0 / 9.1 against 9.1 /
//          9.1; one token within 0.1 (8192->28672 32.8 against 32.9-33.3)
//   XHOLD  FP16, 0 (default) or a stage number: the producer copies stages
//          0..XHOLD-1, then waits until the consumers have converted x
//          (an mbarrier they arrive on after their barrier). Their loads
//          of x follow the wait for the grid ahead and come back behind
//          every copy the block has in flight; with the whole ring in
//          flight a block used its first stage 2 us later than without
//          the conversion. Twenty-first session, one token, same call, us,
//          XHOLD 4 (half a ring of 8) against 0: 4096->6144 6.3 / 7.3,
//          4096->14336 10.9 / 11.6, 5120->13824 12.6 / 13.6, 4096->11008
//          8.8 / 9.0; but 8192->28672 (56 stages a block) 33.0-33.6 /
//          32.8, and with rings of 16 stages 3584->18944 13.9 / 13.3. The
//          Go rule (bulkXHold) takes half a ring of 8 at one token where a
//          block has more than half a ring and at most three rings of
//          stages, and 1 KiB of shared memory is left over (the mbarrier
//          is a static __shared__ variable ahead of the 1024-aligned
//          dynamic part)
//   XCB    FP16: (token, half group) items of x each consumer thread loads
//          at once when it converts x, with DP2A quarter groups (XPC)
//          (default 1 up to 8 tokens, else 64 loaded bytes: 8 in groups of
//          32, 4 of 64, 2 of 128; the rule sets it at one token so that
//          the loads go in one round)
//   KC_DIAG_NOMATH, KC_DIAG_NORED, KC_DIAG_NOXCONV, KC_DIAG_NOSCALE,
//   KC_DIAG_EARLYREL, KC_DIAG_NOMMA, KC_DIAG_NOUNPACK  (diagnostics;
//          results are wrong) the consumers
//          release each stage unread; with SPLITK, no adds into the
//          workspace; with FP16, x is not converted; no scales or biases
//          are copied; (PARTS 1) each slot is released as soon as its
//          copy has landed, before it is read, so its refill may
//          overwrite it while it is used (what a consumer that took its
//          stage into registers at once would gain); (FP16) the mma's
//          operands are made but no mma is issued; the weights go to the
//          mma without the lop3 that unpacks them
//   KC_HANG_TRAP  (tests) a barrier wait that polls 2^20 times prints
//          where it is stuck and traps, so a hang becomes a launch error
//          (under early start the first wait also covers the kernel ahead:
//          the harness's correctness runs launch one call at a time, and
//          a call is one kernel, or with SPLITK three)
//
// LAUNCH (scripts/affine_kernels.py bulk_config / bulk_launch; the Go side
// mirrors them)
//   block = 32*(CW+PARTS) threads: CW consumer warps, then a producer warp
//   per part
//   grid = (min(tiles, BPS*SMs), 1, 1) with tiles = ceil(out/TR) and BPS
//   the resident blocks per SM the variant is sized for (1 unless asked):
//   blocks stay resident and take tiles blockIdx.x, blockIdx.x + gridDim.x,
//   ..., so any grid >= 1 is correct. SPLITK: (min(tiles, SMs/KS), KS, 1),
//   with affine_bulk_clear(float* part, int n = tokens*out) before and
//   affine_bulk_finish(const float* part, const bf16* bias, bf16* y, int
//   tokens, int out) after (any grids), all three with early start.
//   dynamic shared memory bytes (raise the function's maximum dynamic
//   shared size to it), with kin = in/KS (in without SPLITK) =
//       NS*STAGE + (SPLITK ? 0 : NS*4*R) + 16*ceil(4*NS/16) + 16*NS*PARTS + 1024
//     + (FP16 ? XT*(2*kin+16) + 16*XT*(kin/GROUP) : 0) + (DP2A ? kin : 0)
//   with STAGE = roundup(TR*SEG + B*4*TR*U + (FP16 ? 0 : XT*(2*U*GROUP+16)), 1024),
//   B = 2 scale buffers when PARTS > 1, else 1, and R = CW*TR at one token
//   (XT 1), else 8*NT*TR (a tile's accumulator, see METHOD).
//   The 1024 is slack for the stages' alignment (see the note in the
//   kernel); the FP16 term is the resident x and its per-group constants,
//   the DP2A term x's int8 residuals.
//
// VARIANT CHOICE (scripts/affine_kernels.py: bulk_config)
//   Served when BITS is 4 or 8, 1 <= tokens <= 16, in % GROUP == 0 and
//   out % 8 == 0 (the Go rule, ChooseBulk, serves above 8 tokens only at 4
//   bits, in slices; the harness also builds 8 bits there, unsliced, to
//   test the kernel). Above 8 tokens at 4 bits, K in KS slices
//   (bulk_splits): of the counts up to SMs whose slices are whole 8-group
//   stages and whose fp16 x is at most 64 KiB, the one that leaves the
//   fewest SMs idle (SMs/KS blocks per slice), then the most slices; there
//   no 64-row tiles, FP16 = 1, 512-byte row pieces, and below kin = in/KS
//   takes the place of in and G = SMs/KS that of BPS*SMs. With
//   W(r) = ceil(ceil(out/r)/G)*r/16 (G = BPS*SMs), the 16-row m-tiles the
//   busiest block takes in r-row tiles (all its waves):
//   MT = 4 if BITS == 4, GROUP <= 64
//   and W(64) <= W(16), and eight consumer warps' stages fit (below); else
//   2 if W(32) <= W(16), or with FP16 if 3*W(32) <= 4*W(16) (eleventh
//   session: 4096->14336 11.6 us in 32-row tiles against 13.4 in 16-row
//   ones); else 1. U: with
//   want = max(8, floor(P/(GROUP*BITS/8)/8)*8) for row pieces of P = 256
//   bytes (MT = 4, or tokens > 8 without FP16) or 512: want where it divides in/GROUP
//   (and a ring fits). Else, where MT < 4 and blocks take several tiles
//   (ceil(out/TR) > G), the next multiple of 8 above it, up to 64, that
//   divides in/GROUP, leaves room for at least four consumer warps (below)
//   and gives the busiest block at least four stages; else want/2 or
//   want/4 if a multiple of 8 that divides it (none: not served). Tenth
//   session: 13824 inputs in g64, 24 groups 19.4-19.6 us against 8
//   groups' 31.1-31.2; 3584->18944, 56 with four warps 17.3 against 8
//   with eight 20.1; but with two stages per block 768->8192 at 8 bits
//   7.0 against 5.5, and with one tile per block 4608->4096 in g32, 48
//   groups and four warps, 8.2 against 16 and eight, 6.4.
//   CW = 8; XT = tokens; FP16 = 1 when
//   BITS == 4, in <= 8192 and tokens <= 8, or in slices; and at one token,
//   unsliced, with in <= 16384 where that variant keeps MT <= 2 and a ring
//   of NS = 8 stages of CW = 8 warps (14336->4096 10.5 us against 11.1 with
//   bf16 x, 10240->14336 23.9 against 34.7; twenty-fifth session). Then at
//   one token, unsliced, DP2A = 1 (and UNR = 8 where MT <= 2 and
//   U/PARTS/WK % 8 == 0), and XCB = ceil(2*groups/(32*CW)) where that is
//   above 1, so that x's loads go in one round (14336->4096 11.0 with 1). PARTS = 2 when ceil(out/TR) > G
//   (blocks take several tiles) or MT = 4, and SEG % 256 == 0, but not
//   with FP16 in 16- and 32-row tiles; else 1 (32-row tiles one per
//   block: 2 was 0.2-1 us slower; 4 is slower than 2; eleventh session,
//   FP16 with constant offsets: 8192->28672 33.0 us in one part with two
//   warps per stage against 34.0 in two; without FP16 two parts stay
//   faster, 13824->5120 17.5 against 19.1). NS: the largest multiple of
//   CW from 2 to 16 whose shared memory is at most 227 KiB (with BPS > 1
//   also (bytes+1024)*BPS <= 228 KiB); when none fits, CW halves and the
//   search repeats (none at CW = 1: not served). WK = 2 when PARTS = 1
//   (blocks that take one tile each, stages that do not halve into
//   256-byte lines, or FP16 in 16- and 32-row tiles), MT < 4 and CW is
//   even, else 1. Tenth session: 14336->4096 11.6-11.8 us against
//   12.5-12.6, 4096^2 5.2 against 5.5, 3584->18944 g32 15.5 against 17.1;
//   but 18944->3584 19.5 against 19.3; with stages in two parts, sharing
//   them was slower; 64-row tiles were not measured with it.
//
// METHOD
//   A block walks its tiles in order, each in NCH = in/(U*GROUP) chunks of
//   U groups; chunk c of the block's k-th tile is stage number
//   i = k*NCH + c (with SPLITK in rounds of SG tiles instead: kc_stage, and
//   the warps add their sums into the workspace, not through the shared
//   accumulators below), held in ring slot i % NS and consumed by the WK warps
//   of stage group i % SG.
//   Lane 0 of the producer warp (of each part's) fills a slot once its
//   previous use is released: SEG/128 weight boxes of [TR rows][128 bytes], the scale and
//   bias boxes, and (without FP16) x by one bulk copy per token row, all
//   counted in bytes on the slot's full barrier. The weights land 128-byte
//   swizzled (16-byte chunk c of row r at chunk c ^ (r % 8)), so fragment
//   reads hit distinct banks without padding. Rows past the end arrive as
//   zeros and are never stored.
//   A consumer warp keeps its partial sums in registers over its
//   consecutive chunks of a tile (i, i+SG, ... while they stay in the
//   tile), releasing each slot once used (a slot is free once all WK warps
//   of its stage have released it). After its last chunk of the tile
//   it adds the sums into a shared-memory accumulator (one per tile in
//   flight, NS of them; at one token (DETRED) it stores them into a slot of
//   its own in it, so that they are added in warp order and a call's
//   result is the same every time) and counts its chunks in; the warp whose count
//   completes the tile (WK*NCH chunk shares in all) rounds the sums to
//   bf16 (RNE), stores them, clears
//   the accumulator and only then releases the slot of that last chunk
//   (with PARTS > 1: its last part). The last part of a slot is refilled
//   only after its previous stage is wholly released, and the producer of
//   that part issues stages in order, so an accumulator is cleared before
//   any chunk of the tile NS tiles later completes (that chunk's stage
//   number is at least NS past the finisher's last, and its consumer waits
//   for its last part before adding).
//   The first part's scale buffer alternates by round of the ring: a
//   refill of the first part writes the buffer the stage NS earlier did
//   not use, while that stage may still read its own.
//   The block's end (ENDR, above one token by default, where its last SG
//   stages are all of its last tile): a warp's chunks of that tile are the
//   last of its sequence, so it holds the sums of all of them and never
//   adds them to the tile's accumulator. Once every consumer warp has done
//   all its stages (a named barrier), the ring is no longer written, so
//   each warp stores its sums into it, and after a second barrier the
//   consumer threads add them in warp order and store y (a result that
//   does not depend on timing).
//   Shared float atomics are a compare-and-swap loop on sm_90, and all CW
//   warps used to add at the same moment there. Where the sums do not fit
//   the ring (CW*XT*TR floats above NS*STAGE bytes) ENDR is 0.
//   Offsets (FASTADDR): a warp's run of groups starts on a whole 128-byte
//   line, so within a run of UG groups (UG a multiple of the groups per
//   line) the byte offset of each group, and its 16-byte chunk in the
//   line, are constants. The lane's own offset within a group (tig*4*WPT)
//   shares no bit with them, so the swizzle (chunk ^ row % 8, row % 8 = pg,
//   the lane's tile row, see ROWPERM) splits into a constant and a
//   per-lane table of the 8 chunk positions: every weight, x and scale
//   load is a base plus an immediate. ncu at 4096->14336 counted 5.3 M
//   warp instructions before (23 per mma); the loop then spent about 8
//   instructions on the swizzle of each weight load.

typedef unsigned int u32;
typedef unsigned short u16;

#if !defined(BITS) || !defined(GROUP) || !defined(MT) || !defined(CW) || !defined(U) || !defined(NS) || !defined(XT)
#error "affine_bulk needs -DBITS -DGROUP -DMT -DCW -DU -DNS -DXT"
#endif
#if BITS != 4 && BITS != 8
#error "BITS must be 4 or 8"
#endif
#if GROUP != 32 && GROUP != 64 && GROUP != 128
#error "GROUP must be 32, 64 or 128"
#endif
#if (MT != 1 && MT != 2 && MT != 4) || CW < 1 || CW > 16
#error "need MT in {1,2,4} and 1 <= CW <= 16"
#endif
#ifndef WK
#define WK 1      // consumer warps sharing each stage, each with a run of its groups (see WK above)
#endif
#if WK < 1 || CW % WK != 0
#error "WK must divide CW"
#endif
#define SG (CW / WK)                         // stage groups: group j takes stages j, j+SG, ...
#if U < 8 || U % 8 != 0 || U > 64
#error "U must be a multiple of 8, at most 64"
#endif
#if NS < 2 || NS > 16 || NS % SG != 0
#error "NS must be 2..16 and a multiple of CW/WK"
#endif
#ifndef XHOLD
#define XHOLD 0   // FP16: the producer holds stage XHOLD until the consumers have x (0: never); see MACROS
#endif
#ifndef FP16
#define FP16 0    // 1: fp16 operands and resident x (4 bits): see "FP16" at the top
#endif
#if XHOLD && !FP16
#error "XHOLD needs FP16 (x resident, converted by the consumers)"
#endif
#if FP16 && BITS != 4
#error "FP16 needs BITS=4"
#endif
#ifndef DP2A
#define DP2A 0    // FP16 at one token: x as int16, dp2a dot products, no mma (see DP2A at the top)
#endif
#if DP2A && !(FP16 && XT == 1)
#undef DP2A
#define DP2A 0
#endif
// DP2A: x/sigma in units of 1/XQ, so that a lane's sum over a group (VPT
// values, each at most 15*XQ) stays within 2^22 (exact as a float biased by
// 1.5*2^23)
#define XQ (GROUP == 128 ? 8192.f : 16384.f)
#ifndef XLO
#define XLO 2     // DP2A: x's int8 residuals where a group needs them (2), in every group (1) or none (0); see XLO at the top
#endif
#ifndef UNR
#define UNR 4     // groups of a stage unrolled together in the consumer loop
#endif
#ifndef PARTS
#define PARTS 1   // 2 or 4: each stage arrives and is released in parts (see PARTS at the top)
#endif
#if PARTS != 1 && PARTS != 2 && PARTS != 4
#error "PARTS must be 1, 2 or 4"
#endif
#if U % (WK * PARTS) != 0
#error "WK must divide each part's groups"
#endif
#if XT < 1 || XT > 16
#error "XT must be 1..16"
#endif
#define NT ((XT + 7) / 8)             // n-tiles of 8 tokens (the mma's B columns)

#define VPT (GROUP / 4)              // values per lane, row and group
#define WPT (VPT * BITS / 32)        // packed words per lane, row and group
#define XLD (GROUP / 32)             // 16-byte x loads per lane, token and group
#if BITS == 4
#define OFFSET 128.0f
#else
#define OFFSET 2176.0f
#endif

#define TR (16 * MT)                         // rows per tile
#define GBYTES (GROUP * BITS / 8)            // packed bytes per row and group
#define SEG (U * GBYTES)                     // packed bytes per row and stage
#if SEG % 128 != 0
#error "SEG must be a multiple of 128 (whole swizzled lines)"
#endif
#if SEG % (128 * PARTS) != 0 || U % PARTS != 0
#error "PARTS must split a stage into whole swizzled lines and whole groups"
#endif
// FASTADDR: a warp takes UW consecutive groups of each part of a stage
// (sub-warp w of a stage the w-th run), UG unrolled at a time, each step
// starting on a whole 128-byte line, so that the swizzled offsets are
// constants; else (FASTADDR_OK false, e.g. runs of 20 groups of 32 at 4
// bits) every WK-th group, with offsets computed per group.
#define GPL (GBYTES >= 128 ? 1 : 128 / GBYTES)    // groups per 128-byte line
#define UW (U / PARTS / WK)                          // groups per warp and part
#define UG (GPL > UNR ? GPL : UNR)                   // groups unrolled together
// Runs take whole UG-group steps; a step covers whole lines and an even
// number of groups (scales of groups 2k and 2k+1 share a word).
#define FASTADDR_OK (UW % UG == 0 && UG % GPL == 0 && UG % 2 == 0)
#ifndef FASTADDR
#define FASTADDR FASTADDR_OK
#endif
#if FASTADDR && !(FASTADDR_OK)
#error "FASTADDR needs U/PARTS/WK to be a multiple of UG = max(UNR, groups per line), and UG even and a multiple of the groups per line"
#endif
#if !FASTADDR
constexpr int kUnroll = UNR;   // #pragma unroll takes a constant expression, not a macro
#endif
#define SSTRIDE (2 * U)                      // scale bytes per row and stage
#define XSEG (U * GROUP * 2)                 // x bytes per token and stage
#define XSTRIDE (XSEG + 16)
// Weights land as SEG/128 boxes of [TR rows][128 bytes], 128-byte swizzled
// (16-byte chunk c of row r at chunk c ^ (r % 8)), so fragment reads hit
// distinct banks without padding; a stage starts on a 1024-byte boundary.
#define SOFF (TR * SEG)                      // scales, then biases
#define SBUF (2 * TR * SSTRIDE)              // a stage's scales and biases; with PARTS > 1 two,
                                             // used by stages of alternate rounds of the ring
#define NSBUF (PARTS > 1 ? 2 : 1)
#define XOFF (SOFF + NSBUF * SBUF)
#define STAGE ((XOFF + (FP16 ? 0 : XT * XSTRIDE) + 1023) / 1024 * 1024)   // FP16: x is resident, not staged
// One token (DETRED): each warp stores its sums of a tile in a slot of its
// own, and the warp that completes the tile adds the slots in warp order,
// so a call's result does not depend on which warp finished first (shared
// float atomics added them in arrival order: outputs differed in the last
// bit from run to run). Above one token the warps add into one slot.
#ifndef DETRED
#define DETRED (XT == 1)   // (0 at one token: the shared atomics, for comparison; the harness sizes for it, the Go rule never asks)
#endif
#if DETRED && XT != 1
#error "DETRED is for one token"
#endif
#define RED_FLOATS (SPLITK ? 0 : DETRED ? CW * TR : 8 * NT * TR)   // one tile's sums: [CW warps][TR rows] or [8*NT tokens][TR rows] (none with SPLITK)
#define RED_OFF (NS * STAGE)
#define CNT_OFF (RED_OFF + NS * 4 * RED_FLOATS)
#define BAR_OFF (CNT_OFF + ((4 * NS + 15) / 16) * 16)
#define SMEM_BYTES (BAR_OFF + 16 * NS * PARTS)   // FP16: then the resident x (XT rows of 2*in+16 bytes)
                                                   // and its per-group constants (16 bytes per group and token)
#define FIN_BYTES (CW * XT * TR * 4)          // the warps' last sums, in the ring once it is free
#ifndef ROWPERM
#define ROWPERM 1 // 1: the mma's rows map to tile rows in the order that spreads weight loads over the banks (below)
#endif
#ifndef ENDR
#define ENDR (DETRED ? 0 : 1)   // 1: the last tile's shares are added at the block's end through the ring (below)
#endif
#ifndef FOLD3
#define FOLD3 1   // FP16: the fold in three fused multiply-adds per sum (below)
#endif
#ifndef XCB
#define XCB (XT > 8 ? 256 / GROUP : 1)   // FP16: items of x whose loads fly together (below)
#endif
#ifndef SPLITK
#define SPLITK 0  // 1: blockIdx.y takes a slice of the inputs and adds its sums into a float workspace (SPLIT K)
#endif
#if ENDR && (FIN_BYTES > NS * STAGE || SPLITK)
#undef ENDR
#define ENDR 0    // (SPLITK: every warp adds its sums into the workspace itself)
#endif

#define KC_DEV __device__ __forceinline__
#if defined(KC_DIAG_EARLYREL) && PARTS == 1
#define KC_RELEASE(bar) (void)0   // (diagnostics: released at the wait instead)
#else
#define KC_RELEASE(bar) kc_bar_arrive(bar)   // a consumer warp is done with a slot
#endif
struct alignas(16) kc_u4 { u32 x, y, z, w; };

KC_DEV float kc_bf16(u32 h) { return __uint_as_float(h << 16); }
KC_DEV u16 kc_to_bf16(float f) {
    u16 r;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(f));
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
// pair * (16, 16), exact (a power of two).
KC_DEV u32 kc_times16(u32 pair) {
    u32 d;
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(pair), "r"(0x41804180u), "r"(0x80008000u));
    return d;
}
// c = a*b (+ c when acc), m16n8k16 bf16 -> fp32.
KC_DEV void kc_mma(float (&c)[4], u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1, bool acc) {
    const float z = 0.f;
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};"
        : "=f"(c[0]), "=f"(c[1]), "=f"(c[2]), "=f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1),
          "f"(acc ? c[0] : z), "f"(acc ? c[1] : z), "f"(acc ? c[2] : z), "f"(acc ? c[3] : z));
}
// fp16 pair (lo, hi), round to nearest even.
KC_DEV u32 kc_f16x2(float lo, float hi) {
    u32 d;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
    return d;
}
// fp16 pair from nibbles of w: j = 0 (1024 + v0, 1024 + v4), 1 (1024 + 16 v1,
// 1024 + 16 v5), 2 and 3 the same of w >> 8, all exact.
KC_DEV u32 kc_nib16(u32 w, int j) {
    u32 d;
    const u32 v = j >= 2 ? w >> 8 : w;
#ifdef KC_DIAG_NOUNPACK
    return (j & 1) ? v : w;   // (diagnostics: no lop3; results are wrong)
#endif
    if (j & 1)
        asm("lop3.b32 %0, %1, 0x00F000F0, 0x64006400, 0xEA;" : "=r"(d) : "r"(v));
    else
        asm("lop3.b32 %0, %1, 0x000F000F, 0x64006400, 0xEA;" : "=r"(d) : "r"(v));
    return d;
}
// c = a*b (+ c when acc), m16n8k16 fp16 -> fp32.
KC_DEV void kc_mma16(float (&c)[4], u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1, bool acc) {
    const float z = 0.f;
#ifdef KC_DIAG_NOMMA
    // (diagnostics: the operands are made, the mma is not; results are wrong)
    asm volatile("" :: "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    for (int e = 0; e < 4; ++e) c[e] = acc ? c[e] : z;
    return;
#endif
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};"
        : "=f"(c[0]), "=f"(c[1]), "=f"(c[2]), "=f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1),
          "f"(acc ? c[0] : z), "f"(acc ? c[1] : z), "f"(acc ? c[2] : z), "f"(acc ? c[3] : z));
}
// c + a.h0*b.byte(2*HI) + a.h1*b.byte(2*HI+1): a two signed 16-bit
// values, b four unsigned bytes, of which HI picks the high two.
template <int HI> KC_DEV int kc_dp2a(u32 a, u32 b, int c) {
    int d;
    if (HI)
        asm("dp2a.hi.s32.u32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    else
        asm("dp2a.lo.s32.u32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}
// c + the sum of a.byte(k)*b.byte(k): a four signed bytes, b four unsigned.
KC_DEV int kc_dp4a(u32 a, u32 b, int c) {
    int d;
    asm("dp4a.s32.u32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}

// Half k (0 low, 1 high) of a word of two bf16, as a float.
KC_DEV float kc_half(u32 w, int k) { return __uint_as_float(k ? (w & 0xFFFF0000u) : (w << 16)); }
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
#ifdef KC_HANG_TRAP
    long long polls = 0;   // test builds: a wait that never ends traps, and says which
#endif
    do {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done) : "r"(bar), "r"(parity) : "memory");
#ifdef KC_HANG_TRAP
        if (!done && ++polls == (1ll << 20)) {
            printf("affine_bulk: block %d thread %d stuck on barrier %u parity %u\n", (int)blockIdx.x, (int)threadIdx.x, bar, parity);
            asm volatile("trap;");
        }
#endif
    } while (!done);
}
// 2D tensor copy of the box at (c0 innermost, c1) of the tensor map at map.
KC_DEV void kc_tma2d(u32 dst, const void* map, int c0, int c1, u32 bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
                 :: "r"(dst), "l"(map), "r"(c0), "r"(c1), "r"(bar) : "memory");
}
struct alignas(64) kc_tmap { unsigned long long v[16]; };   // CUtensorMap
KC_DEV void kc_bulk(u32 dst, const void* src, u32 bytes, u32 bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 :: "r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}
// Programmatic dependent launch (sm_90): the plan launches the kernel with
// early start, so it may begin while the kernel ahead finishes. It releases
// its own dependents at its start, streams the first stages' weights (which
// nothing ahead writes) at once, and waits for the grid ahead (completed,
// its writes visible) before it reads x; every store of y follows a read of
// x. Both are no-ops in an ordinary launch. kc_grid_wait_for waits and
// returns x as a value the wait produced, so that the compiler cannot
// schedule a load through it (an asm statement it may otherwise move)
// above the wait; x is read with coherent loads, never ld.global.nc, which
// ptxas may move above the wait too (its data may be assumed constant for
// the kernel's life, and under early start it is not).
KC_DEV const u16* kc_grid_wait_for(const u16* p) {
    asm volatile("griddepcontrol.wait;" : "+l"(p) :: "memory");
    return p;
}
KC_DEV void kc_grid_release() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }

// f(j, sum) for each of a consumer warp's sums of a real token (ntok of
// them), j its place in a tile's [tokens][TR] sums: acc[m][n][e] is tile
// row 16m+pg+8(e>>1) (pg: the lane's row in each 8, see ROWPERM), token
// 8n+2tig+(e&1). (A template, not a generic lambda:
// NVRTC does not take those in device code.)
template <class F>
KC_DEV void kc_each_sum(const float (&acc)[MT][NT][4], int pg, int tig, int ntok, F f) {
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int n = 0; n < NT; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int tok = 8 * n + 2 * tig + (e & 1);
                if (tok < ntok) f(tok * TR + 16 * m + pg + 8 * (e >> 1), acc[m][n][e]);
            }
}

// DP2A: each lane's sums are over its VPT values of each group; the 4 lanes
// of a row (tig 0..3) add theirs before a flush, which takes tig 0's.
KC_DEV void kc_quad_sum(float (&acc)[MT][NT][4]) {
#if DP2A
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int e = 0; e < 4; e += 2) {
            float v = acc[m][0][e];
            v += __shfl_xor_sync(0xFFFFFFFFu, v, 1);
            v += __shfl_xor_sync(0xFFFFFFFFu, v, 2);
            acc[m][0][e] = v;
        }
#endif
}

#if DP2A && XLO != 1
// x's int8 residuals of group u (XLO 2), for a group that has them: the
// lane's VPT weights of each of its rows again, from the stage at slot
// (swizzled as the copies left them), against the residuals at lp (units of
// 1/(128*XQ)), added into acc as s * sigma'/128 * their sum (sq128).
KC_DEV void kc_residuals(float (&acc)[MT][NT][4], const unsigned char* slot, const u16* sc,
                         const unsigned char* lp, int u, int pg, int tig, float sq128) {
    u32 xl[VPT / 4];   // 2 words (even and odd places) per 8 values
#pragma unroll
    for (int k = 0; k < VPT / 4; k += 2) {
        const uint2 p2 = *reinterpret_cast<const uint2*>(lp + tig * VPT + 4 * k);
        xl[k] = p2.x;
        xl[k + 1] = p2.y;
    }
    const u32* sw = reinterpret_cast<const u32*>(sc) + (u >> 1);
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = 16 * m + 8 * h + pg;
            int dr = 0;
#pragma unroll
            for (int wi = 0; wi < WPT; ++wi) {
                const int o = u * GBYTES + tig * (4 * WPT) + 4 * wi;
                const u32 wv = *reinterpret_cast<const u32*>(slot + (o >> 7) * (TR * 128) + row * 128 +
                                                             (((o >> 4) & 7) ^ (row & 7)) * 16 + (o & 15));
                dr = kc_dp4a(xl[2 * wi], wv & 0x0F0F0F0Fu, dr);              // even places
                dr = kc_dp4a(xl[2 * wi + 1], (wv >> 4) & 0x0F0F0F0Fu, dr);   // odd places
            }
            acc[m][0][2 * h] = fmaf(kc_half(sw[row * (SSTRIDE / 4)], u & 1) * sq128, (float)dr, acc[m][0][2 * h]);
        }
}
#endif

// Stage i of a block: its tile k (the block's k-th) and chunk c. Chunks
// go out in order, tile after tile; with SPLITK, in rounds of SG tiles,
// one to each stage group, which walks its tile's chunks while the others
// walk theirs (stage i is group i % SG's), so that a warp holds its sums
// over all its tile's chunks before it adds them into the workspace. A
// block's last my_tiles % SG tiles go out tile after tile.
KC_DEV void kc_stage(int i, int nch, int my_tiles, int& k, int& c) {
#if SPLITK
    const int whole = my_tiles / SG * SG * nch;   // stages in whole rounds
    if (i < whole) {
        const int r = i / SG;
        k = r / nch * SG + i % SG;
        c = r % nch;
        return;
    }
    k = my_tiles / SG * SG + (i - whole) / nch;
    c = (i - whole) % nch;
#else
    k = i / nch;
    c = i - k * nch;
#endif
}

// Output (token tok, row) of a tile, v its sum over the block's inputs:
// rounded to bf16 with the bias added, or (SPLITK) added into the float
// workspace at y, where affine_bulk_finish rounds the slices' total.
KC_DEV void kc_store(u16* y, const u16* bias, int out, int tok, int row, float v) {
#if SPLITK
#ifdef KC_DIAG_NORED
    if (v != 12345.f) return;   // (diagnostics: no adds into the workspace; results are wrong)
#endif
    float* p = reinterpret_cast<float*>(y) + (long long)tok * out + row;
    asm volatile("red.global.add.f32 [%0], %1;" :: "l"(p), "f"(v) : "memory");
#else
    if (bias != nullptr) v += kc_bf16(kc_ldh(bias + row));
    y[(long long)tok * out + row] = kc_to_bf16(v);
#endif
}

#ifdef KC_TIMELINE
// kc_tl[block][warp]: start and end %globaltimer (ns), start and end clock64,
// cycles in barrier waits, waits, clock64 when the first and the last ended,
// waits that found their barrier complete at the first poll, and clock64
// when the warp's last flush of sums began, then clock64 marks: 10 when a
// consumer's wait for the grid ahead ended, 11 when x was converted (after
// the consumers' barrier), 12 when the producer went past its hold (XHOLD),
// 13 when a consumer's first loads of x landed.
__device__ unsigned long long kc_tl[1024][32][16];
KC_DEV unsigned long long kc_gtime() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
    return t;
}
KC_DEV bool kc_bar_test(u32 bar, u32 parity) {
    u32 done;
    asm volatile("{\n.reg .pred p;\nmbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    return done != 0;
}
struct kc_timeline {
    unsigned long long g0, c0, wait, n, first, last, ready, flush, mk[4];
    KC_DEV void start() { g0 = kc_gtime(); c0 = clock64(); wait = n = first = last = ready = flush = 0; mk[0] = mk[1] = mk[2] = mk[3] = 0; }
    KC_DEV void mark(int k) { mk[k] = clock64(); }
    KC_DEV void wait_on(u32 bar, u32 parity) {
        const unsigned long long a = clock64();
        if (kc_bar_test(bar, parity)) ++ready;
        else kc_bar_wait(bar, parity);
        const unsigned long long b = clock64();
        wait += b - a;
        if (n++ == 0) first = b;
        last = b;
    }
    KC_DEV void flushing() { flush = clock64(); }
    KC_DEV void finish(int lane) {
        if (lane != 0 || blockIdx.x >= 1024) return;
        unsigned long long* r = kc_tl[blockIdx.x][threadIdx.x >> 5];
        const unsigned long long c1 = clock64();
        r[0] = g0; r[1] = kc_gtime(); r[2] = c0; r[3] = c1; r[4] = wait; r[5] = n; r[6] = first; r[7] = last;
        r[8] = ready; r[9] = flush;
        for (int k = 0; k < 4; ++k) r[10 + k] = mk[k];
    }
};
#define KC_TL_WAIT(bar, parity) tl.wait_on(bar, parity)
#else
struct kc_timeline {
    KC_DEV void start() {}
    KC_DEV void flushing() {}
    KC_DEV void mark(int) {}
    KC_DEV void finish(int) {}
};
#define KC_TL_WAIT(bar, parity) kc_bar_wait(bar, parity)
#endif

#if DP2A
#ifndef XPC
#define XPC 4     // DP2A: lanes that convert each group of x together (2 or 4; see XPC at the top)
#endif
#if (XPC != 2 && XPC != 4) || GROUP % (8 * XPC) != 0
#error "XPC must be 2 or 4, and GROUP/XPC a multiple of 8"
#endif
#define XQBITS (GROUP == 128 ? 13 : 14)      // XQ = 2^XQBITS
// |x| of both bf16 of a word as unsigned halves, their maxima with m's.
KC_DEV u32 kc_absmax2(u32 m, u32 w) {
    u32 d;
    asm("max.u16x2 %0, %1, %2;" : "=r"(d) : "r"(m), "r"(w & 0x7FFF7FFFu));
    return d;
}
// x for DP2A (one token), once per block, after the wait for the grid
// ahead: XPC consumer lanes take each group of the block's inputs, GROUP/XPC
// values each, and write what the consumer loop reads: every 8 values
// x0..x7 as int16 pairs (x0, x2), (x4, x6), (x1, x3), (x5, x7) of
// round(x/sigma*XQ) (xres), their rounding residuals in units of
// 1/(128*XQ) as the int8 bytes (x0, x2, x4, x6) and (x1, x3, x5, x7)
// (xlo), and per group (xcon) sigma/XQ, the sum's bias term, a quarter of
// the group's x sum (from the int values) and sigma/(128*XQ), or 0 where
// the group goes without its residuals (XLO). sigma = 2^e, the smallest
// power of two >= the group's max|x| (1 for zeros). Each value costs about
// 10 instructions: the max on the bf16 bits, its unpacking, three fused
// multiply-adds, a subtraction and two sums, and its share of the prmt
// that take the int16 and int8 values from the low bytes of the floats
// 1.5*2^23 + v (whose low 16 bits are v's two's complement).
KC_DEV void kc_convert_x_int(const u16* __restrict__ x, int k0, int groups, unsigned char* xres,
                             unsigned char* xlo, float4* xcon, volatile int* xany, kc_timeline& tl) {
    constexpr int PV = GROUP / XPC;   // values a lane takes of its group
    constexpr int PB = PV / 8;        // their 16-byte blocks
    constexpr float M = 12582912.f;   // 1.5*2^23
    const int items = XPC * groups;
    for (int base = 0; base < items; base += XCB * 32 * CW) {   // uniform per block
        kc_u4 blk[XCB][PB];
#pragma unroll
        for (int b = 0; b < XCB; ++b) {   // every load before any use: one trip to memory
            const int it = base + b * 32 * CW + (int)threadIdx.x;
            const u16* src = x + k0 + (it / XPC) * GROUP + (it % XPC) * PV;
#pragma unroll
            for (int q = 0; q < PB; ++q) {
                if (it < items) {
                    asm("ld.global.v4.u32 {%0,%1,%2,%3}, [%4];"   // coherent: see kc_grid_wait_for
                        : "=r"(blk[b][q].x), "=r"(blk[b][q].y), "=r"(blk[b][q].z), "=r"(blk[b][q].w) : "l"(src + 8 * q));
                } else {
                    blk[b][q] = kc_u4{0, 0, 0, 0};
                }
            }
        }
#pragma unroll
        for (int b = 0; b < XCB; ++b) {   // lanes XPC*k.. take one group's pieces: items is a multiple of XPC
            const int it = base + b * 32 * CW + (int)threadIdx.x;
            const bool valid = it < items;
            const int gi = it / XPC, pc = it % XPC;
            // the group's max|x|, on the bits (|x| orders as the unsigned bits of a bf16)
            u32 m2 = 0;
#pragma unroll
            for (int q = 0; q < PB; ++q)
                m2 = kc_absmax2(kc_absmax2(kc_absmax2(kc_absmax2(m2, blk[b][q].x), blk[b][q].y), blk[b][q].z), blk[b][q].w);
            if (b == 0) tl.mark(3);   // x's first loads have landed
            u32 mb = max(m2 & 0xFFFFu, m2 >> 16);
#pragma unroll
            for (int o = 1; o < XPC; o <<= 1) mb = max(mb, __shfl_xor_sync(0xFFFFFFFFu, mb, o));
            const int e = mb == 0 ? 0 : max((int)(mb >> 7) - 127 + ((mb & 0x7Fu) != 0), -100);
            const float sc = __uint_as_float((u32)(127 + XQBITS - e) << 23);   // XQ/sigma
            float at = 0.f, ar = 0.f;   // sums of |round(x/sigma*XQ)| and of the rounding's |residual|
            int siv = 0, sir = 0;       // sums of the int16 values and of the int8 residuals
#pragma unroll
            for (int q = 0; q < PB; ++q) {
                const u32 w4[4] = {blk[b][q].x, blk[b][q].y, blk[b][q].z, blk[b][q].w};
                u32 F[8], G[8];
#pragma unroll
                for (int h = 0; h < 8; ++h) {
                    const float xv = kc_half(w4[h >> 1], h & 1);   // x[h]
                    const float f = fmaf(xv, sc, M);       // 1.5*2^23 + round(x/sigma*XQ): |.| <= XQ < 2^22
                    const float t = f - M;                 // that int, exact
                    const float rest = fmaf(xv, sc, -t);   // what the rounding left, exact
                    const float g = fmaf(rest, 128.f, M);  // 1.5*2^23 + round(128*rest): |.| <= 64
                    at += fabsf(t);
                    ar += fabsf(rest);
                    F[h] = __float_as_uint(f);
                    G[h] = __float_as_uint(g);
                }
                kc_u4 o;   // the low halves: the int16 values
                o.x = kc_prmt(F[0], F[2], 0x5410);
                o.y = kc_prmt(F[4], F[6], 0x5410);
                o.z = kc_prmt(F[1], F[3], 0x5410);
                o.w = kc_prmt(F[5], F[7], 0x5410);
                // the low bytes: the int8 residuals
                const u32 r0 = kc_prmt(kc_prmt(G[0], G[2], 0x0040), kc_prmt(G[4], G[6], 0x4000), 0x7610);
                const u32 r1 = kc_prmt(kc_prmt(G[1], G[3], 0x0040), kc_prmt(G[5], G[7], 0x4000), 0x7610);
                siv = kc_dp2a<0>(o.x, 0x0101u, kc_dp2a<0>(o.y, 0x0101u, kc_dp2a<0>(o.z, 0x0101u, kc_dp2a<0>(o.w, 0x0101u, siv))));
                sir = kc_dp4a(r0, 0x01010101u, kc_dp4a(r1, 0x01010101u, sir));
                if (valid) {
                    reinterpret_cast<kc_u4*>(xres + (gi * GROUP + pc * PV) * 2)[q] = o;
                    *reinterpret_cast<uint2*>(xlo + gi * GROUP + pc * PV + 8 * q) = make_uint2(r0, r1);
                }
            }
#pragma unroll
            for (int o = 1; o < XPC; o <<= 1) {
                at += __shfl_xor_sync(0xFFFFFFFFu, at, o);
                ar += __shfl_xor_sync(0xFFFFFFFFu, ar, o);
                siv += __shfl_xor_sync(0xFFFFFFFFu, siv, o);
                sir += __shfl_xor_sync(0xFFFFFFFFu, sir, o);
            }
            // The residuals only where the group needs them (XLO 2): where int16
            // alone errs by more than 2^-10 of the group's values but its largest,
            // sum|residual| > 2^-10 * (sum|x| - max|x|) in units of sigma/XQ (see XLO).
            const float mxs = __uint_as_float(mb << 16) * sc;   // max|x|/sigma*XQ
            const bool need = XLO == 1 || (XLO == 2 && ar > (at - mxs) * (1.f / 1024.f));
            if (valid && pc == 0) {
                // sigma' = sigma/XQ; less 1.5*2^23 times sigma' (the sum comes biased
                // by 1.5*2^23) and, with XLO 1, sigma'/128 (the residuals' sum too); a
                // quarter of the group's x sum (each of 4 lanes adds b times it);
                // sigma'/128, or 0 where the group goes without its residuals
                // A group with a NaN or an infinity (bits at or above 0x7F80) has
                // no int16 form: its sigma' is NaN, so every sum it meets is NaN,
                // as a float product with a NaN is (an infinity's product is an
                // infinity of the weight's sign, or NaN: this gives NaN).
                const float sq = mb >= 0x7F80u ? __uint_as_float(0x7FC00000u) : __uint_as_float((u32)(127 - XQBITS + e) << 23);
                xcon[gi] = make_float4(sq, -M * sq * (XLO == 1 ? 1.f + 1.f / 128.f : 1.f),
                                       0.25f * sq * ((float)siv + (float)sir * (1.f / 128.f)), need ? sq * (1.f / 128.f) : 0.f);
                if (need) *xany = 1;
            }
        }
    }
}
#endif

extern "C" __global__ void __launch_bounds__(32 * (CW + PARTS), 1)
affine_bulk(const __grid_constant__ kc_tmap wmap, const __grid_constant__ kc_tmap smap,
            const __grid_constant__ kc_tmap bmap, const u16* __restrict__ x,
            const u16* __restrict__ bias, u16* __restrict__ y,
            int tokens, int in_features, int out_features)
{
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    // Stages must start on 1024-byte boundaries (128-byte swizzle). The
    // declared alignment makes the compiler fold this offset to 0, so the
    // kernel relies on the dynamic shared memory base being 1024-aligned, as
    // it was on the H200 (a misaligned base would break the swizzled reads
    // and fail the correctness cases); the host's extra 1024 bytes are slack.
    unsigned char* smem = smem_raw + ((1024 - (kc_smem(smem_raw) & 1023)) & 1023);
    const int in = in_features;
    const int out = out_features;
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    // The block's inputs [k0, k0 + kin): all of them, or with SPLITK slice
    // blockIdx.y of gridDim.y (the host checks that kin is whole stages).
    const int kin = in / (int)gridDim.y;
    const int k0 = (int)blockIdx.y * kin;
    const int groups = kin / GROUP;
    const int nch = groups / U;                          // chunks per tile (host checks the division)
    const int tiles = (out + TR - 1) / TR;
    const int my_tiles = tiles > (int)blockIdx.x ? (tiles - 1 - (int)blockIdx.x) / (int)gridDim.x + 1 : 0;
    const int nstages = my_tiles * nch;
    float* red = reinterpret_cast<float*>(smem + RED_OFF);
    int* cnt = reinterpret_cast<int*>(smem + CNT_OFF);
    const u32 sbase = kc_smem(smem);
    // Barriers: for each part p of a stage (the whole stage when PARTS is
    // 1), NS full barriers at full0 + 16*NS*p, then NS empty ones.
    const u32 full0 = sbase + BAR_OFF, empty0 = full0 + 8 * NS;
#if FP16
    const int xrstride = 2 * kin + 16;
    unsigned char* xres = smem + SMEM_BYTES;                 // [XT][kin] fp16, pairs as the unpacking meets them
    float4* xcon = reinterpret_cast<float4*>(xres + XT * xrstride);   // [groups][XT]
#if DP2A
    unsigned char* xlo = reinterpret_cast<unsigned char*>(xcon + groups * XT);   // [XT][kin] int8 residuals
    volatile int* xany = reinterpret_cast<int*>(xres + 2 * kin);   // in x's row pad (XT 1): some group has its residuals
#endif
#endif

    for (int i = threadIdx.x; i < NS * RED_FLOATS; i += blockDim.x) red[i] = 0.f;
    for (int i = threadIdx.x; i < NS; i += blockDim.x) cnt[i] = 0;
#if FP16 && XHOLD
    __shared__ __align__(8) unsigned long long xbar;   // the consumers have converted x
#endif
    if (threadIdx.x == 0) {
#if DP2A
        *xany = XLO == 1;
#endif
#if FP16 && XHOLD
        kc_bar_init(kc_smem(&xbar), 1);
#endif
        for (int p = 0; p < PARTS; ++p)
            for (int s = 0; s < NS; ++s) {
                kc_bar_init(full0 + 16 * NS * p + 8 * s, 1);    // the producer's expect_tx; the copies complete its bytes
                kc_bar_init(empty0 + 16 * NS * p + 8 * s, WK);   // the consumer warps of the stage
            }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    kc_grid_release();
    kc_timeline tl;
    tl.start();

    if (warp >= CW) {
        // Producer: stage i's copies, once slot i % NS is free. One lane
        // issues everything: SEG/128 weight boxes, the scale and bias
        // boxes, and x one bulk copy per token row (none with FP16: x is
        // resident). Rows past the end arrive as zeros (never stored) and
        // count toward the bytes. With PARTS > 1, producer warp `part` copies
        // part `part` of each stage (its weight boxes and x), the first
        // part with the scales and biases, once that part of the slot is
        // free.
        const int ntok = min(tokens, XT);
        if (lane != 0) return;
        const int part = warp - CW;
        constexpr int NB = SEG / 128 / PARTS;   // weight boxes per copy
        const u32 full_p = full0 + 16 * NS * part, empty_p = empty0 + 16 * NS * part;
        for (int i = 0; i < nstages; ++i) {
            const int s = i % NS;
            int k, c;
            kc_stage(i, nch, my_tiles, k, c);
            const int row0 = ((int)blockIdx.x + k * (int)gridDim.x) * TR;
            const u32 full = full_p + 8 * s;
#if FP16 && XHOLD
            if (i == XHOLD) {   // x's loads not behind a whole ring of weights (not a slot wait: untimed)
                kc_bar_wait(kc_smem(&xbar), 0);
                tl.mark(2);
            }
#endif
            if (i >= NS) KC_TL_WAIT(empty_p + 8 * s, ((i / NS) + 1) & 1);
            const u32 dst = sbase + s * STAGE;
#ifdef KC_DIAG_NOSCALE
            constexpr u32 sbytes = 0;   // (diagnostics: no scales or biases copied; results are wrong)
#else
            constexpr u32 sbytes = SBUF;
#endif
            kc_bar_expect(full, TR * SEG / PARTS + (part ? 0 : sbytes) + (FP16 ? 0 : ntok * XSEG / PARTS));
#pragma unroll
            for (int b = part * NB; b < (part + 1) * NB; ++b)
                kc_tma2d(dst + b * TR * 128, &wmap, (k0 * BITS) / 32 + c * (SEG / 4) + 32 * b, row0, full);
            if (part == 0 && sbytes) {
                const u32 sdst = dst + SOFF + (NSBUF > 1 ? ((i / NS) & 1) * SBUF : 0);
                kc_tma2d(sdst, &smap, k0 / GROUP + c * U, row0, full);
                kc_tma2d(sdst + TR * SSTRIDE, &bmap, k0 / GROUP + c * U, row0, full);
            }
            if (FP16)
                continue;
            // The first stage's weights go before the wait for the grid
            // ahead, its x after. Holding back the x of a whole round of
            // stages instead delayed the first stage behind all their
            // weights (14336->4096: 14.2 -> 17.9 us without early start).
            if (i == 0) x = kc_grid_wait_for(x);
            for (int t = 0; t < ntok; ++t)
                kc_bulk(dst + XOFF + t * XSTRIDE + part * (XSEG / PARTS),
                        x + (long long)t * in + k0 + (long long)c * U * GROUP + part * (U / PARTS) * GROUP, XSEG / PARTS, full);
        }
        tl.finish(lane);
        return;
    }

    // Consumers.
    const int g = lane >> 2;
    const int tig = lane & 3;
    // The tile row of the mma's row g in each 8 (ROWPERM): a permutation
    // under which the lanes that read shared memory in one wavefront (a
    // half warp for WPT 2's 8-byte weight loads, a quarter for WPT 4's
    // 16-byte ones) meet 8 different 16-byte chunks of the swizzled lines;
    // with rows in order, the lanes of rows g and g^1 met the same chunks
    // (chunk ^ row % 8), two ways to every bank. At WPT 1 and 8 rows in
    // order already meet every bank once.
#if ROWPERM && WPT == 2
    const int pg = ((g & 3) << 1) | (g >> 2);
#elif ROWPERM && WPT == 4
    const int pg = ((g & 1) << 2) | (g >> 1);
#else
    const int pg = g;
#endif
    int xr[NT];                                           // this lane's B columns: tokens g, g+8, clamped
#pragma unroll
    for (int n = 0; n < NT; ++n) xr[n] = min(g + 8 * n, min(tokens, XT) - 1);
    const u32 ones = 0x3F803F80u;
#if BITS == 4
    const u32 ones_hi = ones;
#else
    const u32 ones_hi = 0u;
#endif
#if FP16
    // x, once per block while the first stages fly: each pair of threads
    // takes one (token, group), a half each. It finds the group's max|x|
    // and sigma = 2^e >= it, writes every 8 values x0..x7 as the fp16
    // pairs the unpacked weights meet, (x0, x4), (x1/16, x5/16), (x2, x6),
    // (x3/16, x7/16), all divided by sigma (powers of two; see FP16 at the
    // top for when that rounds), and
    // stores sigma, 1024*E + 64*O and E + O, where E and O sum x over the
    // even and odd positions of each 8: the offsets the fp16 unpacking
    // leaves in the mma (q = 1024 + v and 1024 + 16*v).
    {
        x = kc_grid_wait_for(x);   // x is the grid ahead's to write
        tl.mark(0);
        const int ntok = min(tokens, XT);
#ifdef KC_DIAG_NOXCONV
        const int items = 0;   // (diagnostics: x is not converted; results are wrong)
#else
        const int items = 2 * groups * ntok;
#endif
        // Each thread takes items base + b*32*CW + threadIdx.x, b < XB, and
        // issues all their loads before it uses any: one trip to memory
        // per XB items instead of one per item. Twelfth session, 16 tokens,
        // where a block converts 16 x kin values (without the conversion
        // at all, 8192->28672 took 56.3 us against 61.8), same call, two
        // rounds, us, XCB 4 against 1: 8192->28672 59.6-60.0 against
        // 61.6-61.8, 28672->8192 59.9-60.2 against 61.7-61.8, 4096->14336
        // 19.5-19.7 against 20.2, 14336->4096 the same, 4096^2 9.1-9.2
        // against 8.8-8.9.
#if DP2A
        kc_convert_x_int(x, k0, items ? groups : 0, xres, xlo, xcon, xany, tl);
#else
        constexpr int HB = GROUP / 16;                     // blocks of 8 values per half group
        constexpr int XB = XCB;                             // items whose loads fly together
        for (int base = 0; base < items; base += XB * 32 * CW) {   // uniform per block
            kc_u4 blk[XB][HB];
#pragma unroll
            for (int b = 0; b < XB; ++b) {
                const int it = base + b * 32 * CW + (int)threadIdx.x;
                const bool valid = it < items;
                const int grp = it >> 1, half = it & 1;
                const int r = valid ? grp / groups : 0, gi = valid ? grp - r * groups : 0;
                const u16* src = x + (long long)r * in + k0 + gi * GROUP + half * (GROUP / 2);
#pragma unroll
                for (int q = 0; q < HB; ++q) {
                    if (valid) {
                        asm("ld.global.v4.u32 {%0,%1,%2,%3}, [%4];"   // coherent: see kc_grid_wait_for
                            : "=r"(blk[b][q].x), "=r"(blk[b][q].y), "=r"(blk[b][q].z), "=r"(blk[b][q].w) : "l"(src + 8 * q));
                    } else {
                        blk[b][q] = kc_u4{0, 0, 0, 0};
                    }
                }
            }
#pragma unroll
            for (int b = 0; b < XB; ++b) {   // lanes 2k and 2k+1 hold the halves of one (token, group): items is even
                const int it = base + b * 32 * CW + (int)threadIdx.x;
                const bool valid = it < items;
                const int grp = it >> 1, half = it & 1;
                const int r = valid ? grp / groups : 0, gi = valid ? grp - r * groups : 0;
                float mx = 0.f, E = 0.f, O = 0.f;
#pragma unroll
                for (int q = 0; q < HB; ++q) {
                    const u32 w4[4] = {blk[b][q].x, blk[b][q].y, blk[b][q].z, blk[b][q].w};
#pragma unroll
                    for (int h = 0; h < 4; ++h) {
                        const float lo = kc_half(w4[h], 0), hi = kc_half(w4[h], 1);   // x[2h], x[2h+1]
                        mx = fmaxf(mx, fmaxf(fabsf(lo), fabsf(hi)));
                        E += lo;
                        O += hi;
                    }
                }
                if (b == 0) tl.mark(3);   // x's first loads have landed
                mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, 1));
                E += __shfl_xor_sync(0xFFFFFFFFu, E, 1);
                O += __shfl_xor_sync(0xFFFFFFFFu, O, 1);
                // sigma = 2^e, the smallest power of two >= mx (1 for an all-zero group).
                // An infinity (fmaxf passes NaN over) makes both NaN, so that the
                // group's sums are NaN rather than infinities of either sign.
                const u32 mb = __float_as_uint(mx);
                const int e = mx == 0.f ? 0 : (int)((mb >> 23) & 0xFF) - 127 + ((mb & 0x7FFFFF) != 0);
                const bool inf = mb >= 0x7F800000u;
                const float sigma = inf ? __uint_as_float(0x7FC00000u) : __uint_as_float((u32)(127 + e) << 23);
                const float inv = inf ? sigma : __uint_as_float((u32)(127 - e) << 23);
                if (valid) {
                    kc_u4* dst = reinterpret_cast<kc_u4*>(xres + r * xrstride + (gi * GROUP + half * (GROUP / 2)) * 2);
#pragma unroll
                    for (int q = 0; q < HB; ++q) {
                        const u32 w4[4] = {blk[b][q].x, blk[b][q].y, blk[b][q].z, blk[b][q].w};
                        float v[8];
#pragma unroll
                        for (int h = 0; h < 4; ++h) { v[2 * h] = kc_half(w4[h], 0) * inv; v[2 * h + 1] = kc_half(w4[h], 1) * inv; }
                        kc_u4 o;
                        o.x = kc_f16x2(v[0], v[4]);
                        o.y = kc_f16x2(v[1] * 0.0625f, v[5] * 0.0625f);
                        o.z = kc_f16x2(v[2], v[6]);
                        o.w = kc_f16x2(v[3] * 0.0625f, v[7] * 0.0625f);
                        dst[q] = o;
                    }
                    if (half == 0) xcon[gi * XT + r] = make_float4(sigma, (FOLD3 ? -1.f : 1.f) * (1024.f * E + 64.f * O), E + O, 0.f);
                }
            }
        }
#endif
        asm volatile("bar.sync 1, %0;" :: "n"(32 * CW) : "memory");   // the consumer warps only
        tl.mark(1);
#if XHOLD
        if (threadIdx.x == 0) kc_bar_arrive(kc_smem(&xbar));   // the producer may go on
#endif
    }
#endif
    // A warp's sums for the tile it is in, over its consecutive chunks of
    // that tile (`held` of them): they go to the tile's shared accumulator
    // once, not after every chunk (bench/NOTES.md, ninth session: the
    // shared-memory float atomics cost up to 1.8x at 16 tokens, and at one
    // token they made 64-row tiles slower than 32-row ones).
    float acc[MT][NT][4];
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int n = 0; n < NT; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[m][n][e] = 0.f;
#if FASTADDR
    // Where this lane's bytes of a group sit in a swizzled line: the
    // group's 16-byte chunk k (k = (offset in the line) / 16, a constant
    // below) lands at chunk k ^ pg, at the lane's offset in it, in row pg.
    // The lane's part of the offset (tig * 4 * WPT) and the group's never
    // share a bit, so the XOR splits into a constant and this table.
    int xb[8];
    {
        const int lt = (((tig * 4 * WPT) >> 4) ^ pg) & 7;
#pragma unroll
        for (int k = 0; k < 8; ++k) xb[k] = pg * 128 + (((k ^ lt) & 7) << 4) + ((tig * 4 * WPT) & 15);
    }
#endif
    int held = 0;                                        // chunks whose sums acc holds
    // The end path (ENDR, below) where the block's last SG stages are all
    // of its last tile: there every warp ends in that tile. Where they are
    // not (tiles of fewer chunks than stage groups), the warps that end in
    // an earlier tile add their shares while the last one is computed, and
    // waiting for them at the end was slower (4096->14336: 12.6 against
    // 12.4 us).
    const bool endr = ENDR && nstages >= SG && (nstages - SG) / nch == my_tiles - 1;
    (void)endr;   // (unused where ENDR is 0, as with SPLITK)
    const int sgi = warp / WK, sub = warp % WK;
    for (int i = sgi; i < nstages; i += SG) {
        const int s = i % NS;
        int k, c;
        kc_stage(i, nch, my_tiles, k, c);
        const unsigned char* slot = smem + s * STAGE;
        const u16* sc = reinterpret_cast<const u16*>(slot + SOFF + (NSBUF > 1 ? ((i / NS) & 1) * SBUF : 0));
        // With PARTS > 1 each part but the last is released as soon as it
        // is used, so its refill overlaps the arithmetic of the rest.
#pragma unroll 1
        for (int part = 0; part < PARTS; ++part) {
            if (part > 0) {
                __syncwarp();
                if (lane == 0) kc_bar_arrive(empty0 + 16 * NS * (part - 1) + 8 * s);
            }
            KC_TL_WAIT(full0 + 16 * NS * part + 8 * s, (i / NS) & 1);
#if defined(KC_DIAG_EARLYREL) && PARTS == 1
            __syncwarp();   // (diagnostics: the slot released before it is read; results may be wrong)
            if (lane == 0) kc_bar_arrive(empty0 + 8 * s);
#endif
#ifdef KC_DIAG_NOMATH
            continue;   // (diagnostics: the feed alone; results are wrong)
#endif
#if FASTADDR
            // This warp's UW consecutive groups of the part, UG at a time:
            // they start on a whole 128-byte line, so every offset below
            // but the line's is a constant.
            const int u0 = part * (U / PARTS) + sub * UW;
#pragma unroll 1
            for (int jb = 0; jb < UW; jb += UG) {
            const unsigned char* line = slot + ((u0 + jb) * GBYTES / 128) * (TR * 128);
            const int ub2 = (u0 + jb) >> 1;                      // u0 + jb is even (UG is)
#pragma unroll
            for (int jj = 0; jj < UG; ++jj) {
                const int u = u0 + jb + jj;
                const int uh = ub2 + (jj >> 1), uo = jj & 1;     // the word of group u's scale, and its half
#else
#pragma unroll kUnroll
            for (int u = part * (U / PARTS) + sub; u < (part + 1) * (U / PARTS); u += WK) {
                const int uh = u >> 1, uo = u & 1;
#endif
                // x of group u for this lane's tokens, then the weights.
                u32 xw[NT][4 * XLD];
#pragma unroll
                for (int n = 0; n < NT; ++n)
#pragma unroll
                    for (int l = 0; l < XLD; ++l) {
#if FP16
                        const kc_u4 v = *reinterpret_cast<const kc_u4*>(xres + xr[n] * xrstride + ((c * U + u) * GROUP + tig * VPT + 8 * l) * 2);
#else
                        const kc_u4 v = *reinterpret_cast<const kc_u4*>(slot + XOFF + xr[n] * XSTRIDE + (u * GROUP + tig * VPT + 8 * l) * 2);
#endif
                        xw[n][4 * l + 0] = v.x; xw[n][4 * l + 1] = v.y; xw[n][4 * l + 2] = v.z; xw[n][4 * l + 3] = v.w;
                    }
                u32 w[MT][2][WPT];
#pragma unroll
                for (int m = 0; m < MT; ++m)
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        // This lane's run of row `row` at byte `off` of the stage's row piece;
                        // each 16-byte chunk sits where the swizzle put it.
                        const int off = u * GBYTES + tig * (4 * WPT);
#if FASTADDR
                        auto at = [&](int o) {   // o - off: a constant; xb holds the lane's part
                            const int oc = jj * GBYTES + (o - off);
                            return reinterpret_cast<const u32*>(line + (oc >> 7) * (TR * 128) + (16 * m + 8 * h) * 128 +
                                                                xb[(oc >> 4) & 7]);
                        };
#else
                        const int row = 16 * m + 8 * h + pg;
                        auto at = [&](int o) {
                            return reinterpret_cast<const u32*>(slot + (o >> 7) * (TR * 128) + row * 128 +
                                                                (((o >> 4) & 7) ^ (row & 7)) * 16 + (o & 15));
                        };
#endif
                        const u32* p = at(off);
#if WPT >= 4
#pragma unroll
                        for (int q = 0; q < WPT; q += 4) {
                            const kc_u4 v = *reinterpret_cast<const kc_u4*>(at(off + 4 * q));
                            w[m][h][q] = v.x; w[m][h][q + 1] = v.y; w[m][h][q + 2] = v.z; w[m][h][q + 3] = v.w;
                        }
#elif WPT == 2
                        const uint2 v = *reinterpret_cast<const uint2*>(p);
                        w[m][h][0] = v.x; w[m][h][1] = v.y;
#else
                        w[m][h][0] = p[0];
#endif
                    }
#if DP2A
                // One token on the integer pipes: the lane's VPT values of each of
                // its rows (tile rows 16m+pg+8h) against its VPT x (int16 from the
                // conversion), exact in 32 bits from a bias of 1.5*2^23, so that the
                // float of each sum is its bits; the 4 lanes of a row add their sums
                // at the flush (kc_quad_sum). x's int8 residuals: with XLO 1 here,
                // in every group; else after the warp's run, where a group has them.
                {
                    const float4 xc = xcon[(c * U + u) * XT];
#if XLO == 1
                    // the residuals of the lane's VPT x: 2 words (odd and even places) per 8
                    u32 xl[VPT / 4];
                    {
                        const unsigned char* lp = xlo + (c * U + u) * GROUP + tig * VPT;
#pragma unroll
                        for (int k = 0; k < VPT / 4; k += 2) {
                            const uint2 p2 = *reinterpret_cast<const uint2*>(lp + 4 * k);
                            xl[k] = p2.x;
                            xl[k + 1] = p2.y;
                        }
                    }
#endif
#pragma unroll
                    for (int m = 0; m < MT; ++m) {
                        const int r0 = 16 * m + pg, r1 = r0 + 8;
                        const u32* sw = reinterpret_cast<const u32*>(sc) + uh;
                        const float sv[2] = {kc_half(sw[r0 * (SSTRIDE / 4)], uo), kc_half(sw[r1 * (SSTRIDE / 4)], uo)};
                        const float bv[2] = {kc_half(sw[(TR + r0) * (SSTRIDE / 4)], uo), kc_half(sw[(TR + r1) * (SSTRIDE / 4)], uo)};
#pragma unroll
                        for (int h = 0; h < 2; ++h) {
                            int d = 0x4B400000;
#if XLO == 1
                            int dr = 0x4B400000;
#endif
#pragma unroll
                            for (int wi = 0; wi < WPT; ++wi) {
                                const u32 wv = w[m][h][wi];
                                const u32 lo = wv & 0x0F0F0F0Fu, hi = (wv >> 4) & 0x0F0F0F0Fu;
                                d = kc_dp2a<0>(xw[0][4 * wi], lo, d);       // (x0, x2) by (v0, v2)
                                d = kc_dp2a<1>(xw[0][4 * wi + 1], lo, d);   // (x4, x6) by (v4, v6)
                                d = kc_dp2a<0>(xw[0][4 * wi + 2], hi, d);   // (x1, x3) by (v1, v3)
                                d = kc_dp2a<1>(xw[0][4 * wi + 3], hi, d);   // (x5, x7) by (v5, v7)
#if XLO == 1
                                dr = kc_dp4a(xl[2 * wi], lo, dr);           // the residuals: even places
                                dr = kc_dp4a(xl[2 * wi + 1], hi, dr);       // odd places
#endif
                            }
#if XLO == 1
                            // sigma' * (the sum + the residuals' sum / 128)
                            const float dot = fmaf(xc.w, __int_as_float(dr), fmaf(xc.x, __int_as_float(d), xc.y));
#else
                            const float dot = fmaf(xc.x, __int_as_float(d), xc.y);   // sigma' * the sum
#endif
                            acc[m][0][2 * h] = fmaf(sv[h], dot, fmaf(bv[h], xc.z, acc[m][0][2 * h]));
                        }
                    }
                }
                continue;
#endif
                float t[MT][NT][4], xs[NT][4];
#pragma unroll
                for (int wi = 0; wi < WPT; ++wi) {
                    // B pairs for word wi, in the order its A pairs unpack.
                    u32 q[NT][4];
#pragma unroll
                    for (int n = 0; n < NT; ++n) {
#if FP16
                        q[n][0] = xw[n][4 * wi]; q[n][1] = xw[n][4 * wi + 1];   // converted in place
                        q[n][2] = xw[n][4 * wi + 2]; q[n][3] = xw[n][4 * wi + 3];
#elif BITS == 4
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
#if FP16
#pragma unroll
                        for (int m = 0; m < MT; ++m) {
                            const u32 wg = w[m][0][wi], wg8 = w[m][1][wi];
                            const u32 a0 = kc_nib16(wg, 2 * half), a1 = kc_nib16(wg8, 2 * half);
                            const u32 a2 = kc_nib16(wg, 2 * half + 1), a3 = kc_nib16(wg8, 2 * half + 1);
#pragma unroll
                            for (int n = 0; n < NT; ++n)
                                kc_mma16(t[m][n], a0, a1, a2, a3, q[n][2 * half], q[n][2 * half + 1], more);
                        }
                        continue;
#endif
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
#if FP16
                // Fold: acc += s*(sigma*t - (1024E + 64O)) + b*(E + O), rows g
                // (e = 0, 1) and g+8 (e = 2, 3) of the mma, tile rows pg and pg+8; token
                // columns 8n+2tig, 8n+2tig+1.
#pragma unroll
                for (int n = 0; n < NT; ++n) {
                    const float4 xc0 = xcon[(c * U + u) * XT + min(8 * n + 2 * tig, min(tokens, XT) - 1)];
                    const float4 xc1 = xcon[(c * U + u) * XT + min(8 * n + 2 * tig + 1, min(tokens, XT) - 1)];
#pragma unroll
                    for (int m = 0; m < MT; ++m) {
                        const int r0 = 16 * m + pg, r1 = r0 + 8;
                        const u32* sw = reinterpret_cast<const u32*>(sc) + uh;
                        const float s0 = kc_half(sw[r0 * (SSTRIDE / 4)], uo), s1 = kc_half(sw[r1 * (SSTRIDE / 4)], uo);
                        const float b0 = kc_half(sw[(TR + r0) * (SSTRIDE / 4)], uo), b1 = kc_half(sw[(TR + r1) * (SSTRIDE / 4)], uo);
#if FOLD3
                        // acc += s*(sigma*t - (1024E + 64O)) + b*(E + O), xc.y holding -(1024E + 64O)
                        acc[m][n][0] = fmaf(s0, fmaf(xc0.x, t[m][n][0], xc0.y), fmaf(b0, xc0.z, acc[m][n][0]));
                        acc[m][n][2] = fmaf(s1, fmaf(xc0.x, t[m][n][2], xc0.y), fmaf(b1, xc0.z, acc[m][n][2]));
                        if (XT > 8 * n + 1) {   // odd token columns: none at one token
                            acc[m][n][1] = fmaf(s0, fmaf(xc1.x, t[m][n][1], xc1.y), fmaf(b0, xc1.z, acc[m][n][1]));
                            acc[m][n][3] = fmaf(s1, fmaf(xc1.x, t[m][n][3], xc1.y), fmaf(b1, xc1.z, acc[m][n][3]));
                        }
#else
                        acc[m][n][0] = fmaf(s0 * xc0.x, t[m][n][0], fmaf(b0, xc0.z, fmaf(-s0, xc0.y, acc[m][n][0])));
                        acc[m][n][2] = fmaf(s1 * xc0.x, t[m][n][2], fmaf(b1, xc0.z, fmaf(-s1, xc0.y, acc[m][n][2])));
                        if (XT > 8 * n + 1) {   // odd token columns: none at one token
                            acc[m][n][1] = fmaf(s0 * xc1.x, t[m][n][1], fmaf(b0, xc1.z, fmaf(-s0, xc1.y, acc[m][n][1])));
                            acc[m][n][3] = fmaf(s1 * xc1.x, t[m][n][3], fmaf(b1, xc1.z, fmaf(-s1, xc1.y, acc[m][n][3])));
                        }
#endif
                    }
                }
                continue;
#endif
                // Fold: acc += s*t + (b - C*s)*xsum, mma rows g (e = 0, 1) and g+8 (e = 2,
                // 3), tile rows pg and pg+8.
#pragma unroll
                for (int m = 0; m < MT; ++m) {
                    const int r0 = 16 * m + pg, r1 = r0 + 8;
                    // Scales and biases of groups u and u^1 share a word.
                    const u32* sw = reinterpret_cast<const u32*>(sc) + uh;
                    const float s0 = kc_half(sw[r0 * (SSTRIDE / 4)], uo), s1 = kc_half(sw[r1 * (SSTRIDE / 4)], uo);
                    const float b0 = fmaf(-OFFSET, s0, kc_half(sw[(TR + r0) * (SSTRIDE / 4)], uo));
                    const float b1 = fmaf(-OFFSET, s1, kc_half(sw[(TR + r1) * (SSTRIDE / 4)], uo));
#pragma unroll
                    for (int n = 0; n < NT; ++n) {
                        acc[m][n][0] = fmaf(s0, t[m][n][0], fmaf(b0, xs[n][0], acc[m][n][0]));
                        acc[m][n][2] = fmaf(s1, t[m][n][2], fmaf(b1, xs[n][2], acc[m][n][2]));
                        if (XT > 8 * n + 1) {   // odd token columns: none at one token
                            acc[m][n][1] = fmaf(s0, t[m][n][1], fmaf(b0, xs[n][1], acc[m][n][1]));
                            acc[m][n][3] = fmaf(s1, t[m][n][3], fmaf(b1, xs[n][3], acc[m][n][3]));
                        }
                    }
                }
            }
#if FASTADDR
            }
#endif
#if DP2A && XLO != 1
            // x's int8 residuals where a group of the warp's has them (warp-uniform:
            // one group at a time, and xany is the block's): each such group's
            // weights again, with dp4a, s * sigma'/128 * the residuals' sum.
            if (*xany) {
                // the warp's groups of the part: a run of UW (FASTADDR), else every WK-th
                const int ub = part * (U / PARTS) + sub * (FASTADDR ? UW : 1);
                const int ue = FASTADDR ? ub + UW : (part + 1) * (U / PARTS);
#pragma unroll 1
                for (int u = ub; u < ue; u += FASTADDR ? 1 : WK) {
                    const float4 xc = xcon[(c * U + u) * XT];
                    if (xc.w == 0.f)
                        continue;
                    kc_residuals(acc, slot, sc, xlo + (c * U + u) * GROUP, u, pg, tig, xc.w);
                }
            }
#endif
        }
        // The warp's share of the tile, added in once its next chunk is of
        // another tile (or none): acc[m][n][e] is tile row 16m+pg+8(e>>1), token
        // 8n+2tig+(e&1). Until then the slot is released at once.
        ++held;
        int knext = -1, cnext;
        if (i + SG < nstages) kc_stage(i + SG, nch, my_tiles, knext, cnext);
        if (knext == k) {
            __syncwarp();
            if (lane == 0) KC_RELEASE(empty0 + 16 * NS * (PARTS - 1) + 8 * s);
            continue;
        }
#if SPLITK
        // The warp's sums over its chunks of the tile go into the workspace
        // (the other chunks' sums, and the other slices', are added there too).
        {
            tl.flushing();
            kc_quad_sum(acc);
            const int row0 = ((int)blockIdx.x + k * (int)gridDim.x) * TR;
            kc_each_sum(acc, pg, tig, min(tokens, XT), [&](int j, float v) {
                const int tok = j / TR, row = row0 + j - tok * TR;
                if (row < out) kc_store(y, bias, out, tok, row, v);
            });
#pragma unroll
            for (int m = 0; m < MT; ++m)
#pragma unroll
                for (int n = 0; n < NT; ++n)
#pragma unroll
                    for (int e = 0; e < 4; ++e) acc[m][n][e] = 0.f;
            held = 0;
            __syncwarp();
            if (lane == 0) KC_RELEASE(empty0 + 16 * NS * (PARTS - 1) + 8 * s);
            continue;
        }
#endif
#if ENDR
        if (endr && i + SG >= nstages) {   // the warp's last chunk: its sums are added in at the end (below)
            __syncwarp();
            if (lane == 0) KC_RELEASE(empty0 + 16 * NS * (PARTS - 1) + 8 * s);
            break;
        }
#endif
        const int b = k % NS;
        tl.flushing();
        float* tred = red + b * RED_FLOATS;
        kc_quad_sum(acc);
#if DETRED
        kc_each_sum(acc, pg, tig, 1, [&](int j, float v) { tred[warp * TR + j] = v; });
#else
        kc_each_sum(acc, pg, tig, min(tokens, XT), [&](int j, float v) { atomicAdd(&tred[j], v); });
#endif
#pragma unroll
        for (int m = 0; m < MT; ++m)
#pragma unroll
            for (int n = 0; n < NT; ++n)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[m][n][e] = 0.f;
        __syncwarp();
        int done = 0;
        if (lane == 0) {
            __threadfence_block();
            done = atomicAdd(&cnt[b], held) == WK * nch - held;
        }
        held = 0;
        done = __shfl_sync(0xFFFFFFFFu, done, 0);
        if (done) {
            // This warp's count completed the tile: every chunk's sums are in tred.
            // (Lane 0 read the count; its fence, then the warp barrier, order
            // every lane's reads after the other warps' stores.)
            __threadfence_block();
            __syncwarp();
            const int row0 = ((int)blockIdx.x + k * (int)gridDim.x) * TR;
            const int ntok = min(tokens, XT);
            for (int j = lane; j < ntok * TR; j += 32) {
                const int tok = j / TR, r = j - tok * TR, row = row0 + r;
#if DETRED
                float v = 0.f;   // in warp order; a warp without a share of the tile left its slot 0
#pragma unroll
                for (int w = 0; w < CW; ++w) {
                    v += tred[w * TR + j];
                    tred[w * TR + j] = 0.f;
                }
#else
                const float v = tred[j];
                tred[j] = 0.f;
#endif
                if (row < out) kc_store(y, bias, out, tok, row, v);
            }
            if (lane == 0) cnt[b] = 0;
            __syncwarp();
        }
        if (lane == 0) KC_RELEASE(empty0 + 16 * NS * (PARTS - 1) + 8 * s);
    }
#if ENDR
    // The block's end (where its last SG stages are all of its last tile).
    // A warp's chunks of that tile are the last of its sequence, so it
    // holds the sums of all of them, and the tile's accumulator was never
    // used. Once every consumer warp is here, every stage has been
    // consumed, so the ring is free: each warp stores its sums there, and
    // all consumer threads add them in warp order and store y. This replaced
    // the shared-memory float atomics (a compare-and-swap loop on sm_90) of
    // all the warps at once: 28672->8192 34.1 against 34.5 us, 4096^2 4.8
    // against 5.1 (bench/NOTES.md, eleventh session).
    if (!endr) {
        tl.finish(lane);
        return;
    }
    tl.flushing();
    asm volatile("bar.sync 1, %0;" :: "n"(32 * CW) : "memory");
    float* fin = reinterpret_cast<float*>(smem) + warp * (XT * TR);   // [CW][XT][TR]
    kc_quad_sum(acc);
    kc_each_sum(acc, pg, tig, min(tokens, XT), [&](int j, float v) { fin[j] = v; });
    asm volatile("bar.sync 1, %0;" :: "n"(32 * CW) : "memory");
    const int row0 = ((int)blockIdx.x + (my_tiles - 1) * (int)gridDim.x) * TR;
    const int ntok = min(tokens, XT);
    const float* fins = reinterpret_cast<const float*>(smem);
    for (int j = threadIdx.x; j < ntok * TR; j += 32 * CW) {
        const int tok = j / TR, r = j - tok * TR, row = row0 + r;
        float v = 0.f;
#pragma unroll
        for (int w = 0; w < CW; ++w) v += fins[(w * XT + tok) * TR + r];
        if (row < out) kc_store(y, bias, out, tok, row, v);
    }
#endif
    tl.finish(lane);
}

// SPLIT K: the two kernels around a SPLITK launch. Both take early start:
// each waits for the grid ahead before it touches memory (the clear, so
// that it cannot zero the workspace while the previous call's finish still
// reads it, and so that a wait on it also covers the kernel that writes x).

// part[0..n) = 0, n a multiple of 4 (the workspace: [tokens][out] floats,
// out % 8 == 0). Any grid.
extern "C" __global__ void affine_bulk_clear(float* __restrict__ part, int n)
{
    kc_grid_release();
    part = reinterpret_cast<float*>(const_cast<u16*>(kc_grid_wait_for(reinterpret_cast<const u16*>(part))));
    float4* p4 = reinterpret_cast<float4*>(part);
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n / 4; i += gridDim.x * blockDim.x)
        p4[i] = make_float4(0.f, 0.f, 0.f, 0.f);
}

// y[t][o] = bf16(part[t][o] + bias[o]) (RNE; bias may be null), four
// outputs per thread. Any grid.
extern "C" __global__ void affine_bulk_finish(const float* __restrict__ part, const u16* __restrict__ bias,
                                              u16* __restrict__ y, int tokens, int out)
{
    kc_grid_release();
    part = reinterpret_cast<const float*>(kc_grid_wait_for(reinterpret_cast<const u16*>(part)));
    const int n4 = tokens * out / 4;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += gridDim.x * blockDim.x) {
        float4 v;
        asm("ld.global.v4.f32 {%0,%1,%2,%3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(part + 4 * i));
        const int row = (4 * i) % out;
        if (bias != nullptr) {
            v.x += kc_bf16(kc_ldh(bias + row)); v.y += kc_bf16(kc_ldh(bias + row + 1));
            v.z += kc_bf16(kc_ldh(bias + row + 2)); v.w += kc_bf16(kc_ldh(bias + row + 3));
        }
        uint2 o;
        o.x = (u32)kc_to_bf16(v.x) | ((u32)kc_to_bf16(v.y) << 16);
        o.y = (u32)kc_to_bf16(v.z) | ((u32)kc_to_bf16(v.w) << 16);
        *reinterpret_cast<uint2*>(y + 4 * i) = o;
    }
}
