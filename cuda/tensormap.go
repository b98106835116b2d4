package cuda

import (
	"fmt"
	"math"
	"math/bits"

	"github.com/kcand/kcand/sdk/errdefs"
)

// TensorMapDataType is the element type of a tensor map. The names are the
// short ones plans use; the driver's enum (CUtensorMapDataType) is an
// implementation detail of EncodeTensorMap.
type TensorMapDataType string

// The element types a tensor map may have.
const (
	TensorU8   TensorMapDataType = "u8"
	TensorU16  TensorMapDataType = "u16"
	TensorU32  TensorMapDataType = "u32"
	TensorI32  TensorMapDataType = "i32"
	TensorU64  TensorMapDataType = "u64"
	TensorI64  TensorMapDataType = "i64"
	TensorF16  TensorMapDataType = "f16"
	TensorF32  TensorMapDataType = "f32"
	TensorF64  TensorMapDataType = "f64"
	TensorBF16 TensorMapDataType = "bf16"
)

// tensorTypes gives each element type its CUtensorMapDataType value and
// its size in bytes.
var tensorTypes = map[TensorMapDataType]struct{ code, size int }{
	TensorU8: {0, 1}, TensorU16: {1, 2}, TensorU32: {2, 4}, TensorI32: {3, 4}, TensorU64: {4, 8},
	TensorI64: {5, 8}, TensorF16: {6, 2}, TensorF32: {7, 4}, TensorF64: {8, 8}, TensorBF16: {9, 2},
}

// Size is the element size in bytes, 0 for an unknown type.
func (t TensorMapDataType) Size() int { return tensorTypes[t].size }

// The driver's limits on a tiled tensor map (cuTensorMapEncodeTiled).
const (
	maxTensorRank     = 5
	maxTensorBox      = 256
	maxTensorDim      = 1 << 32
	maxTensorStride   = 1 << 40
	tensorStrideAlign = 16
	tensorAddrAlign   = 16
)

// TensorMapDesc describes a tiled tensor map: a view of a buffer as a
// tensor of up to five dimensions, and the box (tile) one tensor copy
// (cp.async.bulk.tensor, Hopper's TMA) moves into shared memory. Elements
// past the tensor's end arrive as zeros.
type TensorMapDesc struct {
	DataType TensorMapDataType
	// Dims are the elements in each dimension, innermost (contiguous)
	// first.
	Dims []uint64
	// Strides are the bytes between consecutive indices of Dims[1:], one
	// fewer than Dims; each a multiple of 16.
	Strides []uint64
	// Box is the elements a copy moves in each dimension (1 to 256); the
	// innermost box row must be a multiple of 16 bytes.
	Box []uint32
	// Swizzle is the span in bytes (0, 32, 64 or 128) over which the box's
	// rows are swizzled in shared memory; the innermost box row may not
	// exceed it. 0 leaves them in order.
	Swizzle int
	// L2Promotion is the L2 fetch size in bytes (0, 64, 128 or 256) the
	// copies ask for; 0 is the driver's default.
	L2Promotion int
}

// TensorMap is an encoded tensor map (CUtensorMap): 128 opaque bytes a kernel
// takes by value, as a const __grid_constant__ CUtensorMap parameter,
// 64-byte aligned (Args.TensorMap packs it so).
type TensorMap [128]byte

// Check applies the driver's documented rules to d, so that a bad
// description is an error naming the field (under field) and its value, not
// a bare CUDA_ERROR_INVALID_VALUE.
func (d TensorMapDesc) Check(field string) error {
	size := d.DataType.Size()
	rank := len(d.Dims)
	switch {
	case size == 0:
		return errdefs.Invalid(field+".dtype", d.DataType, "want one of u8, u16, u32, i32, u64, i64, f16, f32, f64, bf16")
	case rank < 1 || rank > maxTensorRank:
		return errdefs.Invalid(field+".dims", rank, "a tensor map has 1 to %d dimensions", maxTensorRank)
	case len(d.Strides) != rank-1:
		return errdefs.Invalid(field+".strides", len(d.Strides), "want %d strides, one per dimension after the first", rank-1)
	case len(d.Box) != rank:
		return errdefs.Invalid(field+".box", len(d.Box), "want %d box sizes, one per dimension", rank)
	}
	for i, n := range d.Dims {
		if n < 1 || n > maxTensorDim {
			return errdefs.Invalid(fmt.Sprintf("%s.dims[%d]", field, i), n, "must be 1 to 2^32 elements")
		}
	}
	span := d.Dims[0] * uint64(size) // bytes one index of the next dimension must step over
	for i, s := range d.Strides {
		switch {
		case s%tensorStrideAlign != 0 || s >= maxTensorStride:
			return errdefs.Invalid(fmt.Sprintf("%s.strides[%d]", field, i), s, "must be a multiple of %d below 2^40", tensorStrideAlign)
		case s < span:
			return errdefs.Invalid(fmt.Sprintf("%s.strides[%d]", field, i), s, "overlaps the dimension below it (%d bytes)", span)
		}
		hi, lo := bits.Mul64(s, d.Dims[i+1])
		if hi != 0 || lo > math.MaxInt64 {
			return errdefs.Invalid(fmt.Sprintf("%s.dims[%d]", field, i+1), d.Dims[i+1], "the tensor would span more than 2^63 bytes")
		}
		span = lo
	}
	if _, ok := d.extent(); !ok {
		return errdefs.Invalid(field+".dims", d.Dims, "the tensor would span more than 2^63 bytes")
	}
	for i, b := range d.Box {
		if b < 1 || b > maxTensorBox {
			return errdefs.Invalid(fmt.Sprintf("%s.box[%d]", field, i), b, "must be 1 to %d elements", maxTensorBox)
		}
	}
	row := int(d.Box[0]) * size
	switch {
	case row%16 != 0:
		return errdefs.Invalid(field+".box[0]", d.Box[0], "a box row of %d bytes: must be a multiple of 16", row)
	case d.Swizzle != 0 && d.Swizzle != 32 && d.Swizzle != 64 && d.Swizzle != 128:
		return errdefs.Invalid(field+".swizzle", d.Swizzle, "want 0, 32, 64 or 128 bytes")
	case d.Swizzle != 0 && row > d.Swizzle:
		return errdefs.Invalid(field+".box[0]", d.Box[0], "a box row of %d bytes exceeds the %d-byte swizzle", row, d.Swizzle)
	case d.L2Promotion != 0 && d.L2Promotion != 64 && d.L2Promotion != 128 && d.L2Promotion != 256:
		return errdefs.Invalid(field+".l2_promotion", d.L2Promotion, "want 0, 64, 128 or 256 bytes")
	}
	return nil
}

// Extent is how many bytes from its base address the tensor reaches: the
// size a buffer must have for the map to stay inside it. d must have passed
// Check, which refuses a tensor whose extent does not fit an int64.
func (d TensorMapDesc) Extent() int64 {
	n, _ := d.extent()
	return int64(n)
}

// extent is Extent, and false when it overflows an int64.
func (d TensorMapDesc) extent() (uint64, bool) {
	n := d.Dims[0] * uint64(d.DataType.Size())
	for i, s := range d.Strides {
		hi, step := bits.Mul64(s, d.Dims[i+1]-1)
		var carry uint64
		n, carry = bits.Add64(n, step, 0)
		if hi != 0 || carry != 0 || n > math.MaxInt64 {
			return 0, false
		}
	}
	return n, true
}

// BoxBytes is the bytes one copy of a whole box moves (what a kernel tells
// its barrier to expect).
func (d TensorMapDesc) BoxBytes() int {
	n := d.DataType.Size()
	for _, b := range d.Box {
		n *= int(b)
	}
	return n
}

// EncodeTensorMap encodes d over the tensor at addr (cuTensorMapEncodeTiled,
// CUDA 12.0+; on an older driver the error wraps errdefs.ErrUnsupported).
// addr must be 16-byte aligned. The map holds the address: a kernel given it
// reads that memory until the map is encoded again over another.
func (c *Context) EncodeTensorMap(d TensorMapDesc, addr DevicePtr) (TensorMap, error) {
	var m TensorMap
	if err := d.Check("tensor map"); err != nil {
		return m, err
	}
	if addr%tensorAddrAlign != 0 || addr == 0 {
		return m, errdefs.Invalid("tensor map address", fmt.Sprintf("%#x", uint64(addr)), "must be a non-null multiple of %d", tensorAddrAlign)
	}
	if c.closed.Load() {
		return m, ErrClosed
	}
	var dims [maxTensorRank]uint64
	var strides [maxTensorRank]uint64
	var box, elementStrides [maxTensorRank]uint32
	copy(dims[:], d.Dims)
	copy(strides[:], d.Strides)
	copy(box[:], d.Box)
	for i := range d.Dims {
		elementStrides[i] = 1
	}
	r := cuTensorMapEncodeTiled(c.handle, &m, tensorTypes[d.DataType].code, len(d.Dims), addr,
		&dims, &strides, &box, &elementStrides, swizzleCode(d.Swizzle), l2PromotionCode(d.L2Promotion))
	if err := checkOptional("cuTensorMapEncodeTiled", "12.0", r); err != nil {
		return m, fmt.Errorf("encode tensor map %s dims %v box %v: %w", d.DataType, d.Dims, d.Box, err)
	}
	return m, nil
}

// swizzleCode is CUtensorMapSwizzle for a span in bytes.
func swizzleCode(bytes int) int {
	switch bytes {
	case 32:
		return 1
	case 64:
		return 2
	case 128:
		return 3
	}
	return 0
}

// l2PromotionCode is CUtensorMapL2promotion for a fetch size in bytes.
func l2PromotionCode(bytes int) int {
	switch bytes {
	case 64:
		return 1
	case 128:
		return 2
	case 256:
		return 3
	}
	return 0
}

// TensorMap appends an encoded tensor map (a const __grid_constant__
// CUtensorMap parameter) at the 64-byte alignment the type has.
func (a *Args) TensorMap(m *TensorMap) *Args { return a.Bytes(m[:], 64) }
