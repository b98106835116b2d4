package main

import (
	"context"
	_ "embed"
	"fmt"

	"github.com/kcand/kcand/cuda"
	"github.com/kcand/kcand/internal/affinegpu"
	"github.com/kcand/kcand/sdk"
	"github.com/kcand/kcand/sdk/device"
	"github.com/kcand/kcand/sdk/errdefs"
	"github.com/kcand/kcand/sdk/family/affine"
	"github.com/kcand/kcand/sdk/gpukernel"
)

//go:embed kernels/wave.cu
var waveCode string

// waveSource is kernels/wave.cu, qmm/wave's kernel (see its header).
var waveSource = gpukernel.Source{Name: "wave.cu", Code: waveCode}

const (
	waveEntry      = "affine_wave"
	waveXPrepEntry = "affine_wave_xprep" // x / sigma in fragment order, one block per line and token tile
	// waveXPrepThreads is affine_wave_xprep's block.
	waveXPrepThreads = 256
	// waveMinTokens and waveMaxTokens are the tokens it serves: above
	// decode, and at most two token tiles.
	waveMinTokens, waveMaxTokens = affinegpu.BulkSplitTokens + 1, 2 * waveTokenTile
	// waveTokenTile is the tokens of one mma's rows: above it the kernel
	// runs two token tiles (TT 2), each unpacked weight meeting two mma
	// (bench/NOTES.md, twentieth session: 8192->28672 at 32 tokens 67.1 us
	// against qmm/wgmma's 102.0, 28672->8192 63.5 against qmm/stream's 96.9).
	waveTokenTile = 16
	// waveLine is the inputs of one line (one 128-byte box of packed
	// weights a row); the kernel streams lines in pairs (a pair's 8 groups
	// of scales are one 16-byte box a row), so in_features is a multiple
	// of 2*waveLine.
	waveLine = 256
	// waveXTileBytes is one token tile of a line of prepared x
	// (XTILE_BYTES in wave.cu): 16 mma steps of A fragments, the group
	// sums' fragments, 16 scales. A line holds TT of them.
	waveXTileBytes = 17*512 + 64
	// waveMaxRows is the most rows a block takes (a tensor-map box's
	// limit); waveMinRows the fewest: below, a block's x stream outweighs
	// its weights (32-row blocks at 4096 outputs lost to qmm/bulk and
	// qmm/stream at 16 tokens, bench/NOTES.md, seventeenth session), so
	// there the rows of several blocks go to a cluster that splits the
	// lines.
	waveMaxRows, waveMinRows = 256, 64
	// wavePairMinLines is the fewest lines a block of a cluster of two
	// must keep for chooseWave to give blocks of waveMinRows rows twice the
	// rows in such clusters: each block then streams half as much x per
	// weight byte, which pays where the product is held back by the power
	// cap (28672->8192 at 16 tokens, 56 lines a block: 46.5-47.0 us against
	// 48.4-49.1) and costs where the blocks have few lines (40 at 20480
	// inputs: 36.3 against 35.5-35.7; 28 at 14336: 28.1 against 26.7-27.0;
	// bench/NOTES.md, nineteenth session).
	wavePairMinLines = 56
	// waveWarps is the consumer warps of a block; waveMaxLineSlots caps
	// its ring of lines.
	waveWarps, waveMaxLineSlots = 8, 16
	// waveMaxTiles is the most n-tiles a consumer warp takes with one
	// token tile; waveMaxTilesTwo with two, whose sums need twice the
	// registers. With nine warps a block, three share a scheduler, so
	// ptxas caps a thread at 168 registers: at two token tiles 5 n-tiles
	// took 155, 6 spilled 8 bytes and 7 spilled 320. Twice the row groups
	// of at most 5 n-tiles were as fast or faster wherever measured
	// (bench/NOTES.md, twenty-first session, 32 tokens: 8192->28672 63.0
	// us against 65.5, 4096->22016 29.3 against 30.3).
	waveMaxTiles, waveMaxTilesTwo = 8, 5
	// waveMaxCluster is the most blocks of a thread-block cluster that
	// share a block's rows, each over a part of the lines (a portable
	// cluster size).
	waveMaxCluster = 8
	// waveMaxShared is the shared memory a block may take: the H200's
	// 227 KiB less room for an affine_wave_xprep block (8.5 KiB) beside it.
	waveMaxShared = 217 << 10
)

// qmmWave is QMM's small-batch candidate on Hopper: kernels/wave.cu. Each
// block takes about a wave's share of the output rows and all of the
// inputs, streaming lines of weights with tensor copies; mma.sync with the
// tokens as M and the weights dequantised to fp16 (s*q, one rounding) in
// registers, x scaled per token and line by a power of two into fp16. It
// serves 9 to 32 tokens (one or two token tiles of 16) of 4-bit weights in
// groups of 64 where a block holds at least waveMinRows rows (with
// clusters that split the inputs where the outputs are few, or where the
// inputs are long enough to halve each block's x per weight byte); the
// host times it against qmm/bulk, qmm/stream and, above 16 tokens,
// qmm/wgmma.
type qmmWave struct{}

var _ sdk.Candidate = qmmWave{}

// Info implements sdk.Candidate.
func (qmmWave) Info() sdk.CandidateInfo {
	return sdk.CandidateInfo{
		Name:      "qmm/wave",
		Family:    sdk.FamilyAffine,
		Numeric:   sdk.NumericBounded,
		Stability: sdk.Stable,
		Devices:   []device.Kind{device.CUDA},
	}
}

// Admit implements sdk.Candidate.
func (qmmWave) Admit(req sdk.Request, hw device.Profile) sdk.Admission {
	cfg, why := waveAdmit(req, hw)
	if why != "" {
		return sdk.Admission{Reason: why}
	}
	return sdk.Admission{Admitted: true, Reason: fmt.Sprintf("small batch (%d ≤ tokens=%d ≤ %d) of int4 g64 on sm_90, %s",
		waveMinTokens, req.Tokens, waveMaxTokens, cfg.describe())}
}

// waveAdmit picks the variant for req on hw, or says why kernels/wave.cu
// does not serve it.
func waveAdmit(req sdk.Request, hw device.Profile) (waveConfig, string) {
	if why := affinegpu.AdmitCUDA(req, hw); why != "" {
		return waveConfig{}, why
	}
	if major := affinegpu.ComputeMajor(hw.ComputeCapability); major < 9 {
		return waveConfig{}, fmt.Sprintf("tensor copies need compute capability 9.0 or newer, the GPU has %s", hw.ComputeCapability)
	}
	if req.Tokens < waveMinTokens || req.Tokens > waveMaxTokens {
		return waveConfig{}, fmt.Sprintf("serves %d to %d tokens (two tiles of one mma's 16 rows), not %d", waveMinTokens, waveMaxTokens, req.Tokens)
	}
	if req.Weight.Bits != 4 || req.Weight.GroupSize != 64 {
		return waveConfig{}, fmt.Sprintf("unpacks 4-bit weights in groups of 64, not bits=%d group_size=%d", req.Weight.Bits, req.Weight.GroupSize)
	}
	if req.InFeatures%(2*waveLine) != 0 {
		return waveConfig{}, fmt.Sprintf("in_features=%d is not a multiple of %d (lines of %d inputs, streamed in pairs)", req.InFeatures, 2*waveLine, waveLine)
	}
	maxShared := waveMaxShared
	if l := hw.Limits.MaxSharedPerBlock; l > 0 {
		maxShared = min(maxShared, l)
	}
	cfg, ok := chooseWave(req, hw.Multiprocessors, maxShared)
	if !ok {
		return waveConfig{}, fmt.Sprintf("%d lines of %d rows (one per K warp) do not fit %d bytes of shared memory", max(2, cfg.WK), cfg.rows(), maxShared)
	}
	if cfg.rows() < waveMinRows {
		return waveConfig{}, fmt.Sprintf("out_features=%d gives blocks of %d rows on %d multiprocessors, fewer than %d (their x would outweigh their weights), and in_features=%d does not split into the pairs of lines of a cluster of %d blocks",
			req.OutFeatures, cfg.rows(), hw.Multiprocessors, waveMinRows, req.InFeatures, waveMaxCluster)
	}
	return cfg, ""
}

// Prepare implements sdk.Candidate.
func (qmmWave) Prepare(_ context.Context, env sdk.Env, req sdk.Request, weights sdk.Buffers) (sdk.Prepared, error) {
	if err := affine.Validate(req); err != nil {
		return nil, err
	}
	cfg, why := waveAdmit(req, env.Device.Profile())
	if why != "" {
		return nil, errdefs.Unsupported("qmm/wave: %s", why)
	}
	dev, err := affinegpu.CUDA(env)
	if err != nil {
		return nil, err
	}
	product, err := kernels.Get(dev, waveSource, cfg.variant())
	if err != nil {
		return nil, err
	}
	prep, err := product.Sibling(waveXPrepEntry)
	if err != nil {
		return nil, err
	}
	l := cfg.launches(req)
	p, err := affinegpu.NewPreparedSteps(req, weights,
		[]gpukernel.Step{{Kernel: prep, Launch: l.prep}, {Kernel: product, Launch: l.main}}, cfg.workspaceBytes(req))
	if err != nil {
		return nil, err
	}
	env.Logger.Debug("prepared", "request", req.Key(), "kernel", p.Describe(), "variant", cfg.describe(), "nvrtc_cache_hit", product.CacheHit)
	return p, nil
}

// waveConfig is one variant of kernels/wave.cu (its macros).
type waveConfig struct {
	NT  int // n-tiles (8 rows) per consumer warp
	WR  int // row groups of consumer warps
	WK  int // consumer warps per row group, each taking every WK-th line
	NS  int // line slots in the ring
	NSB int // scale and bias slots, each serving two lines
	KS  int // blocks of a cluster sharing rows, each over 1/KS of the lines (1: no cluster)
	TT  int // token tiles of waveTokenTile (1, or 2 above waveTokenTile tokens)
}

// chooseWave picks the variant for req on a GPU with sms multiprocessors
// and maxShared bytes of shared memory per block:
//   - n-tiles of 8 rows per block: out/(8 sms) rounded up (about one wave
//     of blocks), at most waveMaxRows/8; where that gives fewer than
//     waveMinRows rows, a cluster of KS blocks (2, 4 or 8, while the inputs
//     split into whole pairs of lines per block) takes the rows of KS
//     blocks and each block a part of the lines; where it gives exactly
//     waveMinRows rows, a cluster of two would take twice as many, the
//     inputs split into whole pairs of lines for its two blocks and each
//     would still stream at least wavePairMinLines lines, such a cluster
//     takes them (if two line slots per K warp fit; else as above);
//   - WR row groups (a power of two, at least 2) of NT <= waveMaxTiles
//     n-tiles (waveMaxTilesTwo with two token tiles), so
//     rows round up to a multiple of 8 WR, and waveWarps consumer warps;
//   - line and scale slots as below;
//   - above waveTokenTile tokens two token tiles (TT 2), whose lines of x
//     are twice as long.
//
// It reports false when not even WK line slots fit.
func chooseWave(req sdk.Request, sms, maxShared int) (waveConfig, bool) {
	tt := 1
	if req.Tokens > waveTokenTile {
		tt = 2
	}
	// n-tiles of a cluster of ks blocks: the outputs over sms/ks clusters,
	// so that no more than sms blocks run
	tiles := func(ks int) int { return min(ceilDiv(req.OutFeatures, 8*max(sms/ks, 1)), waveMaxRows/8) }
	ks := 1
	for 8*tiles(ks) < waveMinRows && ks < waveMaxCluster && req.InFeatures%(2*waveLine*2*ks) == 0 {
		ks *= 2
	}
	pairs := 8*tiles(1) == waveMinRows && tiles(2) == 2*tiles(1)
	if pairs && req.InFeatures%(2*waveLine*2) == 0 && req.InFeatures/waveLine/2 >= wavePairMinLines {
		// Twice the rows over half the lines, where two line slots per K
		// warp still fit, as measured. At 128 rows and one token tile those
		// take the whole of waveMaxShared (8 line slots and 4 scale slots:
		// 222208 bytes), so a smaller budget turns the pairs off; the
		// admission tests would say so. (Two token tiles fit 6 slots for 2
		// K warps.)
		if c, ok := waveRing(tiles(2), 2, tt, maxShared); ok && c.NS >= 2*c.WK {
			return c, true
		}
	}
	return waveRing(tiles(ks), ks, tt, maxShared)
}

// waveRing is the variant for blocks of n8 n-tiles in clusters of ks and
// tt token tiles, with as many line slots as fit maxShared; false when not
// even max(2, WK) fit.
func waveRing(n8, ks, tt, maxShared int) (waveConfig, bool) {
	// At least two row groups: at most 4 K warps, so that the ring may take
	// 12 line slots (a multiple of WK) where 8 would be all that WK 8
	// allowed; 28672->8192 at 16 tokens in 64-row blocks: 47.6 us against
	// 55.5 (bench/NOTES.md, seventeenth session).
	maxTiles := waveMaxTiles
	if tt > 1 {
		maxTiles = waveMaxTilesTwo
	}
	wr := 2
	for ceilDiv(n8, wr) > maxTiles && wr < waveWarps {
		wr *= 2
	}
	c, ok := waveSlots(waveGroups(n8, wr, ks, tt), maxShared)
	if tt > 1 && ok && c.NS < 2*c.WK && wr < waveWarps {
		// Two token tiles make the lines longer. Where fewer than two line
		// slots per K warp fit, twice the row groups (half the K warps) with
		// two slots each did better: 4096->14336 at 32 tokens 21.7 us
		// against 25.0 (bench/NOTES.md, twentieth session).
		if c2, ok2 := waveSlots(waveGroups(n8, 2*wr, ks, tt), maxShared); ok2 && c2.NS >= 2*c2.WK {
			return c2, true
		}
	}
	return c, ok
}

// waveGroups is blocks of n8 n-tiles in wr row groups (the rest of the
// waveWarps consumer warps take lines in turn), clusters of ks and tt token
// tiles, before their slots are chosen.
func waveGroups(n8, wr, ks, tt int) waveConfig {
	return waveConfig{NT: ceilDiv(n8, wr), WR: wr, WK: max(1, waveWarps/wr), KS: ks, TT: tt}
}

// waveSlots gives c as many line slots as fit maxShared; false when not
// even max(2, WK) fit.
func waveSlots(c waveConfig, maxShared int) (waveConfig, bool) {
	// A warp waits on a slot by parity, sound only if it saw the slot's
	// previous phase: each slot's lines must be one K warp's, so NS is a
	// multiple of WK and 2*NSB too (wave.cu). The most line slots that fit,
	// with half as many scale slots plus one, or half as many.
	for ns := waveMaxLineSlots / c.WK * c.WK; ns >= max(2, c.WK); ns -= c.WK {
		step := max(1, c.WK/2)
		for _, nsb := range []int{ceilDiv(ns/2+1, step) * step, ceilDiv(max(ns/2, 1), step) * step} {
			c.NS, c.NSB = ns, nsb
			if c.sharedBytes() <= maxShared {
				return c, true
			}
		}
	}
	return c, false
}

// rows is the output rows of a block.
func (c waveConfig) rows() int { return 8 * c.NT * c.WR }

// lineBytes is one ring slot: a line of weights and its x, 1 KiB aligned
// (the 128-byte swizzle's unit).
func (c waveConfig) lineBytes() int {
	return (c.rows()*128 + c.xLineBytes() + 1023) / 1024 * 1024
}

// xLineBytes is one line of prepared x (XLINE_BYTES in wave.cu): TT token
// tiles.
func (c waveConfig) xLineBytes() int { return max(c.TT, 1) * waveXTileBytes }

// sharedBytes is the dynamic shared memory (SMEM_BYTES in wave.cu).
func (c waveConfig) sharedBytes() int {
	return c.NS*c.lineBytes() + c.NSB*2*c.rows()*16 + 1024
}

// workspaceBytes is the prepared x: one line of it per line of inputs.
func (c waveConfig) workspaceBytes(req sdk.Request) int64 {
	return int64(req.InFeatures/waveLine) * int64(c.xLineBytes())
}

// variant is the kernel variant to compile.
func (c waveConfig) variant() gpukernel.Variant {
	defines := map[string]int{"NT": c.NT, "WR": c.WR, "WK": c.WK, "NS": c.NS, "NSB": c.NSB}
	if c.KS > 1 {
		defines["KS"] = c.KS
	}
	if c.TT > 1 {
		defines["TT"] = c.TT
	}
	return gpukernel.Variant{Entry: waveEntry, Defines: defines}
}

// waveLaunches are the launches of one call, in stream order.
type waveLaunches struct{ prep, main gpukernel.Launch }

// launches are the preparation (one block per line and token tile) and the product for
// req. The product starts early (programmatic dependent launch): its first
// lines of weights are in flight while x is prepared. The preparation does
// not: started early beside the product ahead of it (which releases its
// dependents only after its loop), its blocks would wait there for that
// product to end.
func (c waveConfig) launches(req sdk.Request) waveLaunches {
	bias := gpukernel.NullPointer
	if req.Bias {
		bias = sdk.BufferParam(affine.Bias)
	}
	ws := sdk.BufferParam(sdk.BufferWorkspace)
	tok, in, out := sdk.Int32Param(int32(req.Tokens)), sdk.Int32Param(int32(req.InFeatures)), sdk.Int32Param(int32(req.OutFeatures))
	weights, scales := c.tensorMaps(req)
	return waveLaunches{
		prep: gpukernel.Launch{
			Grid: [3]uint32{uint32(req.InFeatures / waveLine * max(c.TT, 1)), 1, 1}, Block: [3]uint32{waveXPrepThreads, 1, 1},
			Params: []sdk.Param{sdk.BufferParam(affine.X), ws, tok, in},
		},
		main: gpukernel.Launch{
			Grid: [3]uint32{uint32(ceilDiv(req.OutFeatures, c.rows()) * c.KS), 1, 1}, Block: [3]uint32{uint32(32 * (c.WR*c.WK + 1)), 1, 1},
			SharedBytes: uint32(c.sharedBytes()), Programmatic: true,
			Params: []sdk.Param{
				sdk.TensorMapParam(affine.Weight, weights), sdk.TensorMapParam(affine.Scales, scales), sdk.TensorMapParam(affine.Biases, scales),
				ws, bias, sdk.BufferParam(affine.Y), tok, in, out,
			},
		},
	}
}

// tensorMaps describes the views the product's copies read (wave.cu's
// header): the packed weights as rows of 32-bit words in boxes of [rows][32
// words] (a line), 128-byte swizzled; the scales and the biases as rows of
// bf16 in boxes of [rows][8 groups] (a pair of lines).
func (c waveConfig) tensorMaps(req sdk.Request) (weights, scales cuda.TensorMapDesc) {
	rows, box := uint64(req.OutFeatures), uint32(c.rows())
	words, groups := uint64(req.InFeatures/8), uint64(req.InFeatures/64)
	weights = cuda.TensorMapDesc{DataType: cuda.TensorU32, Dims: []uint64{words, rows}, Strides: []uint64{4 * words},
		Box: []uint32{32, box}, Swizzle: 128, L2Promotion: 128}
	scales = cuda.TensorMapDesc{DataType: cuda.TensorU16, Dims: []uint64{groups, rows}, Strides: []uint64{2 * groups},
		Box: []uint32{8, box}, L2Promotion: 128}
	return weights, scales
}

// describe names the variant for logs and admission reasons.
func (c waveConfig) describe() string {
	cluster := ""
	if c.KS > 1 {
		cluster = fmt.Sprintf(" in clusters of %d over the inputs", c.KS)
	}
	tiles := ""
	if c.TT > 1 {
		tiles = fmt.Sprintf(" TT=%d", c.TT)
	}
	return fmt.Sprintf("wave rows=%d NT=%d WR=%d WK=%d NS=%d NSB=%d%s%s", c.rows(), c.NT, c.WR, c.WK, c.NS, c.NSB, tiles, cluster)
}
