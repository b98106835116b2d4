package affinegpu

import (
	_ "embed"
	"fmt"

	"github.com/kcand/kcand/sdk"
	"github.com/kcand/kcand/sdk/device"
	"github.com/kcand/kcand/sdk/gpukernel"
)

//go:embed kernels/stream.cu
var streamCode string

// StreamSource is kernels/stream.cu, the weight-streaming tensor-core
// kernel for few tokens (see the comment at its top).
var StreamSource = gpukernel.Source{Name: "stream.cu", Code: streamCode}

// StreamEntry is the kernel's entry point.
const StreamEntry = "affine_stream"

// StreamMaxTokens is the largest token count the stream kernel is chosen for.
const StreamMaxTokens = 32

// StreamConfig is one variant of kernels/stream.cu (its -D macros; SPK
// keeps the kernel's default, 1). The choice mirrors stream_config in
// scripts/affine_kernels.py, where the variants were timed.
type StreamConfig struct {
	Bits, Group int
	MT          int // 16-row tiles per warp
	NT          int // 8-token tiles per block
	KW          int // warps per block
	U           int // groups per step
	D           int // ring slots per warp
	MinB        int // blocks per SM the register allocation must allow
	XT          int // token rows of x that travel in the ring (0: x read from global memory)
	// XE sends the first steps' x through the ring after their weights,
	// which the kernel copies before it waits for the grid ahead (the XE
	// macro, with XT only): the kernel then starts early though x travels
	// in the ring.
	XE bool
	// Solo launches the kernel with more than half an SM's shared memory
	// (streamSoloShared), so that one block runs on an SM at a time: under
	// early start the next call's blocks then take SMs as this call's
	// leave, and none shares an SM with another block of its own grid.
	Solo bool
	// Tail is the groups of a row's last step where U does not divide the
	// row's groups (the TAIL macro; 0: it does), as at gpt-oss's 2880
	// inputs (45 groups of 64). The kernel then copies each row's scales
	// and biases as a window of 4-byte pieces (a row's first entry may be
	// odd).
	Tail int
}

// ChooseStream picks the stream variant for req on a GPU with sms
// multiprocessors, or says why the kernel does not serve req. Where no
// step divides the row's groups, the last step holds fewer (Tail): at
// gpt-oss's 2880 inputs that took 2 to 32 tokens from `gemv` and `qmm`
// alone to this kernel, 2880² at four tokens 5.6 µs against 7.9, at 6
// bits 5.2 against 9.7 (bench/NOTES.md, thirty-third session). Its
// warps, row tiles, x path and token tiles follow sweeps over model
// shapes (thirty-fourth session): 2880→5120 at one token now 5.7 µs, was
// 9.6 (`gemv` 7.0).
func ChooseStream(req sdk.Request, sms int) (StreamConfig, string) {
	bits, group := req.Weight.Bits, req.Weight.GroupSize
	if req.Tokens > StreamMaxTokens {
		return StreamConfig{}, fmt.Sprintf("the stream kernel serves 1 to %d tokens, not %d", StreamMaxTokens, req.Tokens)
	}
	groups := req.InFeatures / group
	// Whole steps of whole 16-byte pieces make rows of whole pieces too,
	// which the copies need; else a last step of fewer groups, where rows
	// and that step are whole pieces.
	u, tail := streamStepGroups(bits, group, groups), 0
	if u == 0 {
		u, tail = streamTailStep(bits, group, groups)
		if u == 0 {
			return StreamConfig{}, fmt.Sprintf("in_features/group_size=%d groups do not split into steps of whole 16-byte pieces (128 or 256 bytes at 4 and 8 bits), nor leave a last step of whole pieces", groups)
		}
	}
	nt := 4
	switch {
	case req.Tokens <= 8:
		nt = 1
	case req.Tokens <= 16:
		nt = 2
		if streamTokenTiles(req, sms) {
			nt = 1
		}
	}
	mt := streamRowTiles(req, nt, sms)
	blocks := streamBlocks(req, mt, nt)
	// Four warps per block, eight when that leaves fewer than 8 warps per
	// SM in blocks of one 8-token tile (4 in 16- and 32-token tiles, where
	// a warp has 2-4 times the tokens).
	minWarps := 8
	if nt > 1 {
		minWarps = 4
	}
	kw := 8
	if blocks*4 >= minWarps*sms {
		kw = 4
	}
	cfg := StreamConfig{Bits: bits, Group: group, MT: mt, NT: nt, KW: kw, U: u, D: 2, MinB: 1, Tail: tail}
	// At least two steps per warp, or one where every block is resident at
	// once with one step a warp (streamResident), or where the grid takes
	// registers for two or four blocks a SM (streamMinBlocks): then more
	// warps keep more bytes in flight (2880->5120 at one token 5.7 us with
	// 8 warps and 1.5 steps each against 9.6 with 4 and 3; 2048->8192 4.7
	// against 5.3; 1024->28672 7.3 with 4 warps a block against 7.7 with 2;
	// at 2, 3 and 6 bits and in 4-bit groups of 32 over 512-1536 inputs, 4
	// warps against 2 or 2 against 1, 1.3-2.1 times as fast: 896->4864 at 2
	// bits 3.5 against 5.6; bench/NOTES.md, thirty-fifth session). Where
	// blocks would wait for a second wave, one step a warp lost: 2048->8192
	// at 2 bits 5.4 against 5.3, 6 bits in groups of 128 7.7 against 6.4.
	steps := ceilDiv(groups, u)
	halved := func(perWarp int) int {
		k := kw
		for k > 1 && steps < perWarp*k {
			k /= 2
		}
		return k
	}
	one := cfg
	one.KW = halved(1)
	perWarp := 2
	if streamMinBlocks(cfg, blocks, sms) > 1 || blocks <= sms*streamResident(one, streamMinBlocks(one, blocks, sms)) {
		perWarp = 1
	}
	cfg.KW = halved(perWarp)
	cfg.MinB = streamMinBlocks(cfg, blocks, sms)
	// At decode (1-8 tokens) with at most one block per SM, x travels in
	// the ring with the weights (streamRing): a lone block's warps cannot
	// hide x's global latency.
	// Not at 2-8 tokens and 4 bits over rows of at most 4096 inputs: there
	// x read from memory stays ahead (4096^2 at 4 tokens 5.3 us against
	// 5.9 with x in the ring and early start, 7.2 without; 2048^2 2.4
	// against 2.8 and 4.4). At 8 bits and over longer rows the ring stays
	// ahead: 4096^2 at one token and 8 bits 7.6 against 10.8, 14336->4096
	// at 4 tokens in 4-bit groups of 128 11.8 against 19.4.
	if nt == 1 && req.Tokens <= 8 && blocks <= sms && !(bits == 4 && req.InFeatures <= 4096 && req.Tokens > 1) {
		cfg = streamRing(cfg, req, blocks, sms)
	}
	if tile, ok := streamTileRing(cfg, req, sms); ok {
		cfg = tile
	}
	return cfg, ""
}

// streamTileRing is the variant for 9-16 tokens in 4-bit groups of 32
// over rows of at least 2048 inputs, where one 16-token tile takes at most
// a block per SM: x through the ring after the first steps' weights (XE),
// so the kernel starts early, three slots, one block an SM (Solo). Groups
// of 32 take no 8-token tiles (streamTokenTiles), so this replaces one
// 16-token tile with x read from memory and no early start. Where two row
// tiles a warp take at least a quarter of the SMs (more than half above 12
// tokens), the tile has two row tiles and four warps; with fewer rows, at
// 9-12 tokens and at least 512 outputs, it keeps the rule's warps and row
// tiles (one row tile, 8 warps).
//
// On the H200 (bench/NOTES.md, thirty-seventh session), against the
// variant before, 72 requests over 16 shapes (2048-18944 inputs,
// 2048-4096 outputs) at 9, 11, 12, 13 and 16 tokens were 0.93-1.39 times
// as fast (median 1.13; 9 tokens median 1.22, 16 tokens 1.05): 14336->4096
// at 9 tokens 21.3 us against 29.0, 18944->3584 28.3 against 39.3, 4096^2
// at 13 tokens 8.2 against 10.3; the losses were short rows or few
// outputs at 11-16 tokens (2560^2 at 12 tokens 7.5 against 7.0, 2880^2 at
// 16 7.9 against 7.8, 14336->2048 at 12 19.2 against 19.0). At
// 16 tokens with at most half the SMs a block it lost (8192->2048 13.1
// against 12.5). With fewer rows, two row tiles and four warps lost
// (0.84-1.15, median 0.93) where the rule's one row tile and 8 warps with
// x in the ring won: 18 requests over 2048-18944 inputs and 512-1024
// outputs at 9 and 12 tokens 1.18-1.42 times as fast (median 1.29;
// 14336->1024 at 9 tokens 11.5 against 16.3). In groups of 64 and 128 the
// 8-token tiles mostly stay ahead (a 16-token tile like this one won
// mostly at 9-10 tokens, by 1.01-1.21; at 11 tokens 0.94-1.08).
func streamTileRing(cfg StreamConfig, req sdk.Request, sms int) (StreamConfig, bool) {
	rows := ceilDiv(req.OutFeatures, 32)
	if cfg.Bits != 4 || cfg.Group != 32 || req.Tokens <= 8 || req.Tokens > 16 || req.InFeatures < 2048 || rows > sms {
		return cfg, false
	}
	tile := cfg
	tile.D, tile.XT, tile.XE, tile.Solo = 3, req.Tokens, true, true
	switch {
	case 4*rows >= sms && (req.Tokens <= 12 || 2*rows > sms):
		tile.MT, tile.NT, tile.KW, tile.MinB = 2, 2, 4, 1
	case 4*rows < sms && req.Tokens <= 12 && req.OutFeatures >= 512:
		// the rule's row tiles and warps
	default:
		return cfg, false
	}
	if tile.SharedBytes() > streamMaxShared {
		return cfg, false
	}
	return tile, true
}

// streamRing is the decode variant for a grid of at most one block per SM
// (blocks of them on sms): x through the ring (XT) after the first steps'
// weights (XE), so the kernel starts early, three ring slots per warp
// (two at one token over rows of at most 4096 inputs with more than half
// the SMs a block), and one block an SM (Solo); where x does not fit the
// slots, x from memory (in groups of 32 the variant before: x in two
// slots from the first copy, no early start), and two slots where three do
// not fit at all. On the H200 (bench/NOTES.md, thirty-sixth session),
// against the variants
// before (x in two slots from the first copy without early start, or from
// memory with early start in two slots that let two blocks share an SM),
// 144 requests over 16 model shapes at 1, 4 and 8 tokens, 3, 4 and 8 bits,
// were 0.97-1.75 times as fast (median 1.25): 14336->4096 at one token
// 12.1 us against 14.2, 8192->1024 4.2 against 5.7, 8 bits 4096^2 at 4
// tokens 7.7 against 9.5, gpt-oss's 2880^2 at one token 3.6 against 5.7,
// 4096->2048 in groups of 128 3.3 against 5.7. Early start with two
// blocks of consecutive calls on an SM lost (14336->4096 18.8, 8192->1024
// 6.4). Two slots at one token over rows of at most 4096 inputs where the
// grid has more than half the SMs a block: 4096^2 5.1 against 5.7 with
// three (5.3 before). At 2-8 tokens and 4 bits there x from memory stays
// (4096^2 at four tokens 5.3 against 5.9 in the ring).
func streamRing(cfg StreamConfig, req sdk.Request, blocks, sms int) StreamConfig {
	slots := []int{3, 2}
	if req.Tokens == 1 && req.InFeatures <= 4096 && 2*blocks > sms {
		slots = []int{2}
	}
	for _, d := range slots {
		ring := cfg
		ring.D, ring.Solo = d, true
		withX := ring
		withX.XT, withX.XE = min(8*cfg.NT, req.Tokens), true
		switch {
		case withX.SharedBytes() <= streamMaxShared:
			return withX
		case cfg.Group == 32:
			// In groups of 32 x from memory lost to x in two slots
			// from the first copy without early start (18944->3584 at 8
			// tokens 33.1 us against 26.1): that variant stays.
			two := cfg
			two.XT = withX.XT
			if two.SharedBytes() <= streamMaxShared {
				return two
			}
			return cfg
		case ring.SharedBytes() <= streamMaxShared:
			return ring
		}
	}
	return cfg
}

// streamRowTiles is the 16-row tiles per warp (MT) of the stream variant
// for req in nt 8-token tiles per block on sms multiprocessors: two, or
// one where the sweeps below found twice the blocks faster.
func streamRowTiles(req sdk.Request, nt, sms int) int {
	// Two 16-row tiles per warp; at decode, 2, 3, 5 and 6 bits take one
	// where two leave at most a block per SM: with streamStepGroups' short
	// steps, twice the blocks of 8 warps beat two row tiles with x through
	// the ring and the first rule's longer steps (14336->4096 at one token,
	// 6 bits 16.4 us against 18.4, 3 bits 15.0 against 15.8, 5 bits 17.4
	// against 18.4; with the longer steps one row tile was slower: 23.9 and
	// 22.6 at 6 and 3 bits; bench/NOTES.md, thirty-first session).
	bits, group := req.Weight.Bits, req.Weight.GroupSize
	blocksOf := func(mt int) int { return streamBlocks(req, mt, nt) }
	mt := 2
	general := bits != 4 && bits != 8
	if general && nt == 1 && blocksOf(2) <= sms {
		mt = 1
	}
	// Above 8 tokens, one row tile where that takes more SMs, or where two
	// leave one to one and a half blocks per SM: the busiest SM then has 48
	// rows, not 64 (2880->5120 at 16 tokens 9.1 us against 10.4;
	// 8192->2048 at 16 tokens 10.2 against 12.9, at 32 13.4 against 16.3;
	// at 256 blocks, two per SM either way, two row tiles stay: 2048->8192
	// 7.7 against 9.9; bench/NOTES.md, thirty-fourth session).
	if nt > 1 && (blocksOf(1) <= sms || (nt == 2 && sms < blocksOf(2) && blocksOf(2) <= 3*sms/2)) {
		mt = 1
	}
	// At decode at 4 bits in groups of 64 and 128 over rows of more than
	// 4096 inputs (x through the ring, below), one row tile where that
	// leaves at most half the SMs a block: twice the blocks, each half the
	// rows (8192->1024 at one token 5.3 us against 7.5, at 4 tokens 6.1
	// against 8.4; 14336->1024 7.7 against 11.1; in groups of 128 8192->512
	// 5.6 against 7.7; bench/NOTES.md, thirty-fifth session). In groups of
	// 32 too: 24 requests over 5120-28672 inputs and 512-1024 outputs at 1,
	// 4 and 8 tokens 1.22-1.77 times as fast (median 1.56; 14336->1024 at one
	// token 7.6 against 11.8; thirty-seventh session).
	if bits == 4 && nt == 1 && req.Tokens <= 8 && req.InFeatures > 4096 && 2*blocksOf(1) <= sms {
		mt = 1
	}
	// 8-token tiles (9-16 tokens) in groups of 128: one row tile where that
	// leaves fewer than two blocks a SM, so they keep 8 warps. With two row
	// tiles their tiles lost to one 16-token tile over longer rows, 0.81-0.98
	// times as fast (8192->1536 at 12 tokens 12.4 us against 10.1); with one
	// they won (8192->1536 8.8 against 10.1, 4096->1024 4.7 against 5.8; 36
	// requests over 2048-8192 inputs and 512-2048 outputs 0.99-1.37 times as
	// fast, median 1.26). At two blocks a SM of 4 warps they lost
	// (4096->2112 5.8 against 4.7). In groups of 64 two row tiles stay
	// ahead: 4096->1024 4.3 against 5.1 (bench/NOTES.md, thirty-fifth
	// session).
	if nt == 1 && req.Tokens > 8 && group == 128 && blocksOf(1) < 2*sms {
		mt = 1
	}
	return mt
}

// streamBlocks is the grid's blocks for req in mt 16-row tiles per warp
// and nt 8-token tiles per block.
func streamBlocks(req sdk.Request, mt, nt int) int {
	return ceilDiv(req.OutFeatures, 16*mt) * ceilDiv(req.Tokens, 8*nt)
}

// streamTokenTiles reports whether 9 to 16 tokens run as two 8-token
// tiles, each block the decode rule's (grid.y 2, every weight read by two
// blocks, the second mostly from L2), rather than one 16-token tile: at 4
// bits (not in groups of 32, which get no MINB), where all blocks are
// resident at once with registers for two a SM and rows hold at most 8192
// inputs. x is then read from memory (no XT), so each block starts early.
// In groups of 128 with few rows the tiles take one row tile a warp
// (ChooseStream). On the H200 at 16 tokens: 3072^2 5.6 us against 6.7,
// 2048^2 3.1 against 4.3, 3072->1024 3.3 against 5.1, 8192->4096 13.1
// against 14.0, 4096^2 7.9 against 8.2 (thirty-fourth session); at 9-16
// tokens in groups of 64 over 5120-8192 inputs and 512-2112 outputs
// 1.20-1.38 times as fast, 8192->2048 8.7 against 10.3 (thirty-fifth;
// with x in the ring and so without early start, the thirty-fourth
// session's tiles took 11.6 there); over longer rows 28672->4096 39.7
// against 38.7 and 14336->4096 in groups of 128 23.2 against 20.9
// (bench/NOTES.md).
func streamTokenTiles(req sdk.Request, sms int) bool {
	rows := ceilDiv(req.OutFeatures, 32)
	return req.Weight.Bits == 4 && req.Weight.GroupSize != 32 && rows <= sms && req.InFeatures <= 8192
}

// streamResident is the blocks of a variant sure to be resident on an SM at
// once: registers for max(minb, 8/KW) (a thread holds at most 255, so 8
// warps an SM at worst), within an SM's shared memory (1 KiB of it
// reserved per block).
func streamResident(cfg StreamConfig, minb int) int {
	return min(max(minb, 8/cfg.KW), streamSMShared/(cfg.SharedBytes()+1024))
}

// streamMinBlocks is the blocks per SM a variant's registers must allow
// (MINB): in blocks of one 8-token tile (decode, and 9-16 tokens in
// 8-token tiles), when the grid is more than one block per SM, registers
// for 16 warps per SM (128 per thread): 256 blocks of 8 warps then fit
// one wave. With 4-bit group 32 that would spill, so it keeps 1,
// and so do the other widths, whose unpacking takes 190-250 registers.
// Only when shared memory lets that many blocks reside (an SM has 228 KiB,
// 1 KiB of it reserved per block).
func streamMinBlocks(cfg StreamConfig, blocks, sms int) int {
	general := cfg.Bits != 4 && cfg.Bits != 8
	if general || cfg.NT != 1 || blocks <= sms || (cfg.KW != 4 && cfg.KW != 8) || (cfg.Bits == 4 && cfg.Group == 32) {
		return 1
	}
	if (16/cfg.KW)*(cfg.SharedBytes()+1024) > streamSMShared {
		return 1
	}
	return 16 / cfg.KW
}

// streamStepGroups is the groups per step (U) of the stream kernel, or 0
// when none fits. 4 and 8 bits: steps of 128 (else 256) packed bytes per
// row that divide the row's groups. The other widths: the fewest groups
// (2, 4, 8 or 16) that make at least 64 bytes in whole 16-byte pieces and
// divide the row, else the most that do (at most 512 bytes: the kernel
// copies a row's step with one warp instruction). Fewer groups a step keep
// fewer scales in registers: 8192->28672 at one token with two row tiles
// a warp, 3 bits in 4-group steps 46.5 us against 52.5 in 8-group ones, 6
// bits in 2-group steps 58.5 against 60.4, 5 bits in 2-group steps 62.8
// against 65.8 in 4-group ones with MINB 4 (bench/NOTES.md, thirty-first
// session). At least two groups: cp.async moves at least 4 bytes of
// scales.
func streamStepGroups(bits, group, groups int) int {
	return streamStep(bits, group, func(v int) bool { return groups%v == 0 })
}

// streamStep is the step (groups a row) the stream kernel prefers among
// those that fit(v) accepts, or 0: 4 and 8 bits the first of 128 and 256
// packed bytes a row; the other widths the fewest groups (2, 4, 8 or 16)
// of whole 16-byte pieces that make at least 64 bytes, else the most (at
// most 512 bytes).
func streamStep(bits, group int, fit func(v int) bool) int {
	gbytes := group * bits / 8
	if bits == 4 || bits == 8 {
		for _, v := range []int{128 / gbytes, 256 / gbytes} {
			if v >= 2 && fit(v) {
				return v
			}
		}
		return 0
	}
	last := 0
	for _, v := range []int{2, 4, 8, 16} {
		if !fit(v) || v*gbytes%16 != 0 || v*gbytes > 512 {
			continue
		}
		if v*gbytes >= 64 {
			return v
		}
		last = v
	}
	return last
}

// streamTailStep is the groups per step (U) and of the last step (Tail)
// where no step divides the row's groups (streamStepGroups gives 0): the
// step streamStep prefers without asking it to divide them,
// where a row is whole 16-byte pieces and so are the last step's groups
// (4 and 8 bits, and 2 and 6 bits at gpt-oss's 2880 inputs; not 3 and 5
// bits there, whose rows are 1080 and 1800 bytes). 0, 0 where not.
func streamTailStep(bits, group, groups int) (u, tail int) {
	gbytes := group * bits / 8
	if groups*gbytes%16 != 0 {
		return 0, 0
	}
	u = streamStep(bits, group, func(int) bool { return true })
	if u == 0 || groups%u*gbytes%16 != 0 {
		return 0, 0
	}
	return u, groups % u
}

// streamMaxShared bounds a variant's dynamic shared memory (H100/H200
// allow 227 KiB per block); streamSMShared is an SM's shared memory.
const (
	streamMaxShared = 227 << 10
	streamSMShared  = 228 << 10
	// streamSoloShared is the least dynamic shared memory that keeps a
	// second block off an SM (each block also takes 1 KiB reserved).
	streamSoloShared = streamSMShared/2 - 1024 + 16
)

// Defines are the kernel's -D macros.
func (c StreamConfig) Defines() map[string]int {
	d := map[string]int{"BITS": c.Bits, "GROUP": c.Group, "MT": c.MT, "NT": c.NT, "KW": c.KW, "U": c.U, "D": c.D,
		"MINB": max(c.MinB, 1), "XT": c.XT}
	if c.Tail > 0 {
		d["TAIL"] = c.Tail
	}
	if c.XE {
		d["XE"] = 1
	}
	return d
}

// Variant is the kernel variant to compile: entry point and macros.
func (c StreamConfig) Variant() gpukernel.Variant {
	return gpukernel.Variant{Entry: StreamEntry, Defines: c.Defines()}
}

// SharedBytes is the dynamic shared memory of a launch: the warps' rings,
// or the K-split reduction when that is larger.
func (c StreamConfig) SharedBytes() int {
	rows := 16 * c.MT
	wpt := c.Group * c.Bits / 128
	seg := c.U * c.Group * c.Bits / 8
	pad := 16 * wpt
	if wpt == 8 || (c.Bits != 4 && c.Bits != 8) {
		pad = 16
	}
	sstride := max(16, 2*c.U)
	if c.Tail > 0 {
		sstride = (2*c.U + 4 + 15) / 16 * 16 // a window of U + 2 entries
	}
	slot := rows*(seg+pad) + 2*rows*sstride + c.XT*(2*c.U*c.Group+16)
	ring := c.KW * c.D * slot
	red := 0
	if c.KW > 1 {
		red = 4 * c.KW * rows * 8 * c.NT
	}
	return max(ring, red)
}

// Launch gives grid, block and dynamic shared memory for req: with Solo
// at least streamSoloShared.
func (c StreamConfig) Launch(req sdk.Request) (grid, block [3]uint32, shared uint32) {
	grid = [3]uint32{uint32(ceilDiv(req.OutFeatures, 16*c.MT)), uint32(ceilDiv(req.Tokens, 8*c.NT)), 1}
	sh := c.SharedBytes()
	if c.Solo {
		sh = max(sh, streamSoloShared)
	}
	return grid, [3]uint32{uint32(32 * c.KW), 1, 1}, uint32(sh)
}

// Describe names the variant for logs.
func (c StreamConfig) Describe() string {
	return fmt.Sprintf("stream MT=%d NT=%d KW=%d U=%d D=%d MINB=%d XT=%d XE=%t TAIL=%d solo=%t", c.MT, c.NT, c.KW, c.U, c.D, max(c.MinB, 1), c.XT, c.XE, c.Tail, c.Solo)
}

// AdmitStream picks the stream variant for req on hw, or says why the
// stream kernel does not serve it there (not a CUDA device, a shape no
// affine GPU kernel takes, or one the stream kernel does not).
func AdmitStream(req sdk.Request, hw device.Profile) (StreamConfig, string) {
	if why := AdmitCUDA(req, hw); why != "" {
		return StreamConfig{}, why
	}
	return ChooseStream(req, hw.Multiprocessors)
}

var streamKernels = gpukernel.NewCache()

// PrepareStream compiles (or finds) the stream variant cfg and binds the
// weights of req to it.
func PrepareStream(env sdk.Env, req sdk.Request, weights sdk.Buffers, cfg StreamConfig) (*Prepared, error) {
	dev, err := CUDA(env)
	if err != nil {
		return nil, err
	}
	k, err := streamKernels.Get(dev, StreamSource, cfg.Variant())
	if err != nil {
		return nil, err
	}
	grid, block, shared := cfg.Launch(req)
	step := gpukernel.Step{Kernel: k, Launch: gpukernel.Launch{Grid: grid, Block: block, SharedBytes: shared, Params: Params(req), Programmatic: cfg.EarlyStart(req)}}
	p, err := NewPreparedSteps(req, weights, []gpukernel.Step{step}, 0)
	if err != nil {
		return nil, err
	}
	env.Logger.Debug("prepared", "request", req.Key(), "variant", cfg.Describe(), "kernel", p.Describe(), "nvrtc_cache_hit", k.CacheHit)
	return p, nil
}

// EarlyStart says whether the plan launches the variant with early start
// (programmatic dependent launch, sm_90): the kernel then puts its first
// steps' weights in flight while the kernel ahead finishes and waits for it
// before it reads x. Only at decode with x read from memory (XT 0), or in
// the ring after the first steps' weights (XE): there, on the H200,
// back-to-back calls took 4096->14336 from 14.9 to 12.3 us and
// 28672->8192 from 41.5 to 38.4 at one token; with x in the ring before
// the first copy (which must wait for the grid ahead) 14336->4096 went
// from 13.7 to 20.3 us, and at 16 tokens 28672->8192 from 71.2 to 84.1
// (bench/NOTES.md, eighth session); with XE, three slots and Solo
// 14336->4096 took 11.6 against 13.4 without early start (thirty-sixth).
// x read from memory also starts early at 9-16 tokens in 8-token tiles
// (streamTokenTiles), whose blocks are all resident at once (thirty-fourth
// session); x after the first weights (XE) always does, as in
// streamTileRing's 16-token tiles.
func (c StreamConfig) EarlyStart(req sdk.Request) bool {
	return c.XE || (c.XT == 0 && (req.Tokens <= 8 || c.NT == 1))
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }
