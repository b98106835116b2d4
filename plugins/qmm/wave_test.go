package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kcand/kcand/internal/harnessrule"
	"github.com/kcand/kcand/sdk"
	"github.com/kcand/kcand/sdk/device"
	"github.com/kcand/kcand/sdk/family/affine"
	"github.com/kcand/kcand/sdk/gpukernel"
	"github.com/kcand/kcand/sdk/plugintest"
)

func TestWaveAdmitsSmallBatchesWithEnoughRowsPerBlock(t *testing.T) {
	for _, c := range []struct {
		name string
		req  sdk.Request
		want string
	}{
		{"a wave of 224-row blocks", int4Request(16, 8192, 28672), "rows=224 NT=7 WR=4 WK=2 NS=4 NSB=3"},
		{"pairs over 56 lines a block", int4Request(16, 28672, 8192), "rows=128 NT=8 WR=2 WK=4 NS=8 NSB=4 in clusters of 2 over the inputs"},
		{"54 lines a block in a pair: 64 rows", int4Request(16, 27648, 8192), "rows=64 NT=4 WR=2 WK=4 NS=12 NSB=6"},
		{"57 lines, not whole pairs of lines a block: 64 rows", int4Request(16, 29184, 8192), "rows=64 NT=4 WR=2 WK=4 NS=12 NSB=6"},
		{"40 lines a block in a pair: 64 rows", int4Request(16, 20480, 8192), "rows=64 NT=4 WR=2 WK=4 NS=12 NSB=6"},
		{"112-row blocks", int4Request(9, 4096, 14336), "rows=112 NT=7 WR=2 WK=4 NS=8 NSB=6"},
		{"256-row blocks, more than a wave", int4Request(13, 1024, 65536), "rows=256 NT=8 WR=4 WK=2"},
		{"few outputs: pairs", int4Request(16, 4096, 4096), "rows=64 NT=4 WR=2 WK=4 NS=12 NSB=6 in clusters of 2 over the inputs"},
		{"few outputs, long inputs: pairs", int4Request(16, 14336, 4096), "rows=64 NT=4 WR=2 WK=4 NS=12 NSB=6 in clusters of 2"},
		{"fewer outputs: clusters of 4", int4Request(12, 4096, 2056), "rows=64 NT=4 WR=2 WK=4 NS=12 NSB=6 in clusters of 4"},
		{"two token tiles: at most 5 n-tiles a warp, 256-row blocks", int4Request(32, 8192, 28672), "rows=256 NT=4 WR=8 WK=1 NS=4 NSB=2 TT=2"},
		{"two token tiles: 21 n-tiles in 8 row groups", int4Request(24, 4096, 22016), "rows=192 NT=3 WR=8 WK=1 NS=4 NSB=3 TT=2"},
		{"two token tiles: 5 n-tiles a warp", int4Request(32, 3584, 18944), "rows=160 NT=5 WR=4 WK=2 NS=4 NSB=3 TT=2"},
		{"two token tiles: twice the row groups for two slots a K warp", int4Request(17, 4096, 14336), "rows=128 NT=4 WR=4 WK=2 NS=6 NSB=3 TT=2"},
		{"two token tiles, few outputs: pairs", int4Request(24, 4096, 4096), "rows=64 NT=4 WR=2 WK=4 NS=8 NSB=4 TT=2 in clusters of 2"},
	} {
		t.Run(c.name, func(t *testing.T) {
			adm := qmmWave{}.Admit(c.req, hopper())
			assert.True(t, adm.Admitted, adm.Reason)
			assert.Contains(t, adm.Reason, c.want)
			if !strings.Contains(c.want, "clusters") {
				assert.NotContains(t, adm.Reason, "clusters")
			}
		})
	}

	for _, c := range []struct {
		name string
		req  sdk.Request
		hw   device.Profile
		want string
	}{
		{"cpu", int4Request(16, 4096, 14336), device.Profile{Kind: device.CPU}, "needs a CUDA device"},
		{"before Hopper", int4Request(16, 4096, 14336), device.Profile{Kind: device.CUDA, ComputeCapability: "8.0", Multiprocessors: 108}, "compute capability 9.0"},
		{"decode", int4Request(8, 4096, 14336), hopper(), "serves 9 to 32 tokens (two tiles of one mma's 16 rows), not 8"},
		{"33 tokens", int4Request(33, 4096, 14336), hopper(), "not 33"},
		{"8 bits", plugintest.AffineRequest(16, 4096, 14336, 8, 64, false), hopper(), "not bits=8 group_size=64"},
		{"groups of 128", plugintest.AffineRequest(16, 4096, 14336, 4, 128, false), hopper(), "not bits=4 group_size=128"},
		{"odd inputs", int4Request(16, 2880, 14336), hopper(), "in_features=2880 is not a multiple of 512"},
		{"few rows", int4Request(16, 2560, 4096), hopper(), "blocks of 32 rows on 132 multiprocessors, fewer than 64 (their x would outweigh their weights), and in_features=2560 does not split"},
		{"little shared memory", int4Request(16, 4096, 14336),
			device.Profile{Kind: device.CUDA, ComputeCapability: "9.0", Multiprocessors: 132, Limits: device.Limits{MaxSharedPerBlock: 48 << 10}},
			"4 lines of 112 rows (one per K warp) do not fit 49152 bytes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			adm := qmmWave{}.Admit(c.req, c.hw)
			assert.False(t, adm.Admitted)
			assert.Contains(t, adm.Reason, c.want)
		})
	}
}

// TestWaveRuleMatchesThePythonHarness: scripts/wave_rule.py, by which the
// GPU harness (scripts/wave_kernel.py) checks and times "the plugin's
// variant", picks what chooseWave picks, over SM counts, input and output
// sizes. Skipped where python3 is not installed.
func TestWaveRuleMatchesThePythonHarness(t *testing.T) {
	type shape struct{ sms, in, out, tokens int }
	var shapes []shape
	var stdin strings.Builder
	for _, tokens := range []int{16, 32} {
		for _, sms := range []int{132, 114, 78, 16, 7, 1} {
			for _, in := range []int{512, 4096, 14336, 20480, 27648, 28672, 29184, 57344} {
				for out := 8; out <= 1<<17; out = out*5/4 + 8 - (out*5/4)%8 {
					shapes = append(shapes, shape{sms, in, out, tokens})
					fmt.Fprintf(&stdin, "%d %d %d %d\n", sms, in, out, tokens)
				}
			}
		}
	}
	lines := harnessrule.Run(t, "wave_rule.py", stdin.String())
	require.Len(t, lines, len(shapes))
	pairs := 0
	for i, sh := range shapes {
		want := "null"
		if c, ok := chooseWave(int4Request(sh.tokens, sh.in, sh.out), sh.sms, waveMaxShared); ok {
			want = c.pythonJSON()
			if c.KS == 2 && c.rows() == 2*waveMinRows {
				pairs++
			}
		}
		assert.Equal(t, want, lines[i], "%d->%d at %d tokens on %d SMs", sh.in, sh.out, sh.tokens, sh.sms)
	}
	assert.Positive(t, pairs, "the sweep reaches the pairs over long inputs")
}

// pythonJSON is c as scripts/wave_rule.py prints it (json.dumps with
// sorted keys; KS and TT only above 1).
func (c waveConfig) pythonJSON() string {
	ks := ""
	if c.KS > 1 {
		ks = fmt.Sprintf(`"KS": %d, `, c.KS)
	}
	tt := ""
	if c.TT > 1 {
		tt = fmt.Sprintf(`"TT": %d, `, c.TT)
	}
	return fmt.Sprintf(`{%s"NS": %d, "NSB": %d, "NT": %d, %s"WK": %d, "WR": %d}`, ks, c.NS, c.NSB, c.NT, tt, c.WK, c.WR)
}

// Blocks of 64 rows take twice the rows in clusters of two over long
// inputs only where two line slots per K warp still fit.
func TestWavePairsOnlyWhereTwoSlotsPerWarpFit(t *testing.T) {
	req := int4Request(16, 28672, 8192)
	hw := hopper()
	c, why := waveAdmit(req, hw)
	require.Empty(t, why)
	assert.Equal(t, 2, c.KS)
	assert.Equal(t, 128, c.rows())
	assert.GreaterOrEqual(t, c.NS, 2*c.WK)

	hw.Limits.MaxSharedPerBlock = 150 << 10 // four slots of 128 rows fit, eight do not
	c, why = waveAdmit(req, hw)
	require.Empty(t, why)
	assert.Equal(t, 1, c.KS)
	assert.Equal(t, 64, c.rows())
}

// TestWaveVariantsMeetTheKernelsLimits sweeps token counts (one and two
// token tiles), output sizes, GPU sizes and shared-memory limits: every
// admitted variant must compile (wave.cu's #error checks: a box of at most
// 256 rows, the K warps' sums within the ring, each slot's lines one K
// warp's), fit its shared memory with room for a preparation block beside
// it, give each block whole n-tiles, and cover the output with its grid.
func TestWaveVariantsMeetTheKernelsLimits(t *testing.T) {
	admitted := 0
	for _, tokens := range []int{16, 32} {
		for _, in := range []int{4096, 28672} {
			for _, limit := range []int{0, 99 << 10} {
				for _, sms := range []int{132, 114, 78, 16} {
					for out := 8; out <= 1<<17; out = out*5/4 + 8 - (out*5/4)%8 {
						admitted += checkWaveVariant(t, tokens, sms, limit, in, out)
					}
				}
			}
		}
	}
	assert.Greater(t, admitted, 200)
}

// checkWaveVariant checks the variant for tokens tokens of in inputs and
// out outputs on sms multiprocessors with limit bytes of shared memory a
// block (0: the H200's); it returns 1 when the request is admitted.
func checkWaveVariant(t *testing.T, tokens, sms, limit, in, out int) int {
	t.Helper()
	req := int4Request(tokens, in, out)
	hw := hopper()
	hw.Multiprocessors = sms
	hw.Limits.MaxSharedPerBlock = limit
	c, why := waveAdmit(req, hw)
	if why != "" {
		return 0
	}
	name := fmt.Sprintf("%d->%d at %d tokens on %d SMs with %d bytes: %s", in, out, tokens, sms, limit, c.describe())
	assert.Equal(t, ceilDiv(tokens, waveTokenTile), c.TT, "%s: token tiles", name)
	assert.Zero(t, c.NS%c.WK, "%s: a slot's lines are one K warp's", name)
	assert.Zero(t, 2*c.NSB%c.WK, "%s: a scale slot's pairs of lines are one K warp's", name)
	assert.GreaterOrEqual(t, c.rows(), waveMinRows, name)
	assert.LessOrEqual(t, c.rows(), waveMaxRows, name)
	assert.True(t, c.NT >= 1 && c.NT <= 8, name)
	assert.Equal(t, waveWarps, c.WR*c.WK, name)
	assert.True(t, c.NS >= 2 && c.NS <= waveMaxLineSlots && c.NSB >= 1, name)
	assert.LessOrEqual(t, c.WK*c.rows()*16*c.TT*4, c.NS*c.lineBytes(), "%s: the K warps' sums fit the ring", name)
	assert.LessOrEqual(t, c.sharedBytes(), waveMaxShared, name)
	if limit > 0 {
		assert.LessOrEqual(t, c.sharedBytes(), limit, name)
	}
	assert.Zero(t, req.InFeatures%(2*waveLine*c.KS), "%s: each block of a cluster takes whole pairs of lines", name)
	l := c.launches(req)
	blocks := int(l.main.Grid[0])
	require.Zero(t, blocks%c.KS, name)
	rowBlocks := blocks / c.KS
	assert.True(t, rowBlocks*c.rows() >= out && (rowBlocks-1)*c.rows() < out, "%s: %d blocks", name, blocks)
	if c.rows() < waveMaxRows {
		assert.LessOrEqual(t, blocks, sms, "%s: one wave", name)
	}
	if c.KS > 1 {
		assert.LessOrEqual(t, (c.WK+1)*c.rows()*16*c.TT*4, c.NS*c.lineBytes(), "%s: the sums and the cluster's share fit the ring", name)
	}
	return 1
}

// The preparation runs one block per line and token tile without early
// start; the product starts early and reads the prepared x from the
// workspace through its tensor maps' boxes of a block's rows.
func TestWaveLaunchesWireTheWorkspace(t *testing.T) {
	req := plugintest.AffineRequest(11, 3072, 8200, 4, 64, true)
	c, why := waveAdmit(req, hopper())
	require.Empty(t, why)
	assert.Equal(t, int64(12*(17*512+64)), c.workspaceBytes(req), "12 lines of prepared x")
	l := c.launches(req)
	ws := sdk.BufferParam(sdk.BufferWorkspace)
	tok, in, out := sdk.Int32Param(11), sdk.Int32Param(3072), sdk.Int32Param(8200)
	assert.Equal(t, [3]uint32{12, 1, 1}, l.prep.Grid)
	assert.Equal(t, [3]uint32{waveXPrepThreads, 1, 1}, l.prep.Block)
	assert.False(t, l.prep.Programmatic)
	assert.Equal(t, []sdk.Param{sdk.BufferParam(affine.X), ws, tok, in}, l.prep.Params)

	assert.True(t, l.main.Programmatic)
	assert.Equal(t, [3]uint32{129, 1, 1}, l.main.Grid, "64-row blocks, the last one partial")
	assert.Equal(t, [3]uint32{32 * 9, 1, 1}, l.main.Block, "8 consumer warps and the producer")
	assert.Equal(t, uint32(c.sharedBytes()), l.main.SharedBytes)
	p := l.main.Params
	require.Len(t, p, 9)
	for i, name := range []string{affine.Weight, affine.Scales, affine.Biases} {
		assert.Equal(t, name, p[i].Buffer)
		require.NotNil(t, p[i].TensorMap)
		assert.NoError(t, p[i].TensorMap.Check(name))
		assert.Equal(t, uint32(64), p[i].TensorMap.Box[1], "a block's rows")
	}
	assert.Equal(t, []uint32{32, 64}, p[0].TensorMap.Box, "one line: 32 words of each row")
	assert.Equal(t, 128, p[0].TensorMap.Swizzle)
	assert.Equal(t, []uint32{8, 64}, p[1].TensorMap.Box, "a pair of lines' 8 groups")
	assert.Equal(t, []sdk.Param{ws, sdk.BufferParam(affine.Bias), sdk.BufferParam(affine.Y), tok, in, out}, p[3:])
	noBias := int4Request(16, 4096, 14336)
	cn, _ := waveAdmit(noBias, hopper())
	assert.Equal(t, gpukernel.NullPointer, cn.launches(noBias).main.Params[4])

	// Two token tiles: each line of prepared x holds two tiles, and the
	// preparation takes a block per line and tile.
	req32 := plugintest.AffineRequest(32, 3072, 8200, 4, 64, false)
	c32, why := waveAdmit(req32, hopper())
	require.Empty(t, why)
	require.Equal(t, 2, c32.TT)
	assert.Equal(t, int64(12*2*(17*512+64)), c32.workspaceBytes(req32), "12 lines of two tiles of prepared x")
	assert.Equal(t, [3]uint32{24, 1, 1}, c32.launches(req32).prep.Grid)
	assert.Equal(t, 2, c32.variant().Defines["TT"])
	assert.Equal(t, (c32.rows()*128+2*(17*512+64)+1023)/1024*1024, c32.lineBytes(), "a slot: a line of weights and two tiles of x")
}

// TestWaveVariantsCompile compiles the variant qmm/wave runs for every GPU
// test shape it serves (NVRTC 12 or newer: tensor copies are PTX ISA 8.0).
func TestWaveVariantsCompile(t *testing.T) {
	plugintest.CompileVariants(t, waveSource, func(req sdk.Request, sms int) plugintest.Choice {
		hw := hopper()
		hw.Multiprocessors = sms
		c, why := waveAdmit(req, hw)
		if why != "" {
			return plugintest.Choice{}
		}
		l := c.launches(req)
		return plugintest.Choice{OK: true, Source: &waveSource, Variant: c.variant(),
			Grid: l.main.Grid, Block: l.main.Block, SharedBytes: l.main.SharedBytes, MinNVRTC: 12}
	})
}
