package plugintest

import "github.com/kcand/kcand/sdk"

// Requests returns the conformance shapes of a family: small enough for the
// CPU device, covering every bit width and group size, odd row counts,
// token counts on both sides of the decode limit, and output bias.
func Requests(f sdk.Family) []sdk.Request {
	switch f {
	case sdk.FamilyAffine:
		a := AffineRequest
		return []sdk.Request{
			a(1, 256, 64, 4, 64, false),
			a(3, 384, 40, 3, 128, true),
			a(7, 192, 24, 5, 32, false),
			a(1, 128, 16, 6, 64, true),
			a(2, 256, 32, 2, 32, false),
			a(33, 256, 48, 8, 128, false),
			a(1, 512, 8, 4, 32, true),
		}
	}
	return nil
}

// GPURequests returns the affine shapes the GPU kernels are checked on:
// real model projections and odd sizes (rows not a power of two, inputs
// that are a few groups past a round number), every bit width and group
// size, token counts 1 to 256 around the GEMV limit, with and without
// bias. Each candidate runs the ones it admits.
func GPURequests() []sdk.Request {
	a := AffineRequest
	return []sdk.Request{
		a(1, 4096, 4096, 4, 64, false),
		a(1, 5120, 13824, 4, 64, false),
		a(3, 2880, 2880, 4, 32, true),
		a(7, 1152, 1032, 3, 64, false),
		a(1, 4096, 14336, 8, 128, false),
		a(4, 14336, 4096, 2, 64, false),
		a(2, 2048, 512, 5, 32, true),
		a(8, 3072, 768, 6, 128, false),
		a(1, 1024, 4104, 4, 128, false),
		a(5, 896, 136, 3, 32, false),
		a(1, 8192, 1024, 6, 64, false),
		a(6, 1536, 1536, 5, 128, true),
		a(33, 4096, 4096, 4, 64, false),
		a(33, 2880, 5760, 8, 32, true),
		a(16, 5120, 13824, 4, 64, false),
		a(64, 1152, 1032, 3, 128, false),
		a(100, 2048, 2048, 2, 32, false),
		a(256, 4096, 14336, 4, 64, false),
		a(37, 4096, 1024, 5, 64, true),
		a(1, 2880, 2880, 6, 32, false),
		a(7, 2048, 8192, 8, 64, false),
		a(200, 896, 4864, 6, 64, false),
		// the stream kernel: decode and small batches, 4 and 8 bits and
		// (its general path) 2, 3, 5 and 6
		a(16, 4096, 4104, 6, 64, true),
		a(24, 3072, 2056, 3, 64, false),
		a(9, 2560, 1032, 5, 128, true),
		a(32, 2048, 4104, 2, 32, false),
		a(3, 4096, 4104, 4, 32, true),
		a(1, 14336, 4096, 4, 64, false),
		a(5, 2048, 2056, 8, 64, true),
		a(12, 4096, 4096, 8, 32, false),
		a(24, 2048, 8192, 4, 128, true),
		a(29, 5120, 1032, 4, 64, false),
		// the stream kernel where no step divides a row's groups (TAIL):
		// gpt-oss's 2880 inputs, 45 groups of 64
		a(1, 2880, 5120, 4, 64, false),
		a(16, 2880, 4096, 8, 64, true),
		a(5, 2880, 2056, 6, 64, true),
		// the Hopper wgmma kernel: 4 (and below, 8, 2, 3, 5 and 6) bits, 17+ tokens, partial tiles,
		// groups not a multiple of 8 (1152, 640), out not a multiple of 128,
		// each of its 64-, 128- and 256-token tiles
		a(65, 1152, 1032, 4, 64, true),
		a(129, 640, 136, 4, 64, false),
		a(300, 2048, 520, 4, 64, true),
		a(264, 640, 12296, 4, 64, true),
		a(200, 4096, 1032, 4, 64, true),   // 64-row tiles, K in two shares summed within a cluster
		a(400, 4096, 1032, 4, 64, false),  // the same over two token tiles, the second partial
		a(96, 4096, 2056, 4, 64, true),    // 128-token tiles in pairs, a partial row block
		a(72, 2048, 4104, 4, 64, false),   // 128-token tiles in pairs (32 groups: two shares of 16), a partial row block
		a(48, 4096, 4104, 8, 64, false),   // qmm/wgmma at 8 bits: 64-token tiles in pairs, a partial row block
		a(160, 2048, 1032, 8, 64, true),   // 8 bits: 256-token tiles in pairs
		a(160, 2048, 8200, 8, 64, true),   // 8 bits: 256-token tiles of 128 rows, K in two shares a cluster, a partial row block
		a(300, 1152, 2048, 8, 64, false),  // 8 bits: 18 groups (scales copied in pairs), two token tiles
		a(256, 4096, 1032, 8, 64, false),  // 8 bits: 256-token tiles in pairs
		a(160, 2048, 1032, 2, 64, true),   // 2 bits (general unpacking): 256-token tiles in pairs
		a(160, 2048, 8192, 2, 64, true),   // 2 bits: 256-token tiles of 128 rows, K in two shares a cluster, whose shares outgrow the rings
		a(300, 1152, 2048, 3, 64, false),  // 3 bits: 18 groups (a last weight stage of 2), two token tiles
		a(150, 4096, 25464, 5, 64, true),  // 5 bits: a whole wave, then the rest shared by stream-K blocks
		a(256, 4096, 14336, 4, 32, false), // groups of 32: 256-token tiles, one weight stage fewer (the scales take the room)
		a(130, 1280, 1032, 4, 128, true),  // groups of 128: a last weight stage of 4 groups of 64 inputs, scales copied in pairs
		a(70, 4096, 1032, 6, 32, true),    // 6 bits in groups of 32
		a(120, 8192, 1544, 4, 64, true),   // xprep in 256-thread blocks at the top of their range (8192 inputs), a partial row block
		// qmm/wgmma where in_features is not a multiple of 2·max(64, group)
		// (its ODDK variants): gpt-oss's 2880 inputs (45 groups of 64, an
		// odd last weight stage, rows whose scales start at an odd entry),
		// 3- and 5-bit rows that are not whole 16-byte pieces, an odd number
		// of groups of 128
		a(256, 2880, 4096, 4, 64, true),   // 256-token tiles, K in two shares a cluster
		a(300, 2880, 2056, 3, 64, false),  // 3 bits, two token tiles
		a(200, 2880, 1032, 5, 32, true),   // 5 bits in groups of 32
		a(136, 2880, 17416, 4, 64, true),  // a whole wave, then the rest split in 2 (sums through the workspace)
		a(150, 5760, 25464, 5, 128, true), // 45 groups of 128: a whole wave, then stream-K
		a(129, 3712, 1032, 6, 128, false), // 29 groups of 128, two scales a stage row (4-byte windows)
		a(300, 1088, 2056, 2, 32, false),  // 17 groups of 64 at 2 bits
		a(16, 4096, 4104, 4, 64, true),    // qmm/stream at 16 tokens in two 8-token tiles (early start), a partial row block
		a(11, 2048, 2056, 4, 128, true),   // qmm/stream's 8-token tiles, the second of 3 tokens, groups of 128
		a(10, 3072, 3080, 4, 32, true),    // qmm/stream in groups of 32: one 16-token tile, x in the ring after the first weights (early start), a partial row block
		a(12, 4096, 1024, 4, 32, false),   // ... with few rows: one row tile a warp, 8 warps
		a(1, 8192, 1032, 4, 32, true),     // gemv/tensor-core in groups of 32 over long rows with few outputs: one row tile a warp, a partial row block
		a(136, 4096, 17416, 4, 64, true),  // 137 row blocks: a whole wave of 132, then 5 split in 4
		a(150, 4096, 25464, 4, 64, true),  // 199 row blocks: a whole wave of 132, then 67 shared by 132 stream-K blocks, some over two tiles
		a(17, 4096, 14344, 4, 64, true),   // qmm/wgmma below 33 tokens (17 of a 64-token tile) and qmm/wave's two token tiles, a partial row block
		a(32, 2048, 1032, 8, 64, false),   // the same at 8 bits, a whole half tile
		a(1, 1024, 8192, 4, 64, true),     // gemv/bulk in 64-row tiles, one per block, fp16, stages in two parts
		a(1, 2304, 4240, 8, 32, true),     // gemv/bulk: 24 groups per stage, 16-row tiles, several per block
		a(4, 4096, 4096, 4, 64, true),     // gemv/bulk above one token: 4 bits in groups of 64 (fp16 operands)
		// qmm/bulk: K in slices above 8 tokens, odd token counts, groups of
		// 128 and of 32 (56 groups per slice)
		a(9, 2048, 1032, 4, 128, true),
		a(13, 14336, 4096, 4, 32, false),
		// qmm/wave: 64-row blocks (four K warps in two row groups), the last
		// partial, odd tokens; 256-row blocks (the most a box holds), more
		// than a wave
		a(11, 3072, 8200, 4, 64, true),
		a(15, 1024, 34816, 4, 64, true),
		// qmm/wave over long inputs: 128-row blocks in clusters of two over
		// halves of the lines, the last row block partial
		a(13, 28672, 8200, 4, 64, true),
		// qmm/wave with two token tiles (17-32 tokens): the last row block
		// partial; clusters of four over the inputs
		a(32, 3072, 8200, 4, 64, false),
		a(20, 4096, 2056, 4, 64, true),
		// two token tiles in 8 row groups of 3 n-tiles, one K warp each
		// (at most 5 n-tiles a warp), the last row block partial
		a(24, 2048, 22008, 4, 64, true),
	}
}

// AffineRequest is a bf16 affine request of the given shape and weight
// format; more than 8 tokens is prefill.
func AffineRequest(tokens, in, out, bits, group int, bias bool) sdk.Request {
	phase := sdk.PhaseDecode
	if tokens > 8 {
		phase = sdk.PhasePrefill
	}
	return sdk.Request{
		Family: sdk.FamilyAffine, Phase: phase, Tokens: tokens, InFeatures: in, OutFeatures: out,
		Weight: sdk.Format{Kind: "affine", Bits: bits, GroupSize: group}, Activation: sdk.BF16, Bias: bias,
	}
}
