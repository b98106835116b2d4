package main

import (
	"github.com/kcand/kcand/sdk"
)

// gemvConfig is one variant of kernels/gemv.cu and how it is launched;
// the choice mirrors gemv_config in scripts/affine_kernels.py, where the
// kernel's author tuned it (see the comment at the top of gemv.cu).
type gemvConfig struct {
	Bits, Group, Tokens, Rows, Unroll, Vals, LoadW, XSmem, Warps, MinBlocks int
}

// chooseGEMV picks the variant for a request on a GPU with sms multiprocessors.
func chooseGEMV(req sdk.Request, sms int) gemvConfig {
	bits, group, tokens, in, out := req.Weight.Bits, req.Weight.GroupSize, req.Tokens, req.InFeatures, req.OutFeatures
	// Values per lane chunk: the smallest run of whole values that is a
	// whole number of 16-byte loads, when it divides the row and leaves at
	// least 16 chunks; else 32 values with the widest load that divides them.
	vmin := map[int]int{2: 64, 3: 128, 4: 32, 5: 128, 6: 64, 8: 32}[bits]
	vals, loadw := 32, gcd(16, 4*bits)
	if in%vmin == 0 && in/vmin >= 16 {
		vals, loadw = vmin, 16
	}
	chunk := vals * bits / 8
	rows := 1
	switch {
	case tokens <= 2:
		rows = 4
	case tokens <= 4:
		rows = 2
	}
	const warps = 8
	// Small outputs: fewer rows per warp so every multiprocessor gets a block.
	for rows > 1 && ceilDiv(out, warps*rows) < sms {
		rows /= 2
	}
	// Register budget: at most 128 bytes of packed weights per lane and
	// step, and rows·unroll·tokens ≤ 8 (no spills at 128 registers).
	rows = max(1, min(rows, 128/chunk))
	maxUnroll := 2
	if vals == 32 {
		maxUnroll = 4
	}
	unroll := max(1, min(maxUnroll, 128/(rows*chunk)))
	for unroll > 1 && rows*unroll*tokens > 8 {
		unroll--
	}
	unroll = max(1, min(unroll, ceilDiv(in/vals, 32)))
	sub := min(vals, group)
	xsBytes := 4 * tokens * (in / vals) * (vals + 4)
	xsmem := 0
	if xsBytes+4*tokens*(in/sub) <= 96*1024 {
		xsmem = 1
	}
	minBlocks := 1
	if tokens <= 4 {
		minBlocks = 2 // two resident 256-thread blocks: 128 registers each
	}
	return gemvConfig{Bits: bits, Group: group, Tokens: tokens, Rows: rows, Unroll: unroll, Vals: vals,
		LoadW: loadw, XSmem: xsmem, Warps: warps, MinBlocks: minBlocks}
}

// defines are the kernel's -D macros.
func (c gemvConfig) defines() map[string]int {
	return map[string]int{"BITS": c.Bits, "GROUP": c.Group, "TOKENS": c.Tokens, "ROWS": c.Rows, "UNROLL": c.Unroll,
		"VALS": c.Vals, "LOADW": c.LoadW, "XSMEM": c.XSmem, "WARPS": c.Warps, "GV_MINB": c.MinBlocks}
}

// threads per block.
func (c gemvConfig) threads() int { return c.Warps * 32 }

// sharedBytes is the dynamic shared memory of a launch for req.
func (c gemvConfig) sharedBytes(req sdk.Request) int {
	sub := min(c.Vals, c.Group)
	in := req.InFeatures
	smem := 4 * ((c.Tokens*(in/sub) + 3) / 4 * 4)
	if c.XSmem == 1 {
		smem += 4 * c.Tokens * (in / c.Vals) * (c.Vals + 4)
	}
	return smem
}

// launch gives grid, block and shared memory. Warps loop over row sets,
// so the grid is capped at the resident capacity (sms × occupancy).
func (c gemvConfig) launch(req sdk.Request, sms, occupancy int) (grid, block [3]uint32, shared uint32) {
	blocks := ceilDiv(ceilDiv(req.OutFeatures, c.Rows), c.Warps)
	gx := min(blocks, sms*max(1, occupancy))
	return [3]uint32{uint32(gx), uint32(ceilDiv(req.Tokens, c.Tokens)), 1}, [3]uint32{uint32(c.threads()), 1, 1}, uint32(c.sharedBytes(req))
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
