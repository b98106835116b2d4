package main

import (
	"context"
	_ "embed"
	"fmt"

	"github.com/kcand/kcand/internal/affinegpu"
	"github.com/kcand/kcand/sdk"
	"github.com/kcand/kcand/sdk/device"
	"github.com/kcand/kcand/sdk/errdefs"
	"github.com/kcand/kcand/sdk/family/affine"
	"github.com/kcand/kcand/sdk/gpukernel"
)

//go:embed kernels/wg.cu
var wgCode string

// wgSource is kernels/wg.cu, the Hopper (sm_90a) kernel for many tokens.
var wgSource = gpukernel.Source{Name: "wg.cu", Code: wgCode}

const (
	wgEntry = "affine_wg"
	// wgXPrepEntry writes the token scales and the fp16 copy of x.
	wgXPrepEntry = "affine_wg_xprep"
	// affine_wg_xprep runs wgXPrepWideThreads threads per block (not
	// wgXPrepThreads) at up to wgWidePrepTokens tokens and from
	// wgWidePrepMinIn to wgWidePrepMaxIn input features (chooseWG).
	wgXPrepWideThreads                                 = 256
	wgWidePrepTokens, wgWidePrepMinIn, wgWidePrepMaxIn = 256, 4096, 8192
	// wgReduceEntry writes y from the split-K sums' slices, added in order.
	wgReduceEntry = "affine_wg_reduce"
	// wgReduceThreads is affine_wg_reduce's block; wgReduceBlocks caps its
	// grid-stride grid.
	wgReduceThreads, wgReduceBlocks = 256, 1024
	// wgXPrepThreads and wgXPrepTokens are affine_wg_xprep's usual block
	// and the tokens each block stages (XPREP_THREADS, XPREP_TOKENS in
	// wg.cu).
	wgXPrepThreads, wgXPrepTokens = 128, 2
	// wgMaxInFeatures keeps affine_wg_xprep's rows of x within the 227 KiB
	// of shared memory a block may have (two tokens of bf16 each).
	wgMaxInFeatures = 57344
	// wgMinTokens: up to one token tile, qmm/wave and qmm/bulk are far
	// ahead. At 17-32 tokens the kernel's 64-token tiles beat qmm/stream at
	// some shapes and lose at others (bench/NOTES.md, twentieth session:
	// 4096->14336 28.8 us against 31.2-32.1, 8192->28672 101-103 against
	// 108-115; 14336->4096 37.7 against 27.0); qmm/wave's two token tiles
	// are faster still at most shapes there, and the host times all three.
	// (16- and 32-token tiles were timed at 9-32 tokens in the third
	// session and lost to qmm/stream.)
	wgMinTokens = waveTokenTile + 1
	// wgStreamKStagesPerSM: the tiles past whole waves of 256-token tiles,
	// unless they fill at least wgWholeTailThirds thirds of a wave, are
	// shared by one stream-K block per multiprocessor where they hold at
	// least this many weight stages (of 8 groups) per multiprocessor;
	// shorter tails keep split tiles (chooseWG).
	wgStreamKStagesPerSM = 4
	// wgWholeTailThirds: past whole waves of 256-token tiles, a last wave
	// at least this many thirds full runs whole, neither shared by
	// stream-K nor split (chooseWG).
	wgWholeTailThirds = 2
	// wgMaxSharedBytes is the dynamic shared memory a main-kernel block may
	// take: the 227 KiB a block may opt into, less 2 KiB kept for the
	// kernel's static arrays (the #error beside SMEM_BYTES in wg.cu).
	wgMaxSharedBytes = 232448 - 2048
	// wgMaxWorkspace bounds the workspace: the permuted copy of x the kernel
	// stages from, the token scales and, with a split K, the fp32 sums or,
	// with stream-K, the tile counters, the ticket and the partial sums.
	wgMaxWorkspace = 2 << 30
)

// qmmWGMMA is QMM's Hopper candidate: kernels/wg.cu, warp-specialised
// wgmma with the weights dequantised to fp16 in registers (one rounding per
// weight, 2^-11 relative) and x scaled per token by a power of two into
// fp16. It serves 2-, 3-, 4-, 5-, 6- and 8-bit weights in groups of 32,
// 64 and 128, in_features any multiple of 64 (gpt-oss's 2880 too), at 17
// or more tokens on compute capability 9.0; the host's tuner times it against the
// tiled kernel (and, up to 32 tokens, qmm/stream and qmm/wave) and keeps
// the fastest.
type qmmWGMMA struct{}

var _ sdk.Candidate = qmmWGMMA{}

// Info implements sdk.Candidate.
func (qmmWGMMA) Info() sdk.CandidateInfo {
	return sdk.CandidateInfo{
		Name:      "qmm/wgmma",
		Family:    sdk.FamilyAffine,
		Numeric:   sdk.NumericBounded,
		Stability: sdk.Stable,
		Devices:   []device.Kind{device.CUDA},
	}
}

// Admit implements sdk.Candidate.
func (qmmWGMMA) Admit(req sdk.Request, hw device.Profile) sdk.Admission {
	if why := wgAdmit(req, hw); why != "" {
		return sdk.Admission{Reason: why}
	}
	return sdk.Admission{Admitted: true, Reason: fmt.Sprintf("int%d g%d at %d tokens (≥ %d) on sm_90, %s", req.Weight.Bits, req.Weight.GroupSize, req.Tokens, wgMinTokens, chooseWG(req, hw.Multiprocessors).describe())}
}

// wgAdmit says why kernels/wg.cu does not serve req on hw ("" when it does).
func wgAdmit(req sdk.Request, hw device.Profile) string {
	if why := affinegpu.AdmitCUDA(req, hw); why != "" {
		return why
	}
	if hw.ComputeCapability != "9.0" {
		return fmt.Sprintf("needs compute capability 9.0 (wgmma and setmaxnreg are sm_90a instructions), the GPU has %s", hw.ComputeCapability)
	}
	if g := req.Weight.GroupSize; g != 32 && g != 64 && g != 128 {
		return fmt.Sprintf("unpacks weights in groups of 32, 64 or 128, not group_size=%d", g)
	}
	if req.InFeatures%64 != 0 {
		return fmt.Sprintf("in_features=%d is not a multiple of 64 (x is staged 64 inputs at a time)", req.InFeatures)
	}
	if req.InFeatures > wgMaxInFeatures {
		return fmt.Sprintf("in_features=%d is over %d (two rows of x are staged in shared memory)", req.InFeatures, wgMaxInFeatures)
	}
	if req.Tokens < wgMinTokens {
		return fmt.Sprintf("serves %d or more tokens, not %d", wgMinTokens, req.Tokens)
	}
	if ws := chooseWG(req, hw.Multiprocessors).workspaceBytes(req); ws > wgMaxWorkspace {
		return fmt.Sprintf("its copy of x would need %d bytes of workspace (limit %d)", ws, int64(wgMaxWorkspace))
	}
	return ""
}

// Prepare implements sdk.Candidate.
func (qmmWGMMA) Prepare(_ context.Context, env sdk.Env, req sdk.Request, weights sdk.Buffers) (sdk.Prepared, error) {
	if err := affine.Validate(req); err != nil {
		return nil, err
	}
	if why := wgAdmit(req, env.Device.Profile()); why != "" {
		return nil, errdefs.Unsupported("qmm/wgmma: %s", why)
	}
	dev, err := affinegpu.CUDA(env)
	if err != nil {
		return nil, err
	}
	cfg := chooseWG(req, dev.Profile().Multiprocessors)
	main, err := kernels.Get(dev, wgSource, cfg.variant())
	if err != nil {
		return nil, err
	}
	l := cfg.launches(req)
	prep, err := main.Sibling(wgXPrepEntry)
	if err != nil {
		return nil, err
	}
	steps := []gpukernel.Step{{Kernel: prep, Launch: l.prep}, {Kernel: main, Launch: l.main}}
	if l.reduce != nil {
		reduce, err := main.Sibling(wgReduceEntry)
		if err != nil {
			return nil, err
		}
		steps = append(steps, gpukernel.Step{Kernel: reduce, Launch: *l.reduce})
	}
	p, err := affinegpu.NewPreparedSteps(req, weights, steps, cfg.workspaceBytes(req))
	if err != nil {
		return nil, err
	}
	env.Logger.Debug("prepared", "request", req.Key(), "variant", cfg.describe(), "kernel", p.Describe(), "nvrtc_cache_hit", main.CacheHit)
	return p, nil
}

// wgConfig is one variant of kernels/wg.cu (its -D macros) and the launch
// raster. It mirrors wg_config in scripts/affine_kernels.py, where the
// variants were timed (bench/NOTES.md). A "group" here, as in wg.cu, is
// 64 inputs, the unit of x's stages; the weights' quantisation group is
// Group.
type wgConfig struct {
	BN     int // tokens per block
	Stages int // x ring slots (one group each)
	WGS    int // consumer warpgroups, 64 weight rows each
	AST    int // weight ring slots (wgStageRow's groups each: 8, or 4 at 5, 6 and 8 bits)
	FSets  int // A fragment sets: groups in flight while the next is dequantised
	Band   int // row blocks per raster band
	Splits int // blocks sharing a split tile along K (a launch setting; with Cluster also the CLUSTER macro)
	Full   int // leading tiles computed whole before the split or stream-K ones (a launch setting)
	// Cluster makes a split tile's Splits blocks one thread-block cluster
	// that adds its shares in shared memory (the CLUSTER macro): no fp32
	// sums in the workspace and no reduce launch.
	Cluster bool
	// Bits is the weights' width (the BITS macro): 8-bit stages hold 4
	// groups of each row instead of 8, the same 256 bytes, copied by two
	// warps instead of three (AW); 2, 3, 5 and 6 bits take the kernel's
	// general unpacking (wgStageRow gives their stages).
	Bits int
	// Group is the weights' quantisation group, 32, 64 or 128 inputs (the
	// QGROUP macro; 0 is the kernel's default, 64): a weight stage holds
	// its row's scales and biases of the stage's inputs.
	Group int
	// XPrepThreads is affine_wg_xprep's block, wgXPrepThreads or
	// wgXPrepWideThreads (the XPREP_THREADS macro; chooseWG sets it).
	XPrepThreads int
	// OddK marks in_features that are not a multiple of 2·max(64, Group),
	// as gpt-oss's 2880 (the ODDK macro): rows whose scales start at an
	// odd entry, a last weight stage of an odd number of groups, 3- and
	// 5-bit rows that are not whole 16-byte pieces. The kernel then copies
	// each row's scales and biases as a window of 8- or 4-byte pieces
	// (wgScaleWindow entries more a stage row) and 3- and 5-bit weights in
	// 8-byte pieces.
	OddK bool
	// StreamK, when above 0, is the number of stream-K blocks that share
	// the tiles after the first Full (the STREAMK macro and the kernel's
	// sk argument): one run of their weight stages each, at most part of
	// two tiles, partial sums through the workspace, no reduce launch.
	// Splits is then 1.
	StreamK int
}

// The variants QMM's Hopper candidate runs: 256-token tiles (the most
// work per dequantised weight), and 128- and 64-token ones for fewer
// tokens or grids that would otherwise leave multiprocessors idle.
// 256-token tiles hold 128 accumulators per thread, which leaves registers
// for two fragment sets only.
var (
	wgWide   = wgConfig{BN: 256, Stages: 3, WGS: 2, AST: 3, FSets: 2, Band: 16, Splits: 1}
	wgMid    = wgConfig{BN: 128, Stages: 6, WGS: 2, AST: 3, FSets: 3, Band: 16, Splits: 1}
	wgNarrow = wgConfig{BN: 64, Stages: 6, WGS: 2, AST: 3, FSets: 3, Band: 16, Splits: 1}
)

// The same token tiles in pairs, for grids that four K shares of the
// tiles above would leave within one wave: 64-row tiles (one consumer
// warpgroup, so twice the tiles) in two K shares that one cluster adds in
// shared memory: as many blocks, and no sums through memory. At 256
// tokens the x ring takes the shared memory the weights no longer need.
var (
	wgWidePairs   = wgConfig{BN: 256, Stages: 4, WGS: 1, AST: 3, FSets: 2, Band: 16, Splits: 2, Cluster: true}
	wgMidPairs    = wgConfig{BN: 128, Stages: 6, WGS: 1, AST: 3, FSets: 3, Band: 16, Splits: 2, Cluster: true}
	wgNarrowPairs = wgConfig{BN: 64, Stages: 6, WGS: 1, AST: 3, FSets: 3, Band: 16, Splits: 2, Cluster: true}
)

// chooseWG picks the token tile first: 256 tokens above 128 tokens, else
// 128 above 64, else 64. When four K shares of that tile's blocks would
// fit one wave (each of the pairs' two shares at least 16 groups), it
// runs the tile in pairs
// (wgWidePairs and the others above): at 256 tokens 4096² took
// 23.0–23.3 µs against 28.4–29.6 for 32 blocks × 4 shares, 14336→4096
// within 1 %; at 64 and 128 tokens the pairs took 4096² from 28.8–29.4 µs
// (one block per tile) to 17.1–19.2, 14336→4096 from 88–93 to 39–44, and
// 8192→4096 from 53–54 to 26–29. At 45 and 46 groups (gpt-oss's 2880
// inputs, and 2944) the pairs beat two-share clusters of 128-row tiles:
// 2880² 17.4 against 27.4 µs at 256 tokens and 12.2 against 16.6 at 64,
// 2880→4096 17.9 against 28.0 and 12.7 against 16.4 (bench/NOTES.md,
// thirty-third session; the pairs had asked 64 groups before).
// Else, when two K shares of the tile's blocks fit one wave (each share
// at least 16 groups), it splits K in 2 with each tile's two blocks a
// cluster (28672→8192 at 64 tokens 100.7 µs against 173.2 for
// one block per tile, at 128 tokens 130.5 against 190.5 for 64-token
// tiles; at 256 tokens the same as the shares' sums through memory,
// 197–207 µs either way, with one launch fewer). Otherwise, above 128 tokens, 256-token tiles
// (4096→14336: 112 blocks, unsplit); when a single token tile's row
// blocks overrun whole waves, the whole waves stay unsplit. A last
// partial wave at least wgWholeTailThirds thirds full runs whole too
// (8192→28672 and 4096→28672, 92 tiles after a wave of 132: whole tiles
// faster than the stream-K tail below in all 33 same-call pairs at
// 136–256 tokens, by 2.6–35 µs; the twenty-eighth session's pairs were
// mixed. Last waves of 76, 80 and 88 at 256 tokens: whole ahead in 9 of 12
// pairs, stream-K's times the more scattered. A last wave of 68, about
// half full: whole 0.4–3.4 µs faster at 4096→25600, stream-K 2–9 µs faster
// at 8192→25600 at 256 tokens, 13–14 µs at 8 bits; bench/NOTES.md,
// twenty-ninth session).
// The tiles of a less full last wave are shared, so that they finish
// sooner. Where
// those tiles hold at least wgStreamKStagesPerSM weight stages per
// multiprocessor, one stream-K block per multiprocessor takes an even run
// of their stages (8192→25600 at 256 tokens: 132 whole tiles, then 68
// shared by 132 blocks; it beat split tails at 8192→28672 and 4096→28672,
// same call, two rounds, µs: 177.8–198.9 against 196.9–211.7 at 256 tokens, 170.2–188.1
// against 192.8–198.4 at 200, 170.9–174.6 against 176.1–182.6 at 136;
// 4096→28672 103.4–106.9 against 118.9–123.5, 99.1–100.3 against
// 110.0–111.7 and 92.6–93.0 against 102.2–102.6; bench/NOTES.md,
// sixteenth session). Shorter tails are split in 2, 3 or 4 (4096→18944 at
// 256 tokens: 132 whole tiles, then 16 tiles × 4 shares, 1.25 tile times
// instead of 2, measured 112.9 → 78.9 µs).
// From 65 to 128 tokens, unsplit, it picks 128-token tiles when those give
// more than one block per two multiprocessors, else 64-token tiles.
// "Fits one wave" counts multiprocessors, not resident clusters: on the
// H200 two-block clusters of up to 222 KB blocks all fit (the pairs and
// two-share clusters time as one wave there); on parts whose GPCs have an
// odd number of free SMs, fewer may.
// This is the H200 measurement in bench/NOTES.md, mirrored by wg_choose in
// scripts/affine_kernels.py.
// x is prepared by 256-thread xprep blocks at up to 256 tokens and 4096
// to 8192 input features, else by 128-thread ones. Same-call A/B
// (bench/NOTES.md, fifteenth session), µs: 4096² 14.8 against 15.2–15.3
// (64 tokens), 16.7–16.8 against 17.3–17.5 (128) and 20.7–21.0 against
// 21.1–21.7 (256) for the two-kernel preparation (xmax, xconv) it
// replaced, which had itself beaten 128-thread xprep there by 1.5–2 µs;
// even at 4096→14336 and 8192→28672 (256 tokens). At 8 bits 4096² 23.5–24.5
// against 26.7 (256 tokens) and 18.6–18.7 against 19.5 (128), but 8192→4096
// 43.5–46.3 against 43.3 (256) and 33.0–33.1 against 32.1 (128). Outside
// the range, 256 threads were even at 14336 and 28672 inputs (256 tokens,
// fourteenth session) and are not timed at 4096 tokens.
func chooseWG(req sdk.Request, sms int) wgConfig {
	c := chooseWGTile(req, sms)
	c.Bits = req.Weight.Bits
	if c.Bits != 4 && c.Bits != 8 {
		// The other widths' weight stages hold 128-192 bytes of each row,
		// not 256: one more stage in the ring keeps about as many bytes in
		// flight (4 against 3 with 256-token tiles at 8192→28672 and
		// 28672→8192: faster in 15 of 16 same-call pairs at 5 and 6 bits,
		// by up to 13 %, and in 8 of 8 at 2 and 3 bits; within ±3.5 % at
		// the 33 MB shapes' 4096 tokens; bench/NOTES.md, thirty-second
		// session).
		c.AST++
	}
	// Groups of 32 take twice the scales of 64: where the ring would then
	// outgrow a block's shared memory (4 and 8 bits, and 3 bits, with
	// 128- and 256-token tiles of two consumer warpgroups), it keeps one
	// weight stage fewer (never fewer than the kernel's 2).
	c.Group = req.Weight.GroupSize
	c.OddK = req.InFeatures%(2*max(64, c.Group)) != 0
	for c.AST > 2 && c.sharedBytes() > wgMaxSharedBytes {
		c.AST--
	}
	c.XPrepThreads = wgXPrepThreads
	if req.Tokens <= wgWidePrepTokens && req.InFeatures >= wgWidePrepMinIn && req.InFeatures <= wgWidePrepMaxIn {
		c.XPrepThreads = wgXPrepWideThreads
	}
	return c
}

// chooseWGTile is chooseWG's tiles and shares, the same at every width.
func chooseWGTile(req sdk.Request, sms int) wgConfig {
	sms = max(sms, 1) // a profile without a multiprocessor count: plan for one
	blocks := func(c wgConfig) int { return ceilDiv(req.OutFeatures, 64*c.WGS) * ceilDiv(req.Tokens, c.BN) }
	groups := req.InFeatures / 64
	tile, pairs := wgNarrow, wgNarrowPairs
	switch {
	case req.Tokens > wgMid.BN:
		tile, pairs = wgWide, wgWidePairs
	case req.Tokens > wgNarrow.BN:
		tile, pairs = wgMid, wgMidPairs
	}
	if blocks(tile)*4 <= sms && groups >= 16*2 {
		return pairs
	}
	if blocks(tile)*2 <= sms && groups >= 16*2 {
		tile.Splits, tile.Cluster = 2, true
		return tile
	}
	switch {
	case req.Tokens > wgMid.BN:
		c := wgWide
		tiles := blocks(c)
		if tiles <= sms {
			return c
		}
		rest := tiles % sms
		if 3*rest >= wgWholeTailThirds*sms {
			return c // a last wave at least two thirds full: whole tiles
		}
		if stages := ceilDiv(groups, 8); rest > 0 && req.Tokens <= c.BN && rest*stages >= wgStreamKStagesPerSM*sms {
			c.Full, c.StreamK = tiles-rest, sms
			return c
		}
		if rest > 0 && req.Tokens <= c.BN {
			// The tail's makespan in tile times is ceil(rest*s/sms)/s;
			// take the s that makes it shortest (the smaller s on a tie).
			bestRounds, bestS := 1, 1
			for _, s := range []int{2, 3, 4} {
				if rounds := ceilDiv(rest*s, sms); groups >= 16*s && rounds*bestS < bestRounds*s {
					bestRounds, bestS = rounds, s
				}
			}
			if bestS > 1 {
				c.Splits, c.Full = bestS, tiles-rest
			}
		}
		return c
	case req.Tokens > wgNarrow.BN && 2*blocks(wgMid) > sms:
		return wgMid
	}
	return wgNarrow
}

// variant is the kernel variant to compile: sm_90a, entry and macros.
func (c wgConfig) variant() gpukernel.Variant {
	defines := map[string]int{"BN": c.BN, "STAGES": c.Stages, "WGS": c.WGS, "AST": c.AST, "FSETS": c.FSets}
	if c.Cluster {
		defines["CLUSTER"] = c.Splits
	}
	if c.Group != 0 && c.Group != 64 {
		defines["QGROUP"] = c.Group
	}
	switch c.Bits {
	case 0, 4: // the kernel's default width
	case 8:
		// Two weight-copying warps, not three: at 8 bits they fed the
		// consumers faster in 5 of 6 timed cells, by up to 1.6×
		// (bench/NOTES.md, thirteenth session).
		defines["BITS"], defines["AW"] = 8, 2
	default:
		defines["BITS"] = c.Bits
	}
	if t := c.xprepThreads(); t != wgXPrepThreads {
		defines["XPREP_THREADS"] = t
	}
	if c.StreamK > 0 {
		defines["STREAMK"] = 1
	}
	if c.OddK {
		defines["ODDK"] = 1
	}
	return gpukernel.Variant{Entry: wgEntry, ArchSpecific: true, Defines: defines}
}

// xprepThreads is affine_wg_xprep's block: XPrepThreads, or the kernel's
// default where it is unset.
func (c wgConfig) xprepThreads() int {
	if c.XPrepThreads == 0 {
		return wgXPrepThreads
	}
	return c.XPrepThreads
}

// stageBytes is one group of x for a token tile: four k16 steps of the B
// operand in fp16.
func (c wgConfig) stageBytes() int { return 4 * c.BN * 32 }

// sharedBytes is the main kernel's dynamic shared memory (SMEM_BYTES in
// wg.cu): the x ring and the weight ring (wgStageRow's rows, then the
// rows' scales and biases of the stage's inputs, one each per quantisation
// group, and with OddK a window's wgScaleWindow more), or, where larger,
// what the epilogue lays over
// them: the fp32 output tile and, in a cluster, the shares that arrive and
// the outgoing one (larger only at 2 and 3 bits, whose stages are small).
func (c wgConfig) sharedBytes() int {
	groups, row := wgStageRow(c.Bits)
	scales := groups // SG in wg.cu: one per group of 64 inputs, two per 32, one per 128
	switch c.Group {
	case 32:
		scales = 2 * groups
	case 128:
		scales = groups / 2
	}
	if c.OddK {
		scales += wgScaleWindow(scales)
	}
	rows := 64 * c.WGS
	n := max(c.Stages*c.stageBytes()+c.AST*rows*(row+4*scales), c.BN*(rows+4)*4)
	if c.Cluster {
		n = max(n, (c.Splits+1)*c.BN*(rows/c.Splits+4)*4)
	}
	return n
}

// wgScaleWindow is the entries of a scale copy with OddK (SCP in wg.cu),
// 4 (8 bytes) where they divide a stage row's scales, else 2: a row's
// window of them starts up to one copy early, so the stage keeps that many
// entries more a row.
func wgScaleWindow(scales int) int {
	if scales%4 == 0 {
		return 4
	}
	return 2
}

// wgStageRow is a weight stage's groups and a row's padded bytes at bits
// (AG and AROW_BYTES in wg.cu): 8 groups of 4 bits (256 bytes, padded to
// 288), 4 of 8 bits (256, padded to 320); at the other widths 8 groups of
// 2 or 3 bits and 4 of 5 or 6 bits, padded by 16 bytes. Bits 0 is the
// kernel's default, 4.
func wgStageRow(bits int) (groups, rowBytes int) {
	switch bits {
	case 0, 4:
		return 8, 8*32 + 32
	case 8:
		return 4, 4*64 + 64
	case 2, 3:
		return 8, 8*8*bits + 16
	default: // 5, 6
		return 4, 4*8*bits + 16
	}
}

func (c wgConfig) tiles(req sdk.Request) int { return ceilDiv(req.Tokens, c.BN) }

// workspaceBytes is the permuted copy of x, one stage per token tile and
// group, then one float scale (sigma) per token of the padded tiles, then
// with a split K outside a cluster the fp32 sums of the split rows in
// sumSlices slices, or with stream-K
// the tile counters, the ticket that numbers the stream-K blocks, and the
// blocks' partial sums.
func (c wgConfig) workspaceBytes(req sdk.Request) int64 {
	tiles := int64(c.tiles(req))
	n := tiles*int64(req.InFeatures/64)*int64(c.stageBytes()) + tiles*int64(c.BN)*4
	if c.sumsInMemory() {
		n += int64(c.sumSlices()) * int64(req.Tokens) * int64(req.OutFeatures-c.rowFirst()) * 4
	}
	if c.StreamK > 0 {
		// a counter per shared tile and the blocks' ticket, rounded up to
		// 16 bytes, then a partial of BN/2 floats per consumer thread per
		// stream-K block
		n += int64(ceilDiv(c.sharedTiles(req)+1, 4))*16 + int64(c.StreamK)*int64(c.BN/2)*int64(128*c.WGS)*4
	}
	return n
}

// sharedTiles are the tiles after the first Full: split, or shared by the
// stream-K blocks.
func (c wgConfig) sharedTiles(req sdk.Request) int {
	return c.tiles(req)*ceilDiv(req.OutFeatures, 64*c.WGS) - c.Full
}

// sumsInMemory says whether split tiles add their shares into fp32 sums
// in the workspace, which the preparation clears and the reduce kernel writes out
// (a cluster adds them in shared memory instead).
func (c wgConfig) sumsInMemory() bool { return c.Splits > 1 && !c.Cluster }

// sumSlices is the slices of the split-K sums: shares 2j and 2j+1 add
// into slice j (the last of an odd number stores its slice alone), and the
// reduce kernel adds the slices in order. Two float additions onto zero
// give the same bits in either order, so a call's result does not depend
// on which share finished first; with three or four shares adding into
// one sum it did (wg.cu; bench/NOTES.md, twenty-eighth session: 18-29 of
// 5.6 M outputs differed from run to run at 256 tokens, 4096->22016).
func (c wgConfig) sumSlices() int { return ceilDiv(c.Splits, 2) }

// rowFirst is the first output row whose tiles are split: the split-K sums
// and their reduction start there.
func (c wgConfig) rowFirst() int { return c.Full * 64 * c.WGS }

// mainBlocks is the main kernel's grid: one block per whole tile, then
// Splits per split one or the StreamK blocks.
func (c wgConfig) mainBlocks(req sdk.Request) int {
	if c.StreamK > 0 {
		return c.Full + c.StreamK
	}
	return c.Full + c.sharedTiles(req)*c.Splits
}

// wgLaunches are the launches of one call, in stream order.
type wgLaunches struct {
	// prep (affine_wg_xprep): each token's power-of-two scale, x / scale
	// in fp16 in the B layout, cleared sums (the slices of pairs of shares)
	prep   gpukernel.Launch
	main   gpukernel.Launch  // the product
	reduce *gpukernel.Launch // with sums in memory: y from them
}

// launches are the preparation, main and (split K outside a cluster)
// reduce kernels' launches for req.
func (c wgConfig) launches(req sdk.Request) wgLaunches {
	tiles := c.tiles(req)
	bias := gpukernel.NullPointer
	if req.Bias {
		bias = sdk.BufferParam(affine.Bias)
	}
	ws := sdk.BufferParam(sdk.BufferWorkspace)
	tok, in, out := sdk.Int32Param(int32(req.Tokens)), sdk.Int32Param(int32(req.InFeatures)), sdk.Int32Param(int32(req.OutFeatures))
	splits, rowFirst := sdk.Int32Param(int32(c.Splits)), sdk.Int32Param(int32(c.rowFirst()))
	clearSums := sdk.Int32Param(1) // xprep clears the sums when its splits argument is above 1
	if c.sumsInMemory() {
		clearSums = splits
	}
	counters := sdk.Int32Param(0) // and stream-K's tile counters and ticket
	if c.StreamK > 0 {
		counters = sdk.Int32Param(int32(c.sharedTiles(req) + 1))
	}
	var l wgLaunches
	l.prep = gpukernel.Launch{
		Grid: [3]uint32{uint32(tiles * c.BN / wgXPrepTokens), 1, 1}, Block: [3]uint32{uint32(c.xprepThreads()), 1, 1},
		SharedBytes: uint32(wgXPrepTokens * 2 * req.InFeatures),
		Params:      []sdk.Param{sdk.BufferParam(affine.X), ws, tok, in, out, clearSums, rowFirst, counters},
	}
	// The main kernel and the reduction start early (programmatic
	// dependent launch): the main kernel's weight copies and set-up
	// overlap the end of the preparation (but for stream-K blocks, which
	// wait for it to take their ticket), and each waits for the kernel
	// ahead of it before it reads the workspace (wg.cu, kc_grid_wait).
	l.main = gpukernel.Launch{
		Grid: [3]uint32{uint32(c.mainBlocks(req)), 1, 1}, Block: [3]uint32{uint32(128*c.WGS + 128), 1, 1},
		SharedBytes: uint32(c.sharedBytes()), Programmatic: true,
		Params: []sdk.Param{ws, sdk.BufferParam(affine.Weight), sdk.BufferParam(affine.Scales), sdk.BufferParam(affine.Biases),
			bias, sdk.BufferParam(affine.Y), tok, in, out, sdk.Int32Param(int32(c.Band)), splits, sdk.Int32Param(int32(c.Full)),
			sdk.Int32Param(int32(c.StreamK))},
	}
	if c.sumsInMemory() {
		chunks := req.Tokens * ((req.OutFeatures - c.rowFirst()) / 8)
		l.reduce = &gpukernel.Launch{
			Grid: [3]uint32{uint32(min(ceilDiv(chunks, wgReduceThreads), wgReduceBlocks)), 1, 1}, Block: [3]uint32{wgReduceThreads, 1, 1},
			Programmatic: true,
			Params:       []sdk.Param{ws, bias, sdk.BufferParam(affine.Y), tok, in, out, splits, rowFirst},
		}
	}
	return l
}

// describe names the variant for logs and admission reasons.
func (c wgConfig) describe() string {
	cluster := ""
	if c.Cluster {
		cluster = " in clusters"
	}
	streamK := ""
	if c.StreamK > 0 {
		streamK = fmt.Sprintf(" streamk=%d", c.StreamK)
	}
	oddK := ""
	if c.OddK {
		oddK = " oddk"
	}
	return fmt.Sprintf("wgmma BITS=%d BN=%d STAGES=%d WGS=%d AST=%d FSETS=%d band=%d splits=%d%s full=%d%s xprep=%d%s", c.Bits, c.BN, c.Stages, c.WGS, c.AST, c.FSets, c.Band, c.Splits, cluster, c.Full, streamK, c.xprepThreads(), oddK)
}
