package main

import (
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kcand/kcand/internal/harnessrule"
	"github.com/kcand/kcand/sdk"
	"github.com/kcand/kcand/sdk/device"
	"github.com/kcand/kcand/sdk/family/affine"
	"github.com/kcand/kcand/sdk/plugintest"
)

func hopper() device.Profile {
	return device.Profile{Kind: device.CUDA, ComputeCapability: "9.0", Multiprocessors: 132}
}

func int4Request(tokens, in, out int) sdk.Request {
	return plugintest.AffineRequest(tokens, in, out, 4, 64, false)
}

func TestWGMMAAdmitsHopperInt4G64ManyTokens(t *testing.T) {
	adm := qmmWGMMA{}.Admit(int4Request(256, 4096, 14336), hopper())
	require.True(t, adm.Admitted, adm.Reason)
	assert.Contains(t, adm.Reason, "wgmma BITS=4 BN=256")
}

// 8-bit weights in groups of 64 run the same tiles and shares with the
// BITS macro: stages of 4 groups (the same 256 bytes of each row), rows
// padded to 320 bytes against bank conflicts.
func TestWGMMAServesInt8G64(t *testing.T) {
	q8 := plugintest.AffineRequest(256, 4096, 14336, 8, 64, false)
	adm := qmmWGMMA{}.Admit(q8, hopper())
	require.True(t, adm.Admitted, adm.Reason)
	assert.Contains(t, adm.Reason, "int8 g64")
	for _, req := range []sdk.Request{q8, plugintest.AffineRequest(64, 4096, 4096, 8, 64, false),
		plugintest.AffineRequest(4096, 14336, 4096, 8, 64, true)} {
		c, c4 := chooseWG(req, 132), chooseWG(int4Request(req.Tokens, req.InFeatures, req.OutFeatures), 132)
		assert.Equal(t, 8, c.variant().Defines["BITS"], req.Key())
		assert.Equal(t, 2, c.variant().Defines["AW"], "two weight-copying warps at 8 bits")
		assert.NotContains(t, c4.variant().Defines, "BITS", "4-bit variants keep their cache keys")
		c4.Bits = 8
		assert.Equal(t, c4, c, "the same tiles and shares as at 4 bits: %s", req.Key())
		assert.Equal(t, c.Stages*c.stageBytes()+c.AST*64*c.WGS*(4*64+64+4*4), c.sharedBytes())
		assert.LessOrEqual(t, c.sharedBytes()+8*2*(c.Stages+c.AST)+4*c.BN+2*64*c.WGS, 232448, "fits the opt-in shared memory")
	}
}

// 2-, 3-, 5- and 6-bit weights in groups of 64 run the same tiles and
// shares with the BITS macro and the kernel's general unpacking: stages
// of 8 groups at 2 and 3 bits (128 and 192 bytes of each row), 4 at 5 and
// 6 bits (160 and 192), rows padded by 16 bytes, one more of them in the
// ring than at 4 bits. Where the epilogue's
// fp32 tile or a cluster's shares outgrow the smaller rings, the block
// takes their bytes; every variant fits a block's 227 KB.
func TestWGMMAServesTheOtherWidths(t *testing.T) {
	rows := map[int][2]int{2: {8, 144}, 3: {8, 208}, 5: {4, 176}, 6: {4, 208}}
	for _, bits := range []int{2, 3, 5, 6} {
		groups, row := wgStageRow(bits)
		assert.Equal(t, rows[bits], [2]int{groups, row}, "bits=%d", bits)
		for _, shape := range [][3]int{{256, 4096, 14336}, {64, 4096, 4096}, {4096, 14336, 4096}, {128, 28672, 8192},
			{256, 8192, 28032}, {256, 4096, 17920}, {33, 14336, 4096}, {200, 8192, 28672}} {
			req := plugintest.AffineRequest(shape[0], shape[1], shape[2], bits, 64, shape[0]%2 == 0)
			adm := qmmWGMMA{}.Admit(req, hopper())
			require.True(t, adm.Admitted, adm.Reason)
			assert.Contains(t, adm.Reason, fmt.Sprintf("int%d g64", bits))
			c, c4 := chooseWG(req, 132), chooseWG(int4Request(req.Tokens, req.InFeatures, req.OutFeatures), 132)
			assert.Equal(t, bits, c.variant().Defines["BITS"], req.Key())
			assert.NotContains(t, c.variant().Defines, "AW", "three weight-copying warps, the kernel's default")
			c4.Bits = bits
			c4.AST++
			assert.Equal(t, c4, c, "the same tiles and shares as at 4 bits, one more weight stage in the ring: %s", req.Key())
			ring := c.Stages*c.stageBytes() + c.AST*64*c.WGS*(row+4*groups)
			assert.GreaterOrEqual(t, c.sharedBytes(), ring, req.Key())
			assert.GreaterOrEqual(t, c.sharedBytes(), c.BN*(64*c.WGS+4)*4, "the fp32 output tile, %s", req.Key())
			if c.Cluster {
				assert.GreaterOrEqual(t, c.sharedBytes(), (c.Splits+1)*c.BN*(64*c.WGS/c.Splits+4)*4, "the cluster's shares, %s", req.Key())
			}
			assert.LessOrEqual(t, c.sharedBytes()+8*2*(c.Stages+c.AST)+4*c.BN+2*64*c.WGS, 232448, "fits the opt-in shared memory")
		}
	}
	// 256-token tiles in two-share clusters at 2 bits: the three shares
	// ([256][68] fp32 each) outgrow the rings (3*32768 + 3*128*(144+32)).
	wideSplit := wgWide
	wideSplit.Splits, wideSplit.Cluster, wideSplit.Bits, wideSplit.AST = 2, true, 2, 4
	assert.Equal(t, 3*256*68*4, wideSplit.sharedBytes())
	assert.Less(t, 3*32768+4*128*(144+32), wideSplit.sharedBytes())
}

// Groups of 32 and 128 run the same tiles with the QGROUP macro: a
// stage row's scales and biases are two per 64 inputs, or one per 128.
// With groups of 32 the ring keeps one weight stage fewer where it would
// outgrow a block's shared memory (4, 8 and 3 bits with 128- and
// 256-token tiles of two consumer warpgroups), never fewer than two.
func TestWGMMAServesGroupsOf32And128(t *testing.T) {
	for _, bits := range []int{2, 3, 4, 5, 6, 8} {
		for _, group := range []int{32, 128} {
			for _, shape := range [][3]int{{256, 4096, 14336}, {64, 4096, 4096}, {4096, 14336, 4096}, {128, 28672, 8192},
				{256, 8192, 28032}, {200, 8192, 28672}, {300, 1280, 2048}} {
				req := plugintest.AffineRequest(shape[0], shape[1], shape[2], bits, group, shape[0]%2 == 0)
				adm := qmmWGMMA{}.Admit(req, hopper())
				require.True(t, adm.Admitted, adm.Reason)
				assert.Contains(t, adm.Reason, fmt.Sprintf("int%d g%d", bits, group))
				c := chooseWG(req, 132)
				g64 := chooseWG(plugintest.AffineRequest(shape[0], shape[1], shape[2], bits, 64, false), 132)
				assert.Equal(t, group, c.variant().Defines["QGROUP"], req.Key())
				assert.NotContains(t, g64.variant().Defines, "QGROUP", "groups of 64 keep their cache keys")
				assert.LessOrEqual(t, c.sharedBytes(), wgMaxSharedBytes, req.Key())
				assert.LessOrEqual(t, c.sharedBytes()+8*2*(c.Stages+c.AST)+4*c.BN+2*64*c.WGS, 232448, "fits the opt-in shared memory")
				assert.GreaterOrEqual(t, c.AST, 2, req.Key())
				g64.Group = group
				if c.AST != g64.AST {
					assert.Equal(t, 32, group, "only groups of 32 give up a weight stage: %s", req.Key())
					assert.Equal(t, g64.AST-1, c.AST, req.Key())
					more := c
					more.AST++
					assert.Greater(t, more.sharedBytes(), wgMaxSharedBytes, "one more stage would not fit: %s", req.Key())
					g64.AST = c.AST
				}
				assert.Equal(t, g64, c, "the same tiles and shares as in groups of 64: %s", req.Key())
			}
		}
	}
	// 4 bits in groups of 32, 256-token tiles: rows of 288 bytes and 16
	// scales and 16 biases, 3*32768 + 2*128*(288+64) (3 stages would take
	// 3*128*352 = 135168 bytes of weights).
	q4g32 := chooseWG(plugintest.AffineRequest(256, 4096, 14336, 4, 32, false), 132)
	assert.Equal(t, 2, q4g32.AST)
	assert.Equal(t, 3*32768+2*128*(288+64), q4g32.sharedBytes())
	q4g128 := chooseWG(plugintest.AffineRequest(256, 4096, 14336, 4, 128, false), 132)
	assert.Equal(t, 3*32768+3*128*(288+16), q4g128.sharedBytes(), "4 scales and 4 biases a row")
}

// The measured rule: the token tile (256, 128 or 64 tokens) in pairs,
// 64-row tiles in 2 K shares summed within a cluster, where 4 shares of
// its blocks would fit one wave; else the tile's K in 2 shares, a cluster
// each, where 2 fit; else 256-token tiles above 128 tokens, or, past whole
// waves of a single token tile, the last partial wave's tiles whole where
// they fill at least two thirds of it, else shared by one stream-K block
// per multiprocessor where they hold 4 weight stages per multiprocessor,
// else split (their sums through memory); up to 128
// tokens, 128-token tiles when those give more than one block per two
// multiprocessors, else 64.
func TestChooseWGNarrowsSmallGrids(t *testing.T) {
	for _, c := range []struct {
		tokens, in, out, bn, wgs, splits, full, streamK int
		cluster                                         bool
	}{
		{64, 4096, 14336, 64, 2, 1, 0, 0, false},       // one narrow tile
		{64, 4096, 4096, 64, 1, 2, 0, 0, true},         // 32 narrow tiles × 4 would fit: 64 × 2 in clusters
		{33, 14336, 4096, 64, 1, 2, 0, 0, true},        // the same
		{128, 4096, 4096, 128, 1, 2, 0, 0, true},       // 32 tiles of 128 tokens × 4 would fit: 64 × 2 in clusters
		{100, 2048, 1032, 128, 1, 2, 0, 0, true},       // 32 groups: pairs, two shares of 16
		{256, 2880, 2880, 256, 1, 2, 0, 0, true},       // 45 groups (gpt-oss): pairs, shares of 22 and 23
		{256, 2880, 5120, 256, 2, 2, 0, 0, true},       // 40 tiles × 4 would not fit: 40 × 2 in clusters
		{100, 1024, 1032, 64, 2, 1, 0, 0, false},       // 16 groups: one share; 9 tiles of 128 tokens, so 64-token tiles
		{128, 4096, 14336, 128, 2, 1, 0, 0, false},     // 112 blocks of 128 tokens
		{128, 28672, 8192, 128, 2, 2, 0, 0, true},      // 64 tiles × 2 in clusters (64-token tiles would make 128 blocks)
		{64, 28672, 8192, 64, 2, 2, 0, 0, true},        // 64 tiles × 2 in clusters
		{256, 4096, 14336, 256, 2, 1, 0, 0, false},     // 112 blocks of 256 tokens
		{256, 8192, 28672, 256, 2, 1, 0, 0, false},     // 224 tiles: a whole wave, then a last one of 92 (over two thirds full), whole too
		{256, 8192, 28160, 256, 2, 1, 0, 0, false},     // 220 tiles: a last wave of 88, two thirds of 132: whole
		{256, 8192, 28032, 256, 2, 1, 132, 132, false}, // 219 tiles: 87, just under two thirds: stream-K
		{256, 8192, 25600, 256, 2, 1, 132, 132, false}, // 200 tiles: a whole wave, then 68 shared by 132 stream-K blocks
		{256, 4096, 17920, 256, 2, 4, 132, 0, false},   // 140 tiles: 8 × 4 after the wave (64 stages, under 4 per SM)
		{200, 2048, 17920, 256, 2, 2, 132, 0, false},   // 32 groups: at most two shares
		{256, 8192, 33792, 256, 2, 1, 0, 0, false},     // 264 tiles, two whole waves
		{256, 14336, 4096, 256, 1, 2, 0, 0, true},      // 32 tiles × 4 would fit: 64 × 2 in clusters
		{256, 28672, 8192, 256, 2, 2, 0, 0, true},      // 64 tiles × 2 in clusters
		{256, 4096, 4096, 256, 1, 2, 0, 0, true},       // 32 tiles × 4 would fit: 64 × 2 in clusters
		{200, 4096, 1032, 256, 1, 2, 0, 0, true},       // 9 tiles: 17 × 2 in clusters
		{256, 2048, 4096, 256, 1, 2, 0, 0, true},       // 32 groups: pairs, two shares of 16
		{256, 1984, 4096, 256, 2, 1, 0, 0, false},      // 31 groups: no shares under 16 groups, 32 whole tiles
		{512, 8192, 28672, 256, 2, 1, 0, 0, false},     // 448 tiles over two token tiles
		{4096, 14336, 4096, 256, 2, 1, 0, 0, false},    // 512 blocks
	} {
		got := chooseWG(int4Request(c.tokens, c.in, c.out), 132)
		assert.Equal(t, []int{c.bn, c.wgs, c.splits, c.full, c.streamK}, []int{got.BN, got.WGS, got.Splits, got.Full, got.StreamK}, "%d tokens %dx%d", c.tokens, c.in, c.out)
		if got.StreamK > 0 {
			assert.Equal(t, 1, got.variant().Defines["STREAMK"], "stream-K is compiled in")
		} else {
			assert.NotContains(t, got.variant().Defines, "STREAMK")
		}
		assert.Equal(t, c.cluster, got.Cluster, "%d tokens %dx%d", c.tokens, c.in, c.out)
		if got.Cluster {
			assert.Equal(t, got.Splits, got.variant().Defines["CLUSTER"], "a cluster is a tile's shares")
		} else {
			assert.NotContains(t, got.variant().Defines, "CLUSTER")
		}
	}
}

// A profile without a multiprocessor count (a remote device that did not
// report one) plans for one instead of dividing by zero.
func TestChooseWGWithoutMultiprocessors(t *testing.T) {
	hw := hopper()
	hw.Multiprocessors = 0
	for _, req := range []sdk.Request{int4Request(256, 8192, 28672), int4Request(64, 4096, 4096), int4Request(4096, 4096, 4096)} {
		require.NotPanics(t, func() { qmmWGMMA{}.Admit(req, hw) }, req.Key())
		c := chooseWG(req, 0)
		assert.Equal(t, 1, c.Splits, "one multiprocessor: nothing to split for, %s", req.Key())
	}
}

// In_features that are not a multiple of 2·max(64, group), as gpt-oss's
// 2880 (45 groups of 64), take the ODDK variant at every width: windows of
// scale pieces, and a stage row keeps a window's entries more. Others keep
// their cache keys.
func TestWGMMAServesOddGroupCounts(t *testing.T) {
	for _, bits := range []int{2, 3, 4, 5, 6, 8} {
		for _, shape := range [][4]int{
			{256, 2880, 2880, 64}, {64, 2880, 4096, 64}, {4096, 2880, 512, 64}, {128, 4160, 28672, 64},
			{256, 2880, 5120, 32}, {200, 1088, 4096, 32},
			{256, 1152, 4096, 128}, {64, 3712, 14336, 128},
		} {
			req := plugintest.AffineRequest(shape[0], shape[1], shape[2], bits, shape[3], shape[0]%2 == 0)
			adm := qmmWGMMA{}.Admit(req, hopper())
			require.True(t, adm.Admitted, adm.Reason)
			assert.Contains(t, adm.Reason, "oddk", req.Key())
			c := chooseWG(req, 132)
			assert.True(t, c.OddK, req.Key())
			assert.Equal(t, 1, c.variant().Defines["ODDK"], req.Key())
			even := c
			even.OddK = false
			groups, _ := wgStageRow(bits)
			scales := groups * 64 / shape[3]
			window := wgScaleWindow(scales)
			// 8-byte pieces but where a stage row has two scales: 5, 6 and
			// 8 bits (stages of 4 groups of 64) in groups of 128.
			want := 4
			if shape[3] == 128 && bits >= 5 {
				want = 2
			}
			assert.Equal(t, want, window, req.Key())
			assert.Zero(t, scales%window, "a window's pieces tile a stage row's scales: %s", req.Key())
			if c.sharedBytes() > c.BN*(64*c.WGS+4)*4 && !c.Cluster {
				assert.Equal(t, c.AST*64*c.WGS*4*window, c.sharedBytes()-even.sharedBytes(), "scales and biases keep a window more a row: %s", req.Key())
			}
			assert.LessOrEqual(t, c.sharedBytes(), wgMaxSharedBytes, req.Key())
			assert.GreaterOrEqual(t, c.AST, 2, req.Key())
		}
	}
	for _, req := range []sdk.Request{int4Request(256, 4096, 4096), int4Request(256, 5760, 4096),
		plugintest.AffineRequest(256, 2944, 4096, 4, 32, false), plugintest.AffineRequest(256, 2816, 4096, 6, 128, false)} {
		c := chooseWG(req, 132)
		assert.False(t, c.OddK, req.Key())
		assert.NotContains(t, c.variant().Defines, "ODDK", "%s keeps its cache key", req.Key())
	}
}

func TestWGMMARefusalsSayWhy(t *testing.T) {
	ampere := hopper()
	ampere.ComputeCapability = "8.0"
	cpu := device.Profile{Kind: device.CPU}
	halfGroups := plugintest.AffineRequest(256, 2080, 4096, 4, 32, false)
	cases := []struct {
		name string
		req  sdk.Request
		hw   device.Profile
		want string
	}{
		{"cpu", int4Request(256, 4096, 4096), cpu, "needs a CUDA device"},
		{"ampere", int4Request(256, 4096, 4096), ampere, "compute capability 9.0"},
		{"half a group of 64", halfGroups, hopper(), "in_features=2080 is not a multiple of 64"},
		{"few tokens", int4Request(16, 4096, 4096), hopper(), "17 or more tokens, not 16"},
		{"rows of x too long", int4Request(256, 57344+128, 4096), hopper(), "in_features=57472 is over 57344"},
		{"rows not multiple of 8", int4Request(256, 4096, 4100), hopper(), "out_features=4100"},
		{"huge workspace", int4Request(100000, 28672, 8192), hopper(), "bytes of workspace"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			adm := qmmWGMMA{}.Admit(c.req, c.hw)
			assert.False(t, adm.Admitted)
			assert.Contains(t, adm.Reason, c.want)
		})
	}
	assert.True(t, qmmWGMMA{}.Admit(int4Request(17, 4096, 4096), hopper()).Admitted, "17 tokens is the first admitted count")
}

func int32Of(t *testing.T, p sdk.Param) int32 {
	t.Helper()
	require.Len(t, p.Scalar, 4)
	return int32(binary.LittleEndian.Uint32(p.Scalar))
}

// The launches (x's preparation, main, and the reduce with a split K)
// cover every token, row block and token tile, bind the workspace where
// the kernels read and write it, and fit an H100/H200.
func TestWGMMALaunchesCoverTheRequest(t *testing.T) {
	for _, req := range []sdk.Request{int4Request(33, 4096, 4096), int4Request(4096, 4096, 14336), int4Request(129, 640, 136),
		int4Request(200, 2048, 8192), int4Request(136, 4096, 17416), int4Request(200, 4096, 1032), int4Request(256, 14336, 4096),
		int4Request(256, 8192, 28672), int4Request(256, 8192, 25600)} {
		req.Bias = req.Tokens != 33 && req.Tokens != 4096
		c := chooseWG(req, 132)
		l := c.launches(req)
		main := l.main
		tiles := (req.Tokens + c.BN - 1) / c.BN
		rowBlocks := (req.OutFeatures + 64*c.WGS - 1) / (64 * c.WGS)

		// xprep covers the padded tiles, two tokens per block, so that the
		// padding tokens' stages are written (as zeros) too, and clears
		// the split-K sums from the first split row; its block is the
		// variant's XPREP_THREADS.
		scales := l.prep
		assert.Equal(t, [3]uint32{uint32(tiles * c.BN / 2), 1, 1}, scales.Grid, req.Key())
		assert.Equal(t, [3]uint32{uint32(c.XPrepThreads), 1, 1}, scales.Block)
		if c.XPrepThreads == wgXPrepThreads {
			assert.NotContains(t, c.variant().Defines, "XPREP_THREADS", "the kernel's default block")
		} else {
			assert.Equal(t, c.XPrepThreads, c.variant().Defines["XPREP_THREADS"], "the block xprep is compiled for")
		}
		assert.Equal(t, uint32(4*req.InFeatures), scales.SharedBytes, "two rows of bf16 x")
		assert.False(t, scales.Programmatic, "the preparation reads x, which the engine's work ahead writes: no early start")
		assert.True(t, main.Programmatic, "the main kernel starts early and waits for the preparation in the kernel")
		require.Len(t, scales.Params, 8)
		if c.Cluster {
			assert.Equal(t, int32(1), int32Of(t, scales.Params[5]), "a cluster needs no cleared sums")
		} else {
			assert.Equal(t, int32(c.Splits), int32Of(t, scales.Params[5]))
		}
		assert.Equal(t, int32(c.Full*64*c.WGS), int32Of(t, scales.Params[6]), "sums cleared from the first split row")
		assert.Equal(t, affine.X, scales.Params[0].Buffer)
		assert.Equal(t, sdk.BufferWorkspace, scales.Params[1].Buffer)
		if c.StreamK > 0 {
			assert.Equal(t, int32(rowBlocks*tiles-c.Full+1), int32Of(t, scales.Params[7]), "stream-K's tile counters and ticket cleared")
		} else {
			assert.Equal(t, int32(0), int32Of(t, scales.Params[7]), "no counters")
		}

		if c.StreamK > 0 {
			assert.Equal(t, uint32(c.Full+c.StreamK), main.Grid[0], req.Key())
		} else {
			assert.Equal(t, uint32(c.Full+(rowBlocks*tiles-c.Full)*c.Splits), main.Grid[0], req.Key())
		}
		assert.Equal(t, uint32(128*c.WGS+128), main.Block[0])
		static := 8*(2*(c.Stages+c.AST)+1) + 4*c.BN + 2*64*c.WGS + 16 // barriers, token scales, bias, its alignment
		assert.LessOrEqual(t, int(main.SharedBytes)+static, 232448, "fits the opt-in shared memory")
		require.Len(t, main.Params, 13)
		assert.Equal(t, sdk.BufferWorkspace, main.Params[0].Buffer)
		assert.Equal(t, affine.Y, main.Params[5].Buffer)
		if req.Bias {
			assert.Equal(t, affine.Bias, main.Params[4].Buffer)
		} else {
			assert.Equal(t, make([]byte, 8), main.Params[4].Scalar, "no bias is a null pointer")
		}
		assert.Equal(t, int32(req.Tokens), int32Of(t, main.Params[6]))
		assert.Equal(t, int32(c.Band), int32Of(t, main.Params[9]))
		assert.Equal(t, int32(c.Splits), int32Of(t, main.Params[10]))
		assert.Equal(t, int32(c.Full), int32Of(t, main.Params[11]))
		assert.Equal(t, int32(c.StreamK), int32Of(t, main.Params[12]))
		if c.StreamK > 0 {
			// 256 tokens 8192→25600: 200 row blocks of 128, a whole wave,
			// then 68 tiles shared by 132 blocks that finish them
			// themselves.
			assert.Equal(t, []int{1, 132, 132}, []int{c.Splits, c.Full, c.StreamK}, req.Key())
			assert.Equal(t, 1, c.variant().Defines["STREAMK"])
			assert.Nil(t, l.reduce, "stream-K blocks write y themselves")
			continue
		}
		if c.Splits == 1 {
			assert.Nil(t, l.reduce, "no reduction without a split K")
			continue
		}
		if c.Cluster {
			// 33 tokens 4096² and 200 tokens 4096→1032: 64 and 17 row
			// blocks of 64 in pairs; 200 tokens 2048→8192: 64 row blocks
			// of 128 (in pairs they would be two waves). Each tile's two
			// blocks are a cluster, which adds the shares itself.
			wgs, rowBlocks := 1, 64 // 33 tokens 4096²
			switch {
			case req.InFeatures == 2048:
				wgs, rowBlocks = 2, 64
			case req.Tokens == 200:
				rowBlocks = 17
			}
			assert.Equal(t, []int{wgs, 2, 0}, []int{c.WGS, c.Splits, c.Full}, req.Key())
			assert.Equal(t, uint32(rowBlocks*2), main.Grid[0], req.Key())
			assert.Nil(t, l.reduce, "a cluster writes y itself")
			continue
		}
		// 136 tokens, 137 row blocks of 128: 132 whole, then 5 split in 4,
		// whose shares add in pairs into two slices; the reduction adds
		// the slices of rows 16896..17415, 65 chunks of 8 per token.
		require.NotNil(t, l.reduce, req.Key())
		assert.Equal(t, []int{4, 132}, []int{c.Splits, c.Full}, req.Key())
		assert.Equal(t, uint32(132+5*4), main.Grid[0])
		assert.Equal(t, [3]uint32{35, 1, 1}, l.reduce.Grid, "136 tokens × 65 chunks, 256 per block")
		assert.True(t, l.reduce.Programmatic)
		require.Len(t, l.reduce.Params, 8)
		assert.Equal(t, int32(4), int32Of(t, l.reduce.Params[6]), "the shares, two to a slice")
		assert.Equal(t, 2, c.sumSlices())
		assert.Equal(t, int32(c.Full*64*c.WGS), int32Of(t, l.reduce.Params[7]))
		assert.Equal(t, sdk.BufferWorkspace, l.reduce.Params[0].Buffer)
		assert.Equal(t, affine.Y, l.reduce.Params[2].Buffer)

	}
}

// The sizes the host allocates and reserves are the kernel's own:
// STAGE_BYTES and SMEM_BYTES of wg.cu for the large-batch variants, and the
// workspace of one stage per token tile and group, a float per padded
// token, then the split-K sums' slices (4096x14336 at 4096 tokens: 16
// tiles of 256, 64 groups; 4096x17920 at 256 tokens: 8 tiles split in 4).
func TestWGMMASizesMatchTheKernel(t *testing.T) {
	assert.Equal(t, 32768, wgWide.stageBytes())   // 4*256*32
	assert.Equal(t, 221184, wgWide.sharedBytes()) // 3*32768 + 3*128*(256+32+32)
	assert.Equal(t, 16384, wgMid.stageBytes())
	assert.Equal(t, 221184, wgMid.sharedBytes()) // 6*16384 + 3*128*320
	assert.Equal(t, 8192, wgNarrow.stageBytes())
	assert.Equal(t, 172032, wgNarrow.sharedBytes()) // 6*8192 + 3*128*320
	req := int4Request(4096, 4096, 14336)
	assert.Equal(t, int64(16*64*32768+4096*4), chooseWG(req, 132).workspaceBytes(req))
	main := chooseWG(req, 132).launches(req).main
	assert.Equal(t, uint32(112*16), main.Grid[0], "112 row blocks of 128 times 16 token tiles")
	assert.Equal(t, uint32(2048), chooseWG(req, 132).launches(req).prep.Grid[0], "4096 tokens, two per block")
	few := int4Request(33, 4096, 4096)
	assert.Equal(t, [3]uint32{32, 1, 1}, chooseWG(few, 132).launches(few).prep.Grid, "one 64-token tile, two per block: 31 padding tokens get zero stages")
	widest := int4Request(256, wgMaxInFeatures, 4096)
	require.True(t, qmmWGMMA{}.Admit(widest, hopper()).Admitted)
	// Two rows of bf16 x plus the kernel's static barrier, block maxima and
	// inverse scales fit the opt-in shared memory of a block.
	assert.LessOrEqual(t, int(chooseWG(widest, 132).launches(widest).prep.SharedBytes)+8+16+8, 232448)
	split := int4Request(256, 4096, 17920)
	c := chooseWG(split, 132)
	require.Equal(t, []int{4, 132}, []int{c.Splits, c.Full})
	require.False(t, c.Cluster)
	assert.Equal(t, int64(64*32768+256*4+2*256*1024*4), c.workspaceBytes(split),
		"stages, sigma, then the fp32 sums of the 1024 split rows for 256 tokens in two slices, a pair of shares each")
	odd := int4Request(256, 4096, 22016)
	c = chooseWG(odd, 132)
	require.Equal(t, []int{3, 132}, []int{c.Splits, c.Full})
	assert.Equal(t, 2, c.sumSlices(), "a pair of shares, then the last share alone")
	assert.Equal(t, int64(64*32768+256*4+2*256*5120*4), c.workspaceBytes(odd), "the 40 split tiles' 5120 rows in two slices")
	shared := int4Request(256, 8192, 25600)
	c = chooseWG(shared, 132)
	require.Equal(t, []int{1, 132, 132}, []int{c.Splits, c.Full, c.StreamK})
	assert.Equal(t, int64(128*32768+256*4+72*4+132*128*256*4), c.workspaceBytes(shared),
		"stages, sigma, 68 tile counters and the ticket (rounded up to 16 bytes), then a partial of 128 floats per consumer thread per stream-K block")
	paired := int4Request(256, 14336, 4096)
	c = chooseWG(paired, 132)
	require.True(t, c.Cluster)
	assert.Equal(t, int64(224*32768+256*4), c.workspaceBytes(paired), "stages and sigma: a cluster keeps its sums on chip")
	assert.Equal(t, 192512, wgWidePairs.sharedBytes()) // 4*32768 + 3*64*320
	// The kernel's two shares and the outgoing one ([BN][ROWS/2 + 4] fp32
	// each) reuse the rings, in pairs and in two-share clusters alike.
	assert.LessOrEqual(t, 3*256*(32+4)*4, wgWidePairs.sharedBytes())
	wideSplit := wgWide
	wideSplit.Splits, wideSplit.Cluster = 2, true
	assert.LessOrEqual(t, 3*256*(64+4)*4, wideSplit.sharedBytes())
}

// TestWGMMAVariantsCompile compiles the Hopper variant for every GPU test
// shape it serves (needs NVRTC 12 or newer, not a GPU).
func TestWGMMAVariantsCompile(t *testing.T) {
	plugintest.CompileVariants(t, wgSource, func(req sdk.Request, sms int) plugintest.Choice {
		hw := hopper()
		hw.Multiprocessors = sms
		if wgAdmit(req, hw) != "" {
			return plugintest.Choice{}
		}
		c := chooseWG(req, sms)
		main := c.launches(req).main
		return plugintest.Choice{OK: true, Source: &wgSource, Variant: c.variant(), Grid: main.Grid, Block: main.Block, SharedBytes: main.SharedBytes}
	})
}

// xprep runs 256-thread blocks at up to 256 tokens and 4096 to 8192
// input features, 128-thread ones elsewhere; at 8 bits alike.
func TestChooseWGWidensThePreparationWhereXIsMidSized(t *testing.T) {
	for _, c := range []struct {
		tokens, in int
		want       bool
	}{
		{33, 4096, true}, {256, 4096, true}, {256, 8192, true}, {64, 5120, true},
		{257, 4096, false}, {4096, 4096, false}, {256, 8320, false}, {64, 14336, false}, {128, 28672, false},
		{64, 1152, false}, {256, 2048, false}, {256, 3968, false},
	} {
		want := map[bool]int{true: 256, false: 128}[c.want]
		req := int4Request(c.tokens, c.in, 4096)
		assert.Equal(t, want, chooseWG(req, 132).XPrepThreads, "%d tokens, %d in", c.tokens, c.in)
		req.Weight.Bits = 8
		assert.Equal(t, want, chooseWG(req, 132).XPrepThreads, "8 bits, %d tokens, %d in", c.tokens, c.in)
	}
	req := int4Request(64, 4096, 4096)
	assert.Contains(t, qmmWGMMA{}.Admit(req, hopper()).Reason, "xprep=256", "admission names the preparation's block")
	// A config that does not set the block launches the kernel's own
	// default, and leaves its macro alone.
	assert.Equal(t, [3]uint32{wgXPrepThreads, 1, 1}, wgWide.launches(req).prep.Block)
	assert.NotContains(t, wgWide.variant().Defines, "XPREP_THREADS")
	assert.Contains(t, wgCode, fmt.Sprintf("#define XPREP_THREADS %d ", wgXPrepThreads), "the plan's default block is the kernel's")
}

// Every stream-K plan is one wg.cu accepts (it traps on any other): splits
// 1 outside a cluster, a single token tile, whole waves first, at least
// one block per shared tile (so a run spans at most part of two tiles), at
// most one per weight stage (so no run is empty), 32-bit run arithmetic,
// and a workspace under the admission limit.
func TestStreamKPlansAreOnesTheKernelRuns(t *testing.T) {
	planned := 0
	for _, sms := range []int{132, 114, 78, 16} {
		for _, bits := range []int{4, 8} {
			for _, tokens := range []int{129, 200, 256} {
				for _, in := range []int{128, 1024, 4096, 8192, 28672, 57344} {
					for out := 8; out <= 40000; out = (out*3/2 + 8) &^ 7 {
						req := plugintest.AffineRequest(tokens, in, out, bits, 64, false)
						hw := hopper()
						hw.Multiprocessors = sms
						if wgAdmit(req, hw) != "" {
							continue
						}
						c := chooseWG(req, sms)
						if c.StreamK == 0 {
							continue
						}
						planned++
						key := fmt.Sprintf("%s on %d SMs", req.Key(), sms)
						ag := 8
						if bits == 8 {
							ag = 4
						}
						shared, units := c.sharedTiles(req), c.sharedTiles(req)*ceilDiv(in/64, ag)
						assert.Equal(t, 1, c.Splits, key)
						assert.False(t, c.Cluster, key)
						assert.Equal(t, 1, c.tiles(req), key)
						assert.Zero(t, c.Full%sms, "whole waves first, %s", key)
						assert.GreaterOrEqual(t, c.StreamK, shared, key)
						assert.LessOrEqual(t, c.StreamK, units, key)
						assert.Less(t, int64(units)*int64(c.StreamK), int64(1)<<31, key)
						assert.LessOrEqual(t, c.workspaceBytes(req), int64(wgMaxWorkspace), key)
						assert.Equal(t, uint32(c.Full+c.StreamK), c.launches(req).main.Grid[0], key)
					}
				}
			}
		}
	}
	t.Logf("%d stream-K plans checked", planned)
	assert.Greater(t, planned, 20, "the sweep reaches stream-K plans")
}

// TestWGRuleMatchesTheHarness: scripts/harness_rule.py wg, by which the GPU
// harness (scripts/affine_kernels.py) checks and times "the plugin's
// variant", picks the variant chooseWG picks and plans its launches as
// the plugin does (the shares, whole tiles and stream-K blocks, the main
// grid, the reduce launch's grid, the shared memory and the workspace's
// bytes), over SM counts,
// token counts, input and output sizes, every width and group size. Skipped where
// python3 is not installed.
func TestWGRuleMatchesTheHarness(t *testing.T) {
	seen := map[string]bool{}
	cases := harnessrule.Sweep([]int{132, 114, 78, 16}, []int{17, 33, 64, 65, 100, 128, 129, 136, 150, 200, 256, 257, 300, 1000, 4096},
		[]int{2, 3, 4, 5, 6, 8}, []int{32, 64, 128}, []int{128, 640, 1024, 2880, 3584, 3712, 4096, 5760, 8192, 14336, 28672, 57344},
		[]int{8, 136, 1032, 4096, 14336, 17416, 18944, 22016, 28032, 28160, 28672, 128256}, func(c harnessrule.Case) bool {
			hw := hopper()
			hw.Multiprocessors = c.SMs
			return wgAdmit(c.Req, hw) == ""
		})
	harnessrule.Compare(t, "wg", cases, func(hc harnessrule.Case) any {
		req := hc.Req
		c := chooseWG(req, hc.SMs)
		aw := 3
		if v, ok := c.variant().Defines["AW"]; ok {
			aw = v
		}
		cluster := 0
		switch {
		case c.StreamK > 0:
			seen["stream-K"] = true
		case c.Cluster:
			cluster = c.Splits
			seen["cluster"] = true
		case c.Splits > 1:
			seen[fmt.Sprintf("split tail in %d", c.Splits)] = true
		case req.Tokens > wgMid.BN && req.Tokens <= c.BN:
			// a single token tile past whole waves, its last wave whole
			// because it is at least two thirds full (not a tail too
			// short to split, which also runs whole)
			if rows := ceilDiv(req.OutFeatures, 64*c.WGS); rows > hc.SMs && 3*(rows%hc.SMs) >= wgWholeTailThirds*hc.SMs {
				seen["whole last wave"] = true
			}
		}
		reduce := uint32(0)
		if l := c.launches(req); l.reduce != nil {
			reduce = l.reduce.Grid[0]
		}
		oddK := 0
		if c.OddK {
			oddK = 1
			seen["ODDK"] = true
		}
		return map[string]any{"AST": c.AST, "AW": aw, "BITS": c.Bits, "QGROUP": c.Group, "ODDK": oddK, "BN": c.BN, "FSETS": c.FSets,
			"STAGES": c.Stages, "WGS": c.WGS, "XPREP_THREADS": c.xprepThreads(), "band": c.Band, "cluster": cluster,
			"full": c.Full, "grid": c.mainBlocks(req), "reduce": reduce, "sk": c.StreamK, "splits": c.Splits,
			"workspace": c.workspaceBytes(req), "smem": c.sharedBytes()}
	})
	for _, k := range []string{"stream-K", "cluster", "split tail in 2", "split tail in 3", "split tail in 4", "whole last wave", "ODDK"} {
		assert.True(t, seen[k], "the sweep reaches a %s", k)
	}
}
