// Package affine is the contract of the affine family: an MLX-style
// affine-quantised projection y = x·Wᵀ (+ bias), where each row of W is
// stored as quantised values q with one bf16 scale and one bf16 bias per
// group of GroupSize input features: W[o][i] = scale[o][i/g]·q[o][i] + biases[o][i/g].
//
// Layout (all little-endian):
//   - "x"      bf16 [tokens][in_features]                 input
//   - "y"      bf16 [tokens][out_features]                output
//   - "weight" uint32 [out_features][in_features·bits/32] q, packed LSB-first
//   - "scales" bf16 [out_features][in_features/group]
//   - "biases" bf16 [out_features][in_features/group]
//   - "bias"   bf16 [out_features]                        only when Request.Bias
//
// Packing follows MLX: each row is one little-endian bit stream in which
// value i occupies bits [i·bits, (i+1)·bits). For 2, 4 and 8 bits every
// uint32 holds 32/bits whole values; for 3, 5 and 6 bits values straddle
// byte and word boundaries exactly as MLX's byte-wise packing lays them out.
//
// Non-finite inputs: a NaN or an infinity in a token's x must come out in
// that token's outputs as the float64 reference has them (NaN where the
// reference is NaN; the same infinity, or NaN, where it is infinite), and
// must not reach other tokens' outputs. A kernel may turn an infinity into
// NaN (0·∞ and ∞−∞ are NaN in any factored form of the sum) but not into a
// number or the other infinity; a kernel that quantises x must keep a NaN
// or an infinity in a group's scale rather than drop it. Check applies
// this, and NonFiniteSamples are what the conformance suite runs.
package affine

import (
	"sort"

	"github.com/kcand/kcand/sdk/errdefs"
	"github.com/kcand/kcand/sdk/spec"
)

// Binding names.
const (
	X      = "x"
	Y      = "y"
	Weight = "weight"
	Scales = "scales"
	Biases = "biases"
	Bias   = "bias"
)

// FormatKind is the Format.Kind of affine weights.
const FormatKind = "affine"

// SupportedBits and SupportedGroupSizes are what the contract defines.
var (
	SupportedBits       = []int{2, 3, 4, 5, 6, 8}
	SupportedGroupSizes = []int{32, 64, 128}
)

// Validate checks that req is a well-formed affine request.
func Validate(req spec.Request) error {
	if err := req.Validate(); err != nil {
		return err
	}
	if req.Family != spec.FamilyAffine {
		return errdefs.Invalid("family", req.Family, "want %q", spec.FamilyAffine)
	}
	if req.Weight.Kind != FormatKind {
		return errdefs.Invalid("weight.kind", req.Weight.Kind, "want %q", FormatKind)
	}
	if !contains(SupportedBits, req.Weight.Bits) {
		return errdefs.Invalid("weight.bits", req.Weight.Bits, "want one of %v", SupportedBits)
	}
	if !contains(SupportedGroupSizes, req.Weight.GroupSize) {
		return errdefs.Invalid("weight.group_size", req.Weight.GroupSize, "want one of %v", SupportedGroupSizes)
	}
	if req.InFeatures%req.Weight.GroupSize != 0 {
		return errdefs.Invalid("weight.group_size", req.Weight.GroupSize, "does not divide in_features=%d", req.InFeatures)
	}
	if req.Activation != spec.BF16 {
		return errdefs.Invalid("activation", req.Activation, "the affine family takes %q activations", spec.BF16)
	}
	if req.Experts != 0 || req.TopK != 0 {
		return errdefs.Invalid("experts", req.Experts, "the affine family has no experts")
	}
	return nil
}

// Groups is the number of quantisation groups per output row.
func Groups(req spec.Request) int { return req.InFeatures / req.Weight.GroupSize }

// RowWords is the number of uint32 words of packed q per output row.
func RowWords(req spec.Request) int { return req.InFeatures * req.Weight.Bits / 32 }

// WeightSizes gives the byte size of each weight binding of a valid request.
func WeightSizes(req spec.Request) map[string]int64 {
	out, groups := int64(req.OutFeatures), int64(Groups(req))
	sizes := map[string]int64{
		Weight: out * int64(RowWords(req)) * 4,
		Scales: out * groups * 2,
		Biases: out * groups * 2,
	}
	if req.Bias {
		sizes[Bias] = out * 2
	}
	return sizes
}

// InputSizes gives the byte size of each input binding.
func InputSizes(req spec.Request) map[string]int64 {
	return map[string]int64{X: int64(req.Tokens) * int64(req.InFeatures) * 2}
}

// OutputSizes gives the byte size of each output binding.
func OutputSizes(req spec.Request) map[string]int64 {
	return map[string]int64{Y: int64(req.Tokens) * int64(req.OutFeatures) * 2}
}

// Sized is anything with a byte size, such as a device.Buffer.
type Sized interface{ Size() int64 }

// CheckBindings checks that every binding named in want is present in got
// and large enough.
func CheckBindings[B Sized](want map[string]int64, got map[string]B) error {
	names := make([]string, 0, len(want))
	for name := range want {
		names = append(names, name)
	}
	sort.Strings(names) // report the same binding every time
	for _, name := range names {
		need := want[name]
		b, ok := got[name]
		if !ok {
			return errdefs.Invalid("buffers."+name, "missing", "binding required")
		}
		if b.Size() < need {
			return errdefs.Invalid("buffers."+name, b.Size(), "buffer holds %d bytes, the request needs %d", b.Size(), need)
		}
	}
	return nil
}

// Unpack returns value i of a packed row (see the package comment).
func Unpack(row []byte, i, bits int) uint32 {
	bit := i * bits
	b := bit >> 3
	shift := uint(bit & 7)
	// A value of at most 8 bits spans at most two bytes.
	v := uint32(row[b]) >> shift
	if int(shift)+bits > 8 {
		v |= uint32(row[b+1]) << (8 - shift)
	}
	return v & (1<<bits - 1)
}

// Pack stores q (each below 2^bits) as one packed row.
func Pack(q []uint8, bits int) []byte {
	row := make([]byte, (len(q)*bits+7)/8)
	for i, v := range q {
		bit := i * bits
		b, shift := bit>>3, uint(bit&7)
		w := uint16(v) << shift
		row[b] |= byte(w)
		if int(shift)+bits > 8 {
			row[b+1] |= byte(w >> 8)
		}
	}
	return row
}

func contains(list []int, v int) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// UnpackRow unpacks every value of a packed row into dst. Every run of 8
// values fills exactly bits bytes, so it reads 8 values per step with one
// 64-bit load. len(dst) must be a multiple of 8 (in_features always is).
func UnpackRow(row []byte, bits int, dst []uint8) {
	mask := uint64(1)<<bits - 1
	for base, off := 0, 0; base < len(dst); base, off = base+8, off+bits {
		var chunk uint64
		for k := 0; k < bits; k++ {
			chunk |= uint64(row[off+k]) << (8 * k)
		}
		out := dst[base : base+8 : base+8]
		for j := range out {
			out[j] = uint8(chunk >> (j * bits) & mask)
		}
	}
}
