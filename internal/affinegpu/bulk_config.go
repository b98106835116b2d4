package affinegpu

import (
	"fmt"
	"slices"

	"github.com/kcand/kcand/sdk"
)

// BulkConfig is one variant of kernels/bulk.cu (its -D macros) and its K
// slices. The choice mirrors bulk_config in scripts/affine_kernels.py,
// where the variants were timed; the kernel's header states the rule and
// the shared-memory sizes.
type BulkConfig struct {
	Bits, Group int
	MT          int  // 16-row m-tiles per tile
	CW          int  // consumer warps (and one producer warp per part)
	WK          int  // consumer warps sharing each stage, each with a run of its groups
	U           int  // groups per ring stage
	NS          int  // ring stages, a multiple of CW
	XT          int  // token rows of x (the token count)
	FP16        bool // fp16 operands, x converted once per block and kept resident
	Parts       int  // copies per stage, each released once used (1, 2 or 4)
	KS          int  // K slices (0: none; above 1 SPLITK): blockIdx.y takes in/KS inputs, the sums meet in a float workspace
	XHold       int  // FP16: the producer holds this stage until the consumers have converted x (0: never; bulkXHold)
	DP2A        bool // one token on the integer pipes: x as int16 and int8 residuals, dp2a and dp4a, no mma (bulkDP2A)
	Unroll      int  // groups unrolled together in the consumer loop (0: the kernel's 4)
	XLoads      int  // FP16: items of x a consumer thread loads at once as it converts x (0: the kernel's default; bulkXLoads)
}

// The bulk rule's constants: 512 packed bytes of each row per stage (256
// in 64-row tiles), 8 consumer warps, at most 16 stages, fp16 operands up
// to 8192 input features (beyond, converting x up front costs more than it
// saves; at one token up to bulkMaxFP16InOneToken, bulkWideOneToken), and
// the H100/H200's 227 KiB of opt-in shared memory per block.
const (
	bulkSegment     = 512
	bulkWideSegment = 256
	bulkWarps       = 8
	bulkMaxStages   = 16
	bulkMaxFP16In   = 8192
	bulkMaxShared   = 227 << 10
	bulkSharedSlack = 1024 // the stages' 1024-byte alignment (see the kernel)
	// bulkMinWarpsAbove is the fewest consumer warps a stage of more groups
	// than the segment asks for may leave room for, and bulkMinStagesAbove
	// the fewest stages its block must then take.
	bulkMinWarpsAbove  = 4
	bulkMinStagesAbove = 4
	// BulkMaxTokens is the most tokens the kernel takes; above
	// BulkSplitTokens it slices K, each slice's fp16 x at most
	// bulkMaxSliceX bytes so that the ring keeps its room.
	BulkMaxTokens   = 16
	BulkSplitTokens = 8
	bulkMaxSliceX   = 64 << 10
)

// ChooseBulk picks the bulk variant for req on a GPU with sms
// multiprocessors and maxShared bytes of shared memory per block, or says
// why the kernel does not serve req. Up to 8 tokens a block takes all the
// inputs; above, at 4 bits, K slices (bulkSplits) with fp16 operands.
func ChooseBulk(req sdk.Request, sms, maxShared int) (BulkConfig, string) {
	bits, group := req.Weight.Bits, req.Weight.GroupSize
	if bits != 4 && bits != 8 {
		return BulkConfig{}, fmt.Sprintf("the bulk kernel unpacks 4 and 8 bits, not %d", bits)
	}
	if req.Tokens < 1 || req.Tokens > BulkMaxTokens {
		return BulkConfig{}, fmt.Sprintf("the bulk kernel serves 1 to %d tokens, not %d", BulkMaxTokens, req.Tokens)
	}
	ks := 1
	if req.Tokens > BulkSplitTokens {
		if bits != 4 {
			return BulkConfig{}, fmt.Sprintf("above %d tokens the bulk kernel slices K with fp16 operands, which need 4 bits, not %d", BulkSplitTokens, bits)
		}
		if ks = bulkSplits(req, sms); ks == 0 {
			return BulkConfig{}, fmt.Sprintf("in_features=%d does not split into at most %d slices (one per multiprocessor) of whole 8-group stages whose x fits %d bytes", req.InFeatures, sms, bulkMaxSliceX)
		}
	}
	g := max(sms/ks, 1) // blocks per slice
	choose := func(fp16 bool) (BulkConfig, string) {
		// No 64-row tiles in slices (twelfth session, 16 tokens,
		// 4096->14336: 22.7-25.9 us against 32-row tiles' 19.8).
		cfg, why := chooseBulkTiles(req, sms, maxShared, bulkTileRows(req.OutFeatures, bits, group, g, ks == 1, fp16)/16, ks, fp16)
		if why == "" && cfg.MT == 4 && cfg.CW < bulkWarps {
			// 64-row tiles only where eight warps' stages fit; else the
			// narrower tiles' rule.
			cfg, why = chooseBulkTiles(req, sms, maxShared, bulkTileRows(req.OutFeatures, bits, group, g, false, fp16)/16, ks, fp16)
		}
		return cfg, why
	}
	finish := func(cfg BulkConfig) BulkConfig {
		cfg.XHold = bulkXHold(req, cfg, sms, maxShared)
		cfg.DP2A, cfg.Unroll = bulkDP2A(req, cfg, maxShared)
		cfg.XLoads = bulkXLoads(req, cfg)
		return cfg
	}
	cfg, why := choose(bulkFP16(req, ks))
	if why == "" {
		cfg = finish(cfg)
	}
	if bulkWideOneToken(req, ks) {
		if wide, w := choose(true); w == "" && wide.MT <= 2 && wide.CW == bulkWarps && wide.NS == bulkXHoldRing {
			if wide = finish(wide); wide.DP2A {
				cfg, why = wide, ""
			}
		}
	}
	return cfg, why
}

// bulkMaxFP16InOneToken is the most input features a block converts x for
// at one token where bulkWideOneToken applies.
const bulkMaxFP16InOneToken = 16384

// bulkWideOneToken says whether req (one token, 4 bits, unsliced, more
// than bulkMaxFP16In and at most bulkMaxFP16InOneToken inputs) should try
// fp16 operands, and with them DP2A: ChooseBulk keeps that variant where
// its tiles have at most 32 rows, a ring of bulkXHoldRing stages of eight
// warps still fits beside the resident x, and so does DP2A's. Twenty-fifth
// session, one token, us: 14336->4096 11.0 with x's loads in one round
// (bulkXLoads; 10.5 before DP2A kept x's residuals) against 11.1-11.2
// with bf16 x staged, 10240->14336 23.9 (before the residuals) against
// 34.7; not taken, as their fp16 variants do not keep that ring:
// 13824->5120 (four warps) 18.1-18.3 against 17.7. Above: 28672->8192
// 34.5-35.3 against 34.0-34.2.
func bulkWideOneToken(req sdk.Request, ks int) bool {
	return req.Tokens == 1 && req.Weight.Bits == 4 && ks == 1 && req.InFeatures > bulkMaxFP16In && req.InFeatures <= bulkMaxFP16InOneToken
}

// bulkXLoads is the items of x each consumer thread loads at once as it
// converts x (XCB in the kernel; 0: the kernel's default): at one token
// with fp16 operands, enough that every load flies in one round. An item
// is half a group, or with DP2A a quarter (bulkDP2APieces). 14336->4096
// (448 halves on 256 threads, DP2A without x's residuals): 10.5 us with 2
// against 11.0-11.1 with 1; 4 (64 registers of loads) was 11.1.
func bulkXLoads(req sdk.Request, c BulkConfig) int {
	if req.Tokens != 1 || !c.FP16 || c.KS > 1 {
		return 0
	}
	pieces := 2
	if c.DP2A {
		pieces = bulkDP2APieces
	}
	if n := ceilDiv(pieces*(req.InFeatures/c.Group), 32*c.CW); n > 1 {
		return n
	}
	return 0
}

// bulkDP2APieces is the lanes that convert each group of x together with
// DP2A (the kernel's XPC default): a quarter group each, so that at 4096
// inputs every consumer thread converts (twenty-sixth session, one token,
// us, against halves in the same call: 4096->14336 9.7 against 9.9,
// 4096x4096 4.1 against 4.4, 14336->4096 10.0 against 10.7 (4 quarters a
// thread against 2 halves), 8192->28672 32.4 against 32.6).
const bulkDP2APieces = 4

// bulkDP2A says whether the variant takes one token on the integer pipes
// (DP2A in the kernel), and the unroll it takes then. At one token the
// mma multiplies 8 columns of x of which 7 are copies of the token's, and
// it costs the SM its clock: the kernel ran at 1.79 GHz against 1.97 with
// the mma left out and everything else done (twenty-fifth session,
// clock64 against %globaltimer). With fp16 operands x is converted once per
// block anyway; DP2A converts it to int16 (x/sigma in units of 2^-14, or
// 2^-13 in groups of 128) and what that leaves to int8 (in units 128 times
// finer: x's small values beside a group's outlier keep their precision,
// which int16 alone lost at channels 100 times the rest), and each lane
// adds its values of a row and group (16 in groups of 64) with dp2a,
// exact in 32 bits, the four lanes of a row meeting once per tile; the
// residuals' products (dp4a) only in the groups whose int16 values erred
// by more than 2^-10 of the values but their largest (the kernel's XLO;
// bf16 values in [-1, 1] are exact in int16 down to 1/128, so random
// inputs need them nowhere, outlier channels in their groups). It takes
// in bytes more of shared memory (the int8 residuals), so it applies where
// those still fit (with the hold's pad where it holds). Twenty-sixth
// session: with x converted in about 10 instructions a value on four
// lanes a group (bulkDP2APieces) and the residuals only where needed,
// 4096->14336 9.7 us, 14336->4096 9.8, 4096x4096 4.1, 8192->28672 32.4
// (the final run; 10.3, 11.0, 4.6 and 32.5 in the twenty-fifth's).
// Same call, one token, us, with 8 groups unrolled where a warp's run
// (U/Parts/WK) is a multiple of 8 in 16- and 32-row tiles, against the mma
// (with the same unroll): 4096->14336 10.3 against 10.6, 4096x4096 4.7
// against 4.7, 4096->6144 6.0 against 6.1, 8192->28672 32.2 against 32.2;
// the mma with the kernel's unroll of 4: 10.9, 4.8, 6.3, 32.0. Without
// the residuals DP2A took 9.7-9.8, 4.4, 5.6 and 31.8-31.9, but it failed
// the check beside outlier channels. Fp16 operands at more than 8192
// inputs, to have DP2A, paid at 14336->4096 once x's loads went in one
// round (bulkXLoads, bulkWideOneToken), not at 28672->8192 (34.5-35.6
// against 34.0).
func bulkDP2A(req sdk.Request, c BulkConfig, maxShared int) (bool, int) {
	if req.Tokens != 1 || !c.FP16 || c.KS > 1 {
		return false, 0
	}
	pad := 0
	if c.XHold > 0 {
		pad = bulkXHoldPad
	}
	with := c
	with.DP2A = true
	if with.sharedBytes(req.InFeatures)+pad > maxShared {
		return false, 0
	}
	if run := c.U / c.Parts / c.WK; c.MT <= 2 && run%8 == 0 {
		return true, 8
	}
	return true, 0
}

// bulkXHoldRing is the ring bulkXHold applies to: 8 stages (512-byte row
// pieces in 32-row tiles, or 256-byte ones in 64-row tiles).
// bulkXHoldPad is the shared memory a held variant must leave free: its
// mbarrier is a static __shared__ variable, ahead of the dynamic shared
// memory, whose 1024-byte alignment the kernel relies on, so the dynamic
// part may start up to 1 KiB later. (Measured only well below the limit:
// the held variants timed took 166-200 KB.)
const (
	bulkXHoldRing = 8
	bulkXHoldPad  = 1024
)

// bulkXHold is the stage at which the producer waits for the consumers to
// have converted x (XHOLD in the kernel), or 0. The consumers load x after
// the wait for the grid ahead, and those loads come back behind every
// weight copy the block has in flight; with the whole ring in flight a
// block used its first stage 2 us later than without the conversion
// (bench/NOTES.md, twenty-first session). So at one token with
// fp16 operands, unsliced, a ring of bulkXHoldRing stages and a busiest
// block of more than half a ring and at most three rings of stages, only
// half the ring goes before x. Same call, three rounds, us, against the
// whole ring: 4096->6144 6.3 against 7.3-7.4, 4096->11008 8.8 against
// 9.0-9.1, 4096->14336 10.9-11.0 against 11.6-11.7, 5120->13824 12.6
// against 13.6, 8192x8192 12.1 against 12.2 (g64) and 11.9 against
// 12.0-12.1 (g128), but 13.0 against 12.9 in groups of 32. Longer blocks
// gained nothing or lost (4096->28672, 28 stages: the same; 8192->28672,
// 56: 33.0-33.6 against 32.8; nothing between 28 and 56 was measured),
// and so did rings of 16 stages (3584->18944 13.8-13.9 against 13.3,
// 2304->16896 in groups of 32 8.8 against 8.7). Variants within
// bulkXHoldPad of maxShared are left alone, and so are those wider than
// bulkMaxFP16In (bulkWideOneToken), whose conversion of x is the longer
// hold: twenty-sixth session, same call, four rounds, us, without against
// with: 14336->4096 9.7 against 9.8-9.9 (narrower: 4096->6144 6.4 against
// 5.3, 5120->13824 12.3 against 11.9).
func bulkXHold(req sdk.Request, c BulkConfig, sms, maxShared int) int {
	if req.Tokens != 1 || !c.FP16 || c.KS > 1 || c.NS != bulkXHoldRing || req.InFeatures > bulkMaxFP16In ||
		c.sharedBytes(req.InFeatures)+bulkXHoldPad > maxShared {
		return 0
	}
	stages := ceilDiv(ceilDiv(req.OutFeatures, 16*c.MT), max(sms, 1)) * (req.InFeatures / (c.U * c.Group))
	if stages <= c.NS/2 || stages > 3*c.NS {
		return 0
	}
	return c.NS / 2
}

// bulkSplits is the K slices above BulkSplitTokens tokens (0: none fit):
// of the slice counts up to sms whose slices are whole stages of 8 groups
// and whose fp16 x is at most bulkMaxSliceX bytes, the one that leaves the
// fewest multiprocessors idle (sms/ks blocks per slice), and of those the
// most slices. Twelfth session, 16 tokens, us: 4096->14336 19.8 in 4 slices
// against 21.1 in 2; 4096x4096 8.6 against 9.7; 14336->4096 20.5 in 14
// against 21.1 in 7; 28672->8192 60.9 in 14 against 68.7 in 28 (112
// blocks); 8192->28672 60.8 in 4, 60.9 in 8.
func bulkSplits(req sdk.Request, sms int) int {
	best, used := 0, -1
	step := 8 * req.Weight.GroupSize
	for ks := 2; ks*step <= req.InFeatures && ks <= sms; ks++ {
		if req.InFeatures%(ks*step) != 0 || 2*req.Tokens*(req.InFeatures/ks) > bulkMaxSliceX {
			continue
		}
		if u := max(sms/ks, 1) * ks; u >= used {
			best, used = ks, u
		}
	}
	return best
}

// chooseBulkTiles is ChooseBulk with the tile's m-tiles (mt) given. Its
// stages hold want groups (bulkStageGroups) where that divides the row's
// groups. Else, in 16- and 32-row tiles of which blocks take several, they
// hold the first larger size that leaves room for bulkMinWarpsAbove
// consumer warps and gives the busiest block bulkMinStagesAbove stages;
// else half or a quarter of want. Tenth session, 1 token: 13824 inputs in
// groups of 64 take stages of 24 groups, 19.4-19.6 us against 8 groups'
// 31.1-31.2; 3584->18944 took 56 (nine stages per block) with four
// warps, 17.3 against 8 with eight, 20.1; 2304->4240 at 8 bits in groups
// of 32, 24 groups 8.5 against 8 groups' 11.3. But with two stages per
// block 768->8192 at 8 bits took 7.0 against 5.5, and 1536->4240 at 4 bits
// 5.0 against 4.8; with one tile per block 4608->4096 in groups of 32 took
// 8.2 with 48 groups and four warps against 6.4 with 16 and eight; and
// 64-row tiles were not measured with larger stages.
func chooseBulkTiles(req sdk.Request, sms, maxShared, mt, ks int, fp16 bool) (BulkConfig, string) {
	bits, group := req.Weight.Bits, req.Weight.GroupSize
	segment := bulkSegment
	if mt == 4 || req.Tokens > BulkSplitTokens && !fp16 {
		segment = bulkWideSegment // (x staged with each stage outweighs the weights above 8 tokens)
	}
	groups := req.InFeatures / ks / group
	fit, above, below := bulkStageGroups(groups, group*bits/8, segment)
	tilesPerBlock := ceilDiv(ceilDiv(req.OutFeatures, 16*mt), max(sms/ks, 1))
	if mt == 4 || tilesPerBlock < 2 {
		above = nil
	}
	what := "in_features/group_size"
	if ks > 1 {
		what = fmt.Sprintf("in_features/%d slices/group_size", ks)
	}
	why := fmt.Sprintf("%s=%d groups do not split into stages of 8 to 64 groups", what, groups)
	for _, u := range slices.Concat(fit, above, below) {
		cfg, w := chooseBulkStages(req, sms, maxShared, mt, u, ks, fp16)
		larger := slices.Contains(above, u)
		if w == "" && (!larger || cfg.CW >= bulkMinWarpsAbove && tilesPerBlock*(groups/u) >= bulkMinStagesAbove) {
			return cfg, ""
		}
		if w != "" {
			why = w
		}
	}
	return BulkConfig{}, why
}

// bulkFP16 says whether the bulk kernel takes fp16 operands for req in ks
// K slices (x converted once per block and kept resident): at 4 bits, up
// to bulkMaxFP16In input features per block, and above BulkSplitTokens
// tokens only in slices.
func bulkFP16(req sdk.Request, ks int) bool {
	return req.Weight.Bits == 4 && req.InFeatures/ks <= bulkMaxFP16In && (req.Tokens <= BulkSplitTokens || ks > 1)
}

// chooseBulkStages is chooseBulkTiles with the groups per stage (u) given.
func chooseBulkStages(req sdk.Request, sms, maxShared, mt, u, ks int, fp16 bool) (BulkConfig, string) {
	bits, group := req.Weight.Bits, req.Weight.GroupSize
	cfg := BulkConfig{Bits: bits, Group: group, MT: mt, U: u, XT: req.Tokens, FP16: fp16, Parts: 1, WK: 1}
	if ks > 1 {
		cfg.KS = ks
	}
	// Stages in two parts when blocks take several tiles or tiles have 64
	// rows (the refill of a stage's first half then overlaps the arithmetic
	// of its second), and a stage halves into whole 128-byte lines; but
	// not in 16- and 32-row tiles with fp16 operands, where one part with
	// two warps on each stage is faster since the offsets are constants
	// (eleventh session, 1 token: 8192->28672 33.0-33.1 us against
	// 34.0-34.1, 4096->28672 18.6-18.7 against 19.5-19.6, 3584->18944 14.9
	// against 16.3). Without fp16 (x staged with each stage) two parts
	// stay faster: 13824->5120 17.5 against 19.1-19.3.
	if (ceilDiv(req.OutFeatures, 16*mt) > sms/ks || mt == 4) && u*group*bits/8%256 == 0 && (!cfg.FP16 || mt == 4) {
		cfg.Parts = 2
	}
	// The most stages that fit, a multiple of the consumer warps; fewer
	// warps when not even one round of stages fits.
	for cw := bulkWarps; cw >= 1; cw /= 2 {
		cfg.CW = cw
		for ns := cw; ns <= bulkMaxStages; ns += cw {
			trial := cfg
			trial.NS = ns
			if ns >= 2 && trial.sharedBytes(req.InFeatures) <= maxShared {
				cfg.NS = ns
			}
		}
		if cfg.NS > 0 {
			// Stages in one part (blocks that take one tile each,
			// stages that do not halve into 256-byte lines, or fp16
			// operands) of 16- and 32-row tiles: two warps share each,
			// each with half its groups.
			// Tenth session: 14336->4096 11.6-11.8 us against
			// 12.5-12.6, 4096x4096 5.2 against 5.5, 3584->18944 in
			// groups of 32 15.5 against 17.1; 18944->3584 19.5 against
			// 19.3; with two parts, slower; 64-row tiles not measured.
			if cfg.Parts == 1 && mt < 4 && cfg.CW%2 == 0 {
				cfg.WK = 2
			}
			return cfg, ""
		}
	}
	return BulkConfig{}, fmt.Sprintf("no ring of stages fits %d bytes of shared memory", maxShared)
}

// bulkTileRows is the rows of a tile for out output features on g
// multiprocessors. It counts the 16-row m-tiles the busiest block takes
// over all its waves: 64-row tiles when wide allows them and they make it
// no more than 16-row ones do (4 bits and groups of at most 64 only, whose
// 256-byte row pieces can keep eight warps' stages in shared memory), else
// 32-row tiles on the same test, else 16 (bench/NOTES.md, ninth session:
// 28672->8192 35.1-37.8 us in 64-row tiles against 38.4-40.3 in 32-row
// ones). With fp16 operands 32-row tiles may make it up to a third more:
// two m-tiles share each x load and the constants of the fold, and the
// kernel's consumer warps are what bound it (eleventh session, 1 token,
// 32-row tiles in one part against 16-row ones: 4096->14336 11.6 us
// against 13.4, 5120->13824 13.6 against 15.8, 8192->14336 19.7 against
// 24.5; 4096->6144 and 4096->5120 within 0.1 us).
func bulkTileRows(out, bits, group, g int, wide, fp16 bool) int {
	waves := func(rows int) int { return ceilDiv(ceilDiv(out, rows), g) * rows / 16 }
	switch {
	case wide && bits == 4 && group <= 64 && waves(64) <= waves(16):
		return 64
	case waves(32) <= waves(16), fp16 && 3*waves(32) <= 4*waves(16):
		return 32
	}
	return 16
}

// bulkStageGroups lists the groups per stage (U) the rule tries: fit
// holds want, the groups of segment-byte row pieces rounded down to a
// multiple of 8 (at least 8), when it divides the row's groups; above, the
// multiples of 8 above want, up to 64, that divide them, smallest first;
// below, half and a quarter of want where they are such multiples and
// divide them. U must be a multiple of 8 (the scales move in 16-byte
// pieces) of at most 64.
func bulkStageGroups(groups, groupBytes, segment int) (fit, above, below []int) {
	want := max(8, segment/groupBytes/8*8)
	if want <= 64 && groups%want == 0 {
		fit = []int{want}
	}
	for u := want + 8; u <= 64; u += 8 {
		if groups%u == 0 {
			above = append(above, u)
		}
	}
	for _, u := range []int{want / 2, want / 4} {
		if u >= 8 && u <= 64 && u%8 == 0 && groups%u == 0 {
			below = append(below, u)
		}
	}
	return fit, above, below
}

// sharedBytes is the launch's dynamic shared memory for in input features:
// the ring's stages on 1024-byte boundaries (with two buffers of scales and
// biases when a stage comes in parts), one accumulator per stage (a float
// per row and token of up to 8*ceil(XT/8) tokens, or at one token per row
// and consumer warp; none with K slices, whose warps add into the
// workspace), the counters and a pair of barriers per
// stage and part, the alignment slack, and with FP16 the resident x of a
// block's in/KS inputs and their per-group constants.
func (c BulkConfig) sharedBytes(in int) int {
	in /= max(c.KS, 1)
	tr := 16 * c.MT
	seg := c.U * c.Group * c.Bits / 8
	scaleBuffers := 1
	if c.Parts > 1 {
		scaleBuffers = 2
	}
	stage := tr*seg + scaleBuffers*4*tr*c.U
	resident := 0
	if c.FP16 {
		resident = c.XT*(2*in+16) + 16*(in/c.Group)*c.XT
		if c.DP2A {
			resident += in // x's int8 residuals (one token)
		}
	} else {
		stage += c.XT * (2*c.U*c.Group + 16)
	}
	stage = ceilDiv(stage, 1024) * 1024
	red := c.NS * 4 * 8 * ceilDiv(c.XT, 8) * tr
	if c.XT == 1 {
		red = c.NS * 4 * c.CW * tr // a slot per warp, added in warp order (DETRED)
	}
	if c.KS > 1 {
		red = 0
	}
	return c.NS*stage + red + ceilDiv(4*c.NS, 16)*16 + 16*c.NS*c.Parts + bulkSharedSlack + resident
}

// Defines are the kernel's -D macros.
func (c BulkConfig) Defines() map[string]int {
	d := map[string]int{"BITS": c.Bits, "GROUP": c.Group, "MT": c.MT, "CW": c.CW, "U": c.U, "NS": c.NS, "XT": c.XT}
	// The macros whose kernel default is the field's zero (or one) value
	// are left out then, so that those variants keep their cache keys.
	flag := func(on bool) int {
		if on {
			return 1
		}
		return 0
	}
	for _, m := range []struct {
		name       string
		value, off int
	}{
		{"FP16", flag(c.FP16), 0},
		{"PARTS", c.Parts, 1},
		{"WK", c.WK, 1},
		{"SPLITK", flag(c.KS > 1), 0},
		{"XHOLD", c.XHold, 0},
		{"DP2A", flag(c.DP2A), 0},
		{"UNR", c.Unroll, 0},
		{"XCB", c.XLoads, 0},
	} {
		if m.value > m.off {
			d[m.name] = m.value
		}
	}
	return d
}

// Launch is the grid (one resident block per SM at most; blocks walk the
// tiles; with K slices sms/KS blocks per slice, blockIdx.y the slice), the
// block (CW consumer warps and a producer warp per part) and the shared
// memory.
func (c BulkConfig) Launch(req sdk.Request, sms int) (grid, block [3]uint32, shared uint32) {
	tiles := ceilDiv(req.OutFeatures, 16*c.MT)
	ks := max(c.KS, 1)
	grid = [3]uint32{uint32(min(tiles, max(sms/ks, 1))), uint32(ks), 1}
	block = [3]uint32{uint32(32 * (c.CW + c.Parts)), 1, 1}
	return grid, block, uint32(c.sharedBytes(req.InFeatures))
}

// Describe names the variant for admission reasons and logs.
func (c BulkConfig) Describe() string {
	operands := "bf16"
	if c.FP16 {
		operands = "fp16"
	}
	extra := ""
	if c.KS > 1 {
		extra = fmt.Sprintf(", %d K slices", c.KS)
	}
	if c.XHold > 0 {
		extra += fmt.Sprintf(", x ahead of stage %d", c.XHold)
	}
	if c.DP2A {
		operands = "int16 x and dp2a"
	}
	if c.Unroll > 0 {
		extra += fmt.Sprintf(", %d groups unrolled", c.Unroll)
	}
	return fmt.Sprintf("bulk q%d g%d, %d-row tiles, %d consumer warps (%d per stage), %d stages of %d groups in %d part(s), %s operands%s",
		c.Bits, c.Group, 16*c.MT, c.CW, c.WK, c.NS, c.U, c.Parts, operands, extra)
}
