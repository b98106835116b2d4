package affinegpu

import (
	"maps"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/kcand/kcand/internal/harnessrule"
	"github.com/kcand/kcand/sdk"
	"github.com/kcand/kcand/sdk/plugintest"
)

// The Go rule picks what scripts/affine_kernels.py's bulk_config picks for
// 132 SMs, and the same shared memory: the variants the harness checks on
// the H200 (and times at the benchmark shapes) are the ones the plugin
// runs. The expected values were printed by the harness's bulk_config and
// bulk_smem_bytes (stages in two parts where blocks take several tiles or
// tiles have 64 rows, but not in 16- and 32-row tiles with fp16 operands;
// with those, 32-row tiles where they make the busiest block take up to a
// third more m-tiles; 64-row tiles only at 4 bits with groups of at most
// 64, and only where eight warps' stages fit; two warps per stage where
// stages come in one part; larger stages where the segment's groups do not
// divide the row's and blocks take several tiles). Earlier sessions
// compared the two rules by scratch scripts (up to 49,728 requests);
// TestBulkRuleMatchesTheHarnessSweep below runs the harness's rule on
// about 10,000 requests on every go test. Above 8 tokens at 8 bits the
// harness builds the kernel unsliced (to test it) where the Go rule
// refuses.
func TestBulkRuleMatchesTheHarness(t *testing.T) {
	a := plugintest.AffineRequest
	tests := []struct {
		req    sdk.Request
		want   BulkConfig
		shared int
	}{
		{a(1, 4096, 4096, 4, 64, false), BulkConfig{Bits: 4, Group: 64, MT: 2, CW: 8, WK: 2, U: 16, NS: 8, XT: 1, FP16: true, Parts: 1, DP2A: true, Unroll: 8}, 170160},
		{a(1, 4096, 14336, 4, 64, false), BulkConfig{Bits: 4, Group: 64, MT: 2, CW: 8, WK: 2, U: 16, NS: 8, XT: 1, FP16: true, Parts: 1, XHold: 4, DP2A: true, Unroll: 8}, 170160},
		// one token from 8192 to 16384 inputs: fp16 operands (and DP2A)
		// where 32-row tiles keep a ring of 8 stages of 8 warps, x's loads
		// in one round (not 13824->5120 below, whose fp16 ring would keep
		// four warps, nor past 16384 inputs, 28672->8192 below)
		{a(1, 14336, 4096, 4, 64, false), BulkConfig{Bits: 4, Group: 64, MT: 2, CW: 8, WK: 2, U: 16, NS: 8, XT: 1, FP16: true, Parts: 1, DP2A: true, Unroll: 8, XLoads: 4}, 203440},
		{a(1, 8192, 28672, 4, 64, false), BulkConfig{Bits: 4, Group: 64, MT: 2, CW: 8, WK: 2, U: 16, NS: 8, XT: 1, FP16: true, Parts: 1, DP2A: true, Unroll: 8, XLoads: 2}, 183472},
		{a(1, 28672, 8192, 4, 64, false), BulkConfig{Bits: 4, Group: 64, MT: 4, CW: 8, WK: 1, U: 8, NS: 8, XT: 1, Parts: 2}, 197920},
		{a(1, 8192, 8192, 4, 64, false), BulkConfig{Bits: 4, Group: 64, MT: 4, CW: 8, WK: 1, U: 8, NS: 8, XT: 1, FP16: true, Parts: 2, XHold: 4, DP2A: true, XLoads: 2}, 208176},
		{a(1, 8192, 8192, 8, 64, false), BulkConfig{Bits: 8, Group: 64, MT: 2, CW: 8, WK: 1, U: 8, NS: 8, XT: 1, Parts: 2}, 173344},
		{a(1, 16384, 16384, 4, 32, false), BulkConfig{Bits: 4, Group: 32, MT: 2, CW: 8, WK: 2, U: 32, NS: 8, XT: 1, FP16: true, Parts: 1, DP2A: true, Unroll: 8, XLoads: 8}, 230576},
		// x ahead of half the ring (XHold) only at one token with fp16, a
		// ring of 8 and blocks of 5 to 24 stages: 4096->14336 and 8192x8192
		// above take it, 4096x4096 (4 stages) and 8192->28672 (56) above
		// and 3584->18944 (a ring of 16) below do not, nor 4 tokens, nor
		// 14336->4096 above (past 8192 inputs)
		{a(1, 4096, 6144, 4, 64, false), BulkConfig{Bits: 4, Group: 64, MT: 2, CW: 8, WK: 2, U: 16, NS: 8, XT: 1, FP16: true, Parts: 1, XHold: 4, DP2A: true, Unroll: 8}, 170160},
		{a(4, 4096, 14336, 4, 64, false), BulkConfig{Bits: 4, Group: 64, MT: 2, CW: 8, WK: 2, U: 16, NS: 8, XT: 4, FP16: true, Parts: 1}, 193760},
		// within 1 KiB of the shared memory (the hold's static mbarrier may
		// push the dynamic part up by that much): no hold; and no room for
		// DP2A's int8 residuals of x: the mma
		{a(1, 7168, 8192, 4, 32, false), BulkConfig{Bits: 4, Group: 32, MT: 4, CW: 8, WK: 1, U: 16, NS: 8, XT: 1, FP16: true, Parts: 2, XLoads: 2}, 232240},
		// 64-row tiles would leave room for four warps only: 32-row tiles
		{a(1, 8192, 8192, 4, 32, false), BulkConfig{Bits: 4, Group: 32, MT: 2, CW: 8, WK: 2, U: 32, NS: 8, XT: 1, FP16: true, Parts: 1, XHold: 4, DP2A: true, Unroll: 8, XLoads: 4}, 201904},
		{a(1, 1024, 8192, 4, 64, true), BulkConfig{Bits: 4, Group: 64, MT: 4, CW: 8, WK: 1, U: 8, NS: 8, XT: 1, FP16: true, Parts: 2, DP2A: true}, 184880},
		{a(1, 8192, 8192, 4, 128, false), BulkConfig{Bits: 4, Group: 128, MT: 2, CW: 8, WK: 2, U: 8, NS: 8, XT: 1, FP16: true, Parts: 1, XHold: 4, DP2A: true}, 174256},
		{a(1, 4096, 4096, 8, 32, false), BulkConfig{Bits: 8, Group: 32, MT: 2, CW: 8, WK: 2, U: 16, NS: 8, XT: 1, Parts: 1}, 173216},
		{a(1, 4096, 4096, 8, 128, false), BulkConfig{Bits: 8, Group: 128, MT: 2, CW: 4, WK: 2, U: 8, NS: 4, XT: 1, Parts: 1}, 150608},
		// groups that want (16 or 32) does not divide: 24 groups per
		// stage where blocks take several 16- or 32-row tiles, four warps'
		// stages still fit and the busiest block takes four stages, else
		// want/2
		{a(1, 13824, 5120, 4, 64, false), BulkConfig{Bits: 4, Group: 64, MT: 1, CW: 8, WK: 1, U: 24, NS: 8, XT: 1, Parts: 2}, 161056},
		{a(1, 3584, 18944, 4, 64, false), BulkConfig{Bits: 4, Group: 64, MT: 2, CW: 8, WK: 2, U: 8, NS: 16, XT: 1, FP16: true, Parts: 1, DP2A: true}, 176848},
		{a(1, 3584, 4096, 4, 64, false), BulkConfig{Bits: 4, Group: 64, MT: 2, CW: 8, WK: 2, U: 8, NS: 16, XT: 1, FP16: true, Parts: 1, DP2A: true}, 176848},
		{a(1, 2304, 4240, 8, 32, false), BulkConfig{Bits: 8, Group: 32, MT: 1, CW: 8, WK: 1, U: 24, NS: 8, XT: 1, Parts: 2}, 144672},
		// 48 groups (the whole row) would give each block three stages: 16
		{a(1, 1536, 4240, 4, 32, false), BulkConfig{Bits: 4, Group: 32, MT: 2, CW: 8, WK: 2, U: 16, NS: 16, XT: 1, FP16: true, Parts: 1, DP2A: true, Unroll: 8}, 186960},
		// several tiles per block, but 56 groups would leave two warps: 8
		{a(1, 3584, 28672, 4, 64, false), BulkConfig{Bits: 4, Group: 64, MT: 2, CW: 8, WK: 2, U: 8, NS: 16, XT: 1, FP16: true, Parts: 1, DP2A: true}, 176848},
		// 64-row tiles keep half of want and one warp per stage
		{a(1, 2304, 16896, 4, 32, false), BulkConfig{Bits: 4, Group: 32, MT: 4, CW: 8, WK: 1, U: 8, NS: 16, XT: 1, FP16: true, Parts: 1, DP2A: true, XLoads: 2}, 206032},
		// one tile per block: half of want, as before
		{a(1, 1536, 1032, 4, 32, false), BulkConfig{Bits: 4, Group: 32, MT: 1, CW: 8, WK: 2, U: 16, NS: 16, XT: 1, FP16: true, Parts: 1, DP2A: true, Unroll: 8}, 96848},
		{a(1, 4608, 4096, 4, 32, false), BulkConfig{Bits: 4, Group: 32, MT: 2, CW: 8, WK: 2, U: 16, NS: 16, XT: 1, FP16: true, Parts: 1, DP2A: true, Unroll: 8, XLoads: 3}, 197712},
		{a(1, 18944, 3584, 4, 64, false), BulkConfig{Bits: 4, Group: 64, MT: 2, CW: 8, WK: 2, U: 8, NS: 16, XT: 1, Parts: 1}, 197952},
		// 32-row tiles that give the busiest block more m-tiles than
		// 16-row ones are taken only with fp16 operands (4096->14336 q4
		// above), and only up to a third more: without fp16 (8 bits, or
		// more than 8192 inputs) 16-row tiles in two parts; at 2048
		// outputs (twice the m-tiles) 16-row tiles
		{a(1, 4096, 14336, 8, 64, false), BulkConfig{Bits: 8, Group: 64, MT: 1, CW: 8, WK: 1, U: 8, NS: 16, XT: 1, Parts: 2}, 190016},
		{a(1, 10240, 14336, 4, 64, false), BulkConfig{Bits: 4, Group: 64, MT: 2, CW: 8, WK: 2, U: 16, NS: 8, XT: 1, FP16: true, Parts: 1, DP2A: true, Unroll: 8, XLoads: 3}, 190128},
		{a(1, 4096, 2048, 4, 64, false), BulkConfig{Bits: 4, Group: 64, MT: 1, CW: 8, WK: 2, U: 16, NS: 16, XT: 1, FP16: true, Parts: 1, DP2A: true, Unroll: 8}, 170320},
		// above 8 tokens (4 bits): K slices whose fp16 x is at most 64 KiB,
		// leaving the fewest SMs idle and then the most slices; 512-byte
		// row pieces (x is resident, not staged); no 64-row tiles
		{a(16, 4096, 4096, 4, 64, false), BulkConfig{Bits: 4, Group: 64, MT: 2, CW: 8, WK: 2, U: 16, NS: 8, XT: 16, FP16: true, Parts: 1, KS: 4}, 185760},
		{a(16, 4096, 14336, 4, 64, false), BulkConfig{Bits: 4, Group: 64, MT: 2, CW: 8, WK: 2, U: 16, NS: 8, XT: 16, FP16: true, Parts: 1, KS: 4}, 185760},
		{a(16, 14336, 4096, 4, 64, false), BulkConfig{Bits: 4, Group: 64, MT: 2, CW: 8, WK: 2, U: 16, NS: 8, XT: 16, FP16: true, Parts: 1, KS: 14}, 185760},
		{a(16, 8192, 28672, 4, 64, false), BulkConfig{Bits: 4, Group: 64, MT: 2, CW: 8, WK: 2, U: 16, NS: 8, XT: 16, FP16: true, Parts: 1, KS: 4}, 222624},
		{a(16, 28672, 8192, 4, 64, false), BulkConfig{Bits: 4, Group: 64, MT: 2, CW: 8, WK: 2, U: 16, NS: 8, XT: 16, FP16: true, Parts: 1, KS: 14}, 222624},
		{a(9, 4096, 4104, 4, 32, false), BulkConfig{Bits: 4, Group: 32, MT: 2, CW: 8, WK: 2, U: 32, NS: 8, XT: 9, FP16: true, Parts: 1, KS: 4}, 188208},
		{a(12, 5120, 13824, 4, 128, false), BulkConfig{Bits: 4, Group: 128, MT: 2, CW: 8, WK: 2, U: 8, NS: 8, XT: 12, FP16: true, Parts: 1, KS: 5}, 166752},
		{a(16, 1024, 3072, 4, 64, false), BulkConfig{Bits: 4, Group: 64, MT: 2, CW: 8, WK: 2, U: 8, NS: 16, XT: 16, FP16: true, Parts: 1, KS: 2}, 167488},
		{a(16, 4096, 4096, 4, 128, false), BulkConfig{Bits: 4, Group: 128, MT: 2, CW: 8, WK: 2, U: 8, NS: 8, XT: 16, FP16: true, Parts: 1, KS: 4}, 175520},
		{a(13, 8192, 1000, 4, 64, false), BulkConfig{Bits: 4, Group: 64, MT: 2, CW: 8, WK: 2, U: 16, NS: 8, XT: 13, FP16: true, Parts: 1, KS: 4}, 208752},
		{a(16, 2048, 8192, 4, 32, false), BulkConfig{Bits: 4, Group: 32, MT: 2, CW: 8, WK: 2, U: 16, NS: 16, XT: 16, FP16: true, Parts: 1, KS: 4}, 185920},
	}
	for _, tt := range tests {
		t.Run(tt.req.Key(), func(t *testing.T) {
			got, why := ChooseBulk(tt.req, 132, bulkMaxShared)
			assert.Empty(t, why)
			assert.Equal(t, tt.want, got)
			assert.Equal(t, tt.shared, got.sharedBytes(tt.req.InFeatures))
		})
	}
}

// The tensor maps the plan carries pass the driver's rules and cover
// exactly the weight buffers, so the host accepts them for every shape the
// candidate admits.
func TestBulkTensorMapsCoverTheWeights(t *testing.T) {
	a := plugintest.AffineRequest
	for _, req := range []sdk.Request{a(1, 4096, 4096, 4, 64, false), a(1, 28672, 8192, 4, 64, true), a(1, 4096, 14336, 8, 128, false), a(1, 1024, 4104, 4, 128, false)} {
		cfg, why := ChooseBulk(req, 132, bulkMaxShared)
		if !assert.Empty(t, why, req.Key()) {
			continue
		}
		weights, scales, biases := cfg.tensorMaps(req)
		for name, m := range map[string]struct {
			desc interface {
				Check(string) error
				Extent() int64
			}
			bytes int64
		}{
			"weight": {weights, int64(req.OutFeatures * req.InFeatures * req.Weight.Bits / 8)},
			"scales": {scales, int64(req.OutFeatures * req.InFeatures / req.Weight.GroupSize * 2)},
			"biases": {biases, int64(req.OutFeatures * req.InFeatures / req.Weight.GroupSize * 2)},
		} {
			assert.NoError(t, m.desc.Check(name), req.Key())
			assert.Equal(t, m.bytes, m.desc.Extent(), "%s %s", req.Key(), name)
		}
	}
}

// One token with fp16 operands compiles the integer path (DP2A) and, where
// a warp's run is a multiple of 8 groups, unrolls 8 groups; more tokens
// keep the mma and the kernel's unroll.
func TestBulkDefinesNameTheIntegerPathAtOneToken(t *testing.T) {
	a := plugintest.AffineRequest
	one, why := ChooseBulk(a(1, 4096, 14336, 4, 64, false), 132, bulkMaxShared)
	assert.Empty(t, why)
	assert.Equal(t, 1, one.Defines()["DP2A"])
	assert.Equal(t, 8, one.Defines()["UNR"])
	assert.Contains(t, one.Describe(), "dp2a")

	down, why := ChooseBulk(a(1, 14336, 4096, 4, 64, false), 132, bulkMaxShared)
	assert.Empty(t, why)
	assert.Equal(t, 1, down.Defines()["DP2A"], "up to 16384 inputs at one token")
	assert.Equal(t, 4, down.Defines()["XCB"], "896 quarter groups of x on 256 threads: four each, in one round")
	assert.NotContains(t, down.Defines(), "XHOLD", "past 8192 inputs the producer does not wait for x")

	mid, why := ChooseBulk(a(1, 4096, 4096, 8, 64, false), 132, bulkMaxShared)
	assert.Empty(t, why)
	assert.NotContains(t, mid.Defines(), "XCB", "8 bits: bf16 x staged, nothing converted")

	wide, why := ChooseBulk(a(1, 8192, 8192, 4, 64, false), 132, bulkMaxShared)
	assert.Empty(t, why)
	assert.Equal(t, 1, wide.Defines()["DP2A"], "64-row tiles take the integer path too")
	assert.NotContains(t, wide.Defines(), "UNR", "runs of 4 groups keep the kernel's unroll")

	for _, req := range []sdk.Request{a(4, 4096, 14336, 4, 64, false), a(1, 28672, 8192, 4, 64, false), a(1, 4096, 4096, 8, 64, false)} {
		cfg, why := ChooseBulk(req, 132, bulkMaxShared)
		assert.Empty(t, why, req.Key())
		assert.NotContains(t, cfg.Defines(), "DP2A", "%s: more tokens, bf16 x or 8 bits keep the mma", req.Key())
		assert.NotContains(t, cfg.Defines(), "UNR", req.Key())
	}
}

// TestBulkRuleMatchesTheHarnessSweep: scripts/harness_rule.py bulk (the
// harness's bulk_config and bulk_smem_bytes) picks the macros and shared memory
// ChooseBulk picks, and refuses what it refuses (but for 8 bits above 8
// tokens, which the harness builds unsliced to test the kernel), over SM counts,
// token counts, widths, group sizes and sizes (the sweeps earlier sessions
// ran as scratch scripts, now run by every go test). Skipped where python3
// is not installed.
func TestBulkRuleMatchesTheHarnessSweep(t *testing.T) {
	slices := 0
	cases := harnessrule.Sweep([]int{132, 114, 78}, []int{1, 3, 4, 8, 9, 16}, []int{4, 8}, []int{32, 64, 128},
		[]int{512, 1152, 2048, 2304, 3584, 4096, 5120, 8192, 13824, 14336, 16384, 28672},
		[]int{8, 136, 1032, 2112, 4096, 4224, 5120, 8192, 13824, 14336, 18944, 28672},
		func(c harnessrule.Case) bool {
			cfg, why := ChooseBulk(c.Req, c.SMs, bulkMaxShared)
			if why == "" && cfg.KS > 1 {
				slices++
			}
			return why == "" || c.Req.Weight.Bits != 8 || c.Req.Tokens <= BulkSplitTokens
		})
	refused := 0
	harnessrule.Compare(t, "bulk", cases, func(c harnessrule.Case) any {
		cfg, why := ChooseBulk(c.Req, c.SMs, bulkMaxShared)
		if why != "" {
			refused++
			return nil
		}
		want := map[string]int{"smem": cfg.sharedBytes(c.Req.InFeatures)}
		maps.Copy(want, cfg.Defines())
		if cfg.KS > 1 {
			want["_KS"] = cfg.KS
		}
		return want
	})
	t.Logf("%d requests compared, %d of them in K slices, %d refused", len(cases), slices, refused)
	assert.Positive(t, slices, "the sweep reaches K slices")
	assert.Positive(t, refused, "and requests the kernel refuses")
}
