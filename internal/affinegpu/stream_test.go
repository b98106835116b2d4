package affinegpu

import (
	"maps"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kcand/kcand/internal/harnessrule"
	"github.com/kcand/kcand/sdk"
	"github.com/kcand/kcand/sdk/plugintest"
)

func streamRequest(tokens, in, out, bits, group int) sdk.Request {
	return sdk.Request{Family: sdk.FamilyAffine, Tokens: tokens, InFeatures: in, OutFeatures: out,
		Weight: sdk.Format{Kind: "affine", Bits: bits, GroupSize: group}, Activation: sdk.BF16}
}

func TestChooseStreamSaysWhyItDoesNotServe(t *testing.T) {
	for _, c := range []struct {
		req  sdk.Request
		want string
	}{
		// 3 bits: 3 groups of 12 bytes, a row of 36: no step of whole
		// 16-byte pieces divides them, and the row is not whole pieces
		// for a last step of fewer groups.
		{streamRequest(1, 96, 64, 3, 32), "in_features/group_size=3"},
		{streamRequest(33, 4096, 4096, 4, 64), "1 to 32 tokens, not 33"},
		// gpt-oss's 2880 inputs at 3 and 5 bits: 45 groups of 24 and 40
		// bytes, rows of 1080 and 1800.
		{streamRequest(1, 2880, 2880, 3, 64), "in_features/group_size=45"},
		{streamRequest(9, 2880, 2880, 5, 64), "in_features/group_size=45"},
	} {
		_, why := ChooseStream(c.req, 132)
		assert.Contains(t, why, c.want, c.req.Key())
	}
}

// Where no step divides a row's groups (gpt-oss's 2880 inputs: 45 groups
// of 64), the rule's step with a last step of fewer groups (TAIL), at the
// widths whose rows and last steps are whole 16-byte pieces; the scales'
// windows take 4 bytes more a row, rounded up to 16. Shapes that a step
// divides keep their cache keys.
func TestChooseStreamTakesALastStepOfFewerGroups(t *testing.T) {
	for _, c := range []struct {
		req     sdk.Request
		u, tail int
	}{
		{streamRequest(1, 2880, 5120, 4, 64), 4, 1},
		{streamRequest(16, 2880, 2880, 4, 64), 4, 1},
		{streamRequest(4, 2880, 4096, 4, 32), 8, 2},
		{streamRequest(1, 2880, 4096, 8, 64), 2, 1},
		{streamRequest(32, 2880, 4096, 6, 64), 2, 1},
		{streamRequest(1, 2880, 4096, 2, 64), 4, 1},
		{streamRequest(3, 1152, 1032, 4, 128), 2, 1},
	} {
		cfg, why := ChooseStream(c.req, 132)
		require.Empty(t, why, c.req.Key())
		assert.Equal(t, []int{c.u, c.tail}, []int{cfg.U, cfg.Tail}, c.req.Key())
		assert.Equal(t, c.tail, cfg.Defines()["TAIL"], c.req.Key())
		whole := cfg
		whole.Tail = 0
		sstride := max(16, 2*cfg.U)
		window := (2*cfg.U + 4 + 15) / 16 * 16
		assert.Equal(t, cfg.KW*cfg.D*2*16*cfg.MT*(window-sstride), cfg.SharedBytes()-whole.SharedBytes(), c.req.Key())
	}
	for _, req := range []sdk.Request{streamRequest(1, 4096, 4096, 4, 64), streamRequest(16, 2048, 4096, 6, 64)} {
		cfg, why := ChooseStream(req, 132)
		require.Empty(t, why, req.Key())
		assert.Zero(t, cfg.Tail, req.Key())
		assert.NotContains(t, cfg.Defines(), "TAIL", "%s keeps its cache key", req.Key())
	}
}

func TestChooseStreamFollowsTheMeasuredRule(t *testing.T) {
	// The H200 sweeps (bench/NOTES.md): two row tiles per warp (one above 8
	// tokens where that takes more SMs or evens out 1-1.5 blocks per SM,
	// and with few rows at decode over long rows or in 8-token tiles in
	// groups of 128); 4 warps per block, 8 when the grid is small, at least
	// two steps per warp unless every block is resident at once or the
	// grid takes MINB; 128-byte steps; at decode, registers for 16 warps
	// per SM once there is more than one block per SM, else (streamRing)
	// x through the ring after the first steps' weights, three slots and
	// one block an SM, but not at 2-8 tokens and 4 bits over rows of at
	// most 4096 inputs (x read from memory pays more there); 9-16 tokens at
	// 4 bits as two 8-token tiles of the decode rule's blocks where they
	// are all resident at once, reading x from memory.
	for _, c := range []struct {
		req                                sdk.Request
		mt, nt, kw, u, d, minb, xt, blocks int
	}{
		{streamRequest(1, 4096, 14336, 4, 64), 2, 1, 4, 4, 2, 4, 0, 448},
		{streamRequest(1, 14336, 4096, 4, 64), 2, 1, 8, 4, 3, 1, 1, 128},
		{streamRequest(1, 28672, 8192, 4, 64), 2, 1, 8, 4, 2, 2, 0, 256},
		{streamRequest(1, 4096, 14336, 4, 32), 2, 1, 4, 8, 2, 1, 0, 448},
		{streamRequest(16, 8192, 28672, 4, 64), 2, 2, 4, 4, 2, 1, 0, 896},
		{streamRequest(16, 28672, 8192, 4, 64), 2, 2, 4, 4, 2, 1, 0, 256},
		{streamRequest(16, 14336, 4096, 4, 64), 2, 2, 8, 4, 2, 1, 0, 128},
		{streamRequest(32, 28672, 8192, 4, 64), 2, 4, 4, 4, 2, 1, 0, 256},
		{streamRequest(32, 4096, 4096, 4, 64), 2, 4, 8, 4, 2, 1, 0, 128},
		{streamRequest(4, 4096, 4096, 8, 64), 2, 1, 8, 2, 3, 1, 4, 128},
		{streamRequest(1, 4096, 4096, 4, 32), 2, 1, 8, 8, 2, 1, 1, 128},
		{streamRequest(4, 4096, 4096, 4, 64), 2, 1, 8, 4, 2, 1, 0, 128},
		{streamRequest(4, 4096, 4096, 4, 128), 2, 1, 8, 2, 2, 1, 0, 128},
		{streamRequest(4, 14336, 4096, 4, 128), 2, 1, 8, 2, 3, 1, 4, 128},
		// One step a warp where every block is resident at once: 12 steps
		// (45 groups of 64, the last of one) over 8 warps with MINB 2;
		// 2048^2's 8 steps over 8 warps of 64 blocks.
		{streamRequest(1, 2880, 5120, 4, 64), 2, 1, 8, 4, 2, 2, 0, 160},
		{streamRequest(8, 2048, 2048, 4, 64), 2, 1, 8, 4, 2, 1, 0, 64},
		// One row tile above 8 tokens: more SMs (14336->2048, 8192->2048),
		// or 160 blocks of two evened out as 320 of one (2880->5120); not at
		// 256 blocks (2048->8192), two per SM either way.
		{streamRequest(16, 14336, 2048, 4, 64), 1, 2, 8, 4, 2, 1, 0, 128},
		{streamRequest(32, 8192, 2048, 4, 64), 1, 4, 8, 4, 2, 1, 0, 128},
		{streamRequest(16, 2880, 5120, 4, 64), 1, 2, 4, 4, 2, 1, 0, 320},
		{streamRequest(16, 2048, 8192, 4, 64), 2, 2, 4, 4, 2, 1, 0, 256},
		// not at 17-32 tokens once the SMs are all taken
		{streamRequest(32, 2880, 5120, 4, 64), 2, 4, 4, 4, 2, 1, 0, 160},
		{streamRequest(16, 2048, 2048, 6, 64), 1, 2, 8, 2, 2, 1, 0, 128},
		// 9-16 tokens at 4 bits as two 8-token tiles where every block is
		// resident at once, reading x from memory: 2048^2's 64 row tiles,
		// 4096^2's 128 with MINB 2, 8192->2048's 64 (which at 8 tokens
		// take three slots, where x does not fit beside them); not
		// 14336->2048 nor 14336->4096 (longer rows, above).
		{streamRequest(16, 2048, 2048, 4, 64), 2, 1, 8, 4, 2, 1, 0, 128},
		{streamRequest(11, 4096, 4096, 4, 64), 2, 1, 8, 4, 2, 2, 0, 256},
		{streamRequest(16, 8192, 2048, 4, 64), 2, 1, 8, 4, 2, 1, 0, 128},
		{streamRequest(8, 8192, 2048, 4, 64), 2, 1, 8, 4, 3, 1, 0, 64},
		// At decode over long rows, one row tile where that leaves at most
		// half the SMs a block (8192->1024's 64), x in the ring.
		{streamRequest(1, 8192, 1024, 4, 64), 1, 1, 8, 4, 3, 1, 1, 64},
		{streamRequest(4, 14336, 1024, 4, 128), 1, 1, 8, 2, 3, 1, 4, 64},
		{streamRequest(1, 8192, 1024, 4, 32), 1, 1, 8, 8, 3, 1, 1, 64}, // groups of 32 too
		// In groups of 128, one row tile where that leaves fewer than two
		// blocks a SM (8192->1024's 128, 8192->2048's 256 with MINB 2), not
		// at two (7168->2112: 132 blocks of two row tiles, not 264 of one);
		// 4096^2 keeps two (256 blocks of two).
		{streamRequest(12, 8192, 1024, 4, 128), 1, 1, 8, 2, 2, 1, 0, 128},
		{streamRequest(16, 8192, 2048, 4, 128), 1, 1, 8, 2, 2, 2, 0, 256},
		{streamRequest(16, 7168, 2112, 4, 128), 2, 1, 8, 2, 2, 1, 0, 132},
		{streamRequest(16, 4096, 4096, 4, 128), 2, 1, 8, 2, 2, 2, 0, 256},
		// 9-16 tokens in 4-bit groups of 32 over at least 2048 inputs: one
		// 16-token tile of three slots, x in the ring: two row tiles and
		// four warps where that takes at most a block per SM (18944->3584's
		// 112, 14336->4096's 128) and at least a quarter of the SMs, above
		// 12 tokens more than half (8192->2048's 64 at 12 tokens, not at
		// 16); with fewer rows the rule's one row tile and 8 warps, at 9-12
		// tokens and at least 512 outputs (14336->1024, 4096->512; not at 16
		// tokens, nor 256 outputs); not over shorter rows, nor at 17 tokens.
		{streamRequest(9, 18944, 3584, 4, 32), 2, 2, 4, 8, 3, 1, 9, 112},
		{streamRequest(16, 14336, 4096, 4, 32), 2, 2, 4, 8, 3, 1, 16, 128},
		{streamRequest(12, 8192, 2048, 4, 32), 2, 2, 4, 8, 3, 1, 12, 64},
		{streamRequest(16, 8192, 2048, 4, 32), 1, 2, 8, 8, 2, 1, 0, 128},
		{streamRequest(12, 14336, 1024, 4, 32), 1, 2, 8, 8, 3, 1, 12, 64},
		{streamRequest(9, 4096, 512, 4, 32), 1, 2, 8, 8, 3, 1, 9, 32},
		{streamRequest(16, 14336, 1024, 4, 32), 1, 2, 8, 8, 2, 1, 0, 64},
		{streamRequest(12, 4096, 256, 4, 32), 1, 2, 8, 8, 2, 1, 0, 16},
		{streamRequest(12, 1024, 4096, 4, 32), 2, 2, 4, 8, 2, 1, 0, 128},
		{streamRequest(17, 14336, 4096, 4, 32), 2, 4, 8, 8, 2, 1, 0, 128},
		// The other widths: the fewest groups a step that make 64 bytes,
		// no MINB, and one row tile per warp at decode where two would
		// leave at most a block per SM.
		{streamRequest(1, 4096, 14336, 6, 64), 2, 1, 4, 2, 2, 1, 0, 448},
		{streamRequest(1, 14336, 4096, 3, 64), 1, 1, 8, 4, 2, 1, 0, 256},
		{streamRequest(16, 8192, 28672, 5, 64), 2, 2, 4, 2, 2, 1, 0, 896},
		{streamRequest(4, 4096, 4096, 2, 32), 1, 1, 8, 8, 2, 1, 0, 256},
		// Without MINB, 256 blocks of 8 warps would wait for a second wave:
		// two steps a warp, 4 warps (8 steps of 2 groups of 128 at 6 bits).
		{streamRequest(1, 2048, 8192, 6, 128), 2, 1, 4, 2, 2, 1, 0, 256},
		// One step a warp where the halved warps leave every block resident
		// (152 blocks of 4 warps over 7 steps at 2 bits: registers for two
		// a SM), or where the grid takes MINB though it is not (1024->28672:
		// 896 blocks, 4 a SM); 512->5120's 2 steps over 2 warps.
		{streamRequest(1, 896, 4864, 2, 64), 2, 1, 4, 2, 2, 1, 0, 152},
		{streamRequest(1, 1024, 28672, 4, 64), 2, 1, 4, 4, 2, 4, 0, 896},
		{streamRequest(1, 512, 5120, 4, 64), 2, 1, 2, 4, 2, 1, 0, 160},
	} {
		cfg, why := ChooseStream(c.req, 132)
		require.Empty(t, why, c.req.Key())
		assert.Equal(t, []int{c.mt, c.nt, c.kw, c.u, c.d, c.minb, c.xt},
			[]int{cfg.MT, cfg.NT, cfg.KW, cfg.U, cfg.D, cfg.MinB, cfg.XT}, c.req.Key())
		assert.Equal(t, c.xt, cfg.Defines()["XT"], c.req.Key())
		assert.Equal(t, c.minb, cfg.Defines()["MINB"], c.req.Key())
		// x in the ring comes after the first steps' weights, and the
		// decode variants with x in the ring or three slots run one block
		// an SM.
		assert.Equal(t, c.xt > 0, cfg.XE, c.req.Key())
		assert.Equal(t, c.xt > 0 || c.d == 3, cfg.Solo, c.req.Key())
		grid, block, _ := cfg.Launch(c.req)
		assert.Equal(t, c.blocks, int(grid[0]*grid[1]), c.req.Key())
		assert.Equal(t, uint32(32*cfg.KW), block[0])
	}
}

func TestStreamVariantsFitTheGPU(t *testing.T) {
	// Every variant chosen for the GPU test shapes and for a spread of
	// model shapes: steps of whole 128-byte lines at 4 and 8 bits, of
	// whole 16-byte pieces at the other widths, at most 512 bytes, at
	// least 4 bytes of scales per row and step, at least one step per
	// warp, and shared memory within an H100/H200's 227 KiB.
	reqs := plugintest.GPURequests()
	for _, bits := range []int{2, 3, 4, 5, 6, 8} {
		for _, g := range []int{32, 64, 128} {
			for _, in := range []int{1024, 4096, 5120, 8192, 14336, 28672} {
				for _, tok := range []int{1, 5, 8, 9, 16, 17, 32} {
					reqs = append(reqs, streamRequest(tok, in, 4104, bits, g))
				}
			}
		}
	}
	served := 0
	for _, req := range reqs {
		cfg, why := ChooseStream(req, 132)
		if why != "" {
			continue
		}
		served++
		groups := req.InFeatures / cfg.Group
		seg := cfg.U * cfg.Group * cfg.Bits / 8
		line := 128
		if cfg.Bits != 4 && cfg.Bits != 8 {
			line = 16
		}
		assert.Zero(t, seg%line, "%s: step of %d bytes", req.Key(), seg)
		assert.LessOrEqual(t, seg, 512, "%s: a row's step is one warp instruction's copy", req.Key())
		assert.Equal(t, cfg.Tail, groups%cfg.U, req.Key())
		assert.GreaterOrEqual(t, 2*cfg.U, 4, req.Key())
		assert.GreaterOrEqual(t, ceilDiv(groups, cfg.U), cfg.KW, "%s: a warp without steps", req.Key())
		if cfg.Tail > 0 {
			assert.Zero(t, groups*cfg.Group*cfg.Bits/8%16, "%s: rows of whole 16-byte pieces", req.Key())
			assert.Zero(t, cfg.Tail*cfg.Group*cfg.Bits/8%16, "%s: a last step of whole pieces", req.Key())
		}
		assert.LessOrEqual(t, cfg.SharedBytes(), 227<<10, req.Key())
		grid, _, _ := cfg.Launch(req)
		assert.GreaterOrEqual(t, int(grid[1])*8*cfg.NT, req.Tokens, "%s: token tiles cover every token", req.Key())
		assert.GreaterOrEqual(t, int(grid[0])*16*cfg.MT, req.OutFeatures, "%s: row tiles cover every row", req.Key())
	}
	assert.Greater(t, served, 100)
}

// Early start is asked for at decode when x is read from memory or
// travels in the ring after the first steps' weights (XE), and not with x
// in the ring from the first copy (which must wait for the grid ahead) or
// above 8 tokens, where it measured slower, but for 9-16 tokens in 8-token
// tiles or with x in the ring after the first weights (streamTileRing).
func TestStreamEarlyStartFollowsTheMeasuredRule(t *testing.T) {
	for _, c := range []struct {
		req  sdk.Request
		want bool
	}{
		{streamRequest(1, 4096, 14336, 4, 64), true},   // many blocks per SM: x from memory
		{streamRequest(1, 14336, 4096, 4, 64), true},   // one block per SM: x in the ring after the first weights
		{streamRequest(4, 4096, 4096, 4, 64), true},    // x from memory
		{streamRequest(16, 28672, 8192, 4, 64), false}, // above decode
		{streamRequest(16, 4096, 4096, 4, 64), true},   // two 8-token tiles, all blocks resident
		{streamRequest(12, 8192, 2048, 4, 64), true},   // two 8-token tiles, x from memory
		{streamRequest(12, 14336, 2048, 4, 64), false}, // one 16-token tile: longer rows
		{streamRequest(12, 14336, 4096, 4, 32), true},  // one 16-token tile, x in the ring after the first weights
		{streamRequest(16, 8192, 2048, 4, 32), false},  // one 16-token tile, x from memory
	} {
		cfg, why := ChooseStream(c.req, 132)
		require.Empty(t, why, c.req.Key())
		assert.Equal(t, c.want, cfg.EarlyStart(c.req), "%s (%s)", c.req.Key(), cfg.Describe())
	}
	withoutXE := StreamConfig{Bits: 4, Group: 64, MT: 2, NT: 1, KW: 8, U: 4, D: 2, XT: 1}
	assert.False(t, withoutXE.EarlyStart(streamRequest(1, 14336, 4096, 4, 64)), "x in the ring from the first copy")
}

// At decode with at most a block per SM (streamRing): three slots with x in
// the ring where they fit, else three with x from memory, else two (two
// at one token over at most 4096 inputs with over half the SMs a block); the
// launch then asks for more than half an SM's shared memory, so that no
// two blocks share an SM, and only then. Every variant fits a block.
func TestStreamRingRunsOneBlockAnSM(t *testing.T) {
	for _, c := range []struct {
		req    sdk.Request
		d, xt  int
		padded bool // the ring alone is under half an SM
	}{
		{streamRequest(1, 14336, 4096, 4, 64), 3, 1, false},
		{streamRequest(1, 8192, 1024, 4, 64), 3, 1, true},   // one row tile: 84 KiB of ring
		{streamRequest(1, 4096, 4096, 4, 64), 2, 1, true},   // one token over 4096 inputs, 128 blocks: two slots
		{streamRequest(1, 4096, 1024, 4, 64), 3, 1, false},  // ... 32 blocks: three
		{streamRequest(8, 8192, 2048, 4, 64), 3, 0, false},  // x does not fit three slots
		{streamRequest(1, 8192, 2048, 3, 64), 3, 1, true},   // the general path's short steps
		{streamRequest(1, 4096, 4096, 8, 128), 2, 1, false}, // three slots do not fit
	} {
		cfg, why := ChooseStream(c.req, 132)
		require.Empty(t, why, c.req.Key())
		assert.Equal(t, []int{c.d, c.xt}, []int{cfg.D, cfg.XT}, "%s (%s)", c.req.Key(), cfg.Describe())
		assert.True(t, cfg.Solo, c.req.Key())
		assert.Equal(t, c.xt > 0, cfg.XE, c.req.Key())
		_, _, shared := cfg.Launch(c.req)
		assert.Greater(t, 2*(int(shared)+1024), streamSMShared, "%s: two blocks would fit an SM", c.req.Key())
		assert.LessOrEqual(t, int(shared), streamMaxShared, c.req.Key())
		assert.Equal(t, c.padded, int(shared) > cfg.SharedBytes(), "%s: %d bytes, ring %d", c.req.Key(), shared, cfg.SharedBytes())
		assert.True(t, cfg.EarlyStart(c.req), c.req.Key())
	}
	// In groups of 32 where x does not fit three slots, the variant before
	// (x in two slots from the first copy, no early start), not x from
	// memory, which lost there.
	req := streamRequest(8, 18944, 3584, 4, 32)
	cfg, why := ChooseStream(req, 132)
	require.Empty(t, why, req.Key())
	assert.Equal(t, []int{2, 8}, []int{cfg.D, cfg.XT}, cfg.Describe())
	assert.False(t, cfg.XE || cfg.Solo || cfg.EarlyStart(req), cfg.Describe())
	// Grids of more blocks than SMs, and 2-8 tokens at 4 bits over at most
	// 4096 inputs, keep their blocks' own shared memory.
	for _, req := range []sdk.Request{streamRequest(1, 4096, 14336, 4, 64), streamRequest(4, 4096, 4096, 4, 64), streamRequest(16, 4096, 4096, 4, 64)} {
		cfg, why := ChooseStream(req, 132)
		require.Empty(t, why, req.Key())
		_, _, shared := cfg.Launch(req)
		assert.False(t, cfg.Solo, req.Key())
		assert.Equal(t, cfg.SharedBytes(), int(shared), req.Key())
	}
}

// TestStreamRuleMatchesTheHarness: scripts/harness_rule.py stream (the
// harness's stream_config and stream_smem_bytes) picks the macros and shared memory
// ChooseStream picks, and refuses what it refuses, over SM counts, token
// counts, widths, group sizes and sizes. Skipped where python3 is not
// installed.
func TestStreamRuleMatchesTheHarness(t *testing.T) {
	served := 0
	cases := harnessrule.Sweep([]int{132, 114, 78, 16}, []int{1, 2, 4, 8, 9, 12, 13, 16, 17, 32}, []int{2, 3, 4, 5, 6, 8}, []int{32, 64, 128},
		[]int{384, 512, 1152, 2048, 2880, 3584, 4096, 5120, 8192, 13824, 14336, 28672},
		[]int{8, 136, 512, 1032, 2112, 4096, 8192, 14336, 28672, 128256}, func(harnessrule.Case) bool { return true })
	harnessrule.Compare(t, "stream", cases, func(c harnessrule.Case) any {
		cfg, why := ChooseStream(c.Req, c.SMs)
		if why != "" {
			return nil
		}
		served++
		_, _, shared := cfg.Launch(c.Req)
		want := map[string]int{"smem": int(shared)}
		maps.Copy(want, cfg.Defines())
		return want
	})
	t.Logf("%d requests compared, %d served", len(cases), served)
	assert.Positive(t, served, "the sweep reaches requests the kernel serves")
	assert.Less(t, served, len(cases), "and requests it refuses")
}
