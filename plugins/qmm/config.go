package main

import (
	"github.com/kcand/kcand/sdk"
)

// qmmTile is a named block-tile shape of kernels/qmm.cu.
type qmmTile struct {
	Name                               string
	BM, BN, BK, WarpsM, WarpsN, WarpsK int
	Stages                             int
	Resident                           int // blocks per multiprocessor the tile is sized for
}

// qmmTiles mirror QMM_CONFIGS and QMM_RESIDENT in scripts/affine_kernels.py,
// where the kernel's author tuned them; chooseTile picks by token count.
var qmmTiles = []qmmTile{
	{"s16", 16, 64, 256, 1, 1, 4, 4, 2},   // tokens ≤ 16: memory bound
	{"s32", 32, 64, 256, 1, 2, 4, 3, 1},   // 17..32
	{"s64", 64, 64, 128, 1, 2, 2, 3, 2},   // 33..64
	{"m128", 64, 128, 128, 1, 4, 2, 3, 1}, // 65..192
	{"l", 128, 128, 64, 2, 4, 1, 4, 1},    // > 192
}

func chooseTile(tokens int) qmmTile {
	switch {
	case tokens <= 16:
		return qmmTiles[0]
	case tokens <= 32:
		return qmmTiles[1]
	case tokens <= 64:
		return qmmTiles[2]
	case tokens <= 192:
		return qmmTiles[3]
	}
	return qmmTiles[4]
}

// qmmConfig is one variant of kernels/qmm.cu.
type qmmConfig struct {
	Tile        qmmTile
	Bits, Group int
	Stages      int
	KSplit, WCP int
}

// chooseQMM picks the variant for a request on a GPU with sms multiprocessors.
func chooseQMM(req sdk.Request, sms int) qmmConfig {
	bits, in, out, tokens := req.Weight.Bits, req.InFeatures, req.OutFeatures, req.Tokens
	t := chooseTile(tokens)
	g := gcd(in*bits/8, t.BK*bits/8)
	wcp := 4
	switch {
	case g%16 == 0:
		wcp = 16
	case g%8 == 0:
		wcp = 8
	}
	// Split K over a cluster of 2 or 4 blocks while the larger grid still
	// fits in one wave of resident blocks, keeping ≥ 2 k-tiles per block.
	blocks := ceilDiv(out, t.BN) * ceilDiv(tokens, t.BM)
	kTiles := ceilDiv(in, t.BK)
	slots := sms * t.Resident
	ksplit := 1
	for ksplit < 4 && blocks*ksplit*2 <= slots && kTiles >= 4*ksplit {
		ksplit *= 2
	}
	c := qmmConfig{Tile: t, Bits: bits, Group: req.Weight.GroupSize, Stages: t.Stages, KSplit: ksplit, WCP: wcp}
	// s16 wants two resident blocks: drop to 3 stages if 4 do not fit in half an SM.
	if t.Name == "s16" && c.sharedBytes() > 113*1024 {
		c.Stages = 3
	}
	return c
}

// defines are the kernel's -D macros.
func (c qmmConfig) defines() map[string]int {
	t := c.Tile
	return map[string]int{"BITS": c.Bits, "GROUP": c.Group, "BM": t.BM, "BN": t.BN, "BK": t.BK,
		"WARPS_M": t.WarpsM, "WARPS_N": t.WarpsN, "WARPS_K": t.WarpsK, "STAGES": c.Stages, "KSPLIT": c.KSplit, "WCP": c.WCP}
}

// sharedBytes is the dynamic shared memory (the formula in qmm.cu's header).
func (c qmmConfig) sharedBytes() int {
	r16 := func(v int) int { return (v + 15) / 16 * 16 }
	t := c.Tile
	xrowb := 2 * (t.BK + 8)
	wrow := t.BK * c.Bits / 8
	wsb := wrow
	if wrow%16 == 0 {
		wsb = wrow + 16*((wrow/16+1)%2)
	}
	gt := max(1, t.BK/c.Group)
	scw := gt/2 + 1
	foldk := min(c.Group, t.BK/t.WarpsK, 64)
	nf := t.BK / foldk
	stage := r16(t.BM*xrowb) + r16(t.BN*wsb+16) + 2*r16(4*t.BN*scw)
	pipe := c.Stages*stage + 2*t.BM*xrowb + 2*8*nf*t.BN + 2*4*nf*t.BM
	red := 0
	if t.WarpsK > 1 || c.KSplit > 1 {
		red = 4 * t.WarpsK * t.BM * t.BN
	}
	return max(pipe, red)
}

// launch gives grid, block and shared memory for req.
func (c qmmConfig) launch(req sdk.Request) (grid, block [3]uint32, shared uint32) {
	t := c.Tile
	threads := 32 * t.WarpsM * t.WarpsN * t.WarpsK
	gx := ceilDiv(req.OutFeatures, t.BN) * c.KSplit
	return [3]uint32{uint32(gx), uint32(ceilDiv(req.Tokens, t.BM)), 1}, [3]uint32{uint32(threads), 1, 1}, uint32(c.sharedBytes())
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
