// Package bf16 converts between bfloat16 and wider floats and reads and
// writes bf16 tensors stored little-endian in byte slices.
package bf16

import (
	"encoding/binary"
	"math"
)

// FromFloat32 rounds f to the nearest bfloat16 (ties to even); NaN stays NaN.
func FromFloat32(f float32) uint16 {
	bits := math.Float32bits(f)
	if f != f {
		return uint16(bits>>16) | 0x40
	}
	rounding := uint32(0x7fff) + (bits>>16)&1
	return uint16((bits + rounding) >> 16)
}

// FromFloat64 rounds f to bfloat16 through float32.
func FromFloat64(f float64) uint16 { return FromFloat32(float32(f)) }

// ToFloat32 widens a bfloat16 exactly.
func ToFloat32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// Round returns f rounded to the nearest bfloat16 value.
func Round(f float32) float32 { return ToFloat32(FromFloat32(f)) }

// Get reads element i of a bf16 tensor stored in b.
func Get(b []byte, i int) float32 { return ToFloat32(binary.LittleEndian.Uint16(b[2*i:])) }

// Set writes element i of a bf16 tensor stored in b.
func Set(b []byte, i int, f float32) { binary.LittleEndian.PutUint16(b[2*i:], FromFloat32(f)) }

// Encode stores values as bf16 into a new byte slice.
func Encode(values []float32) []byte {
	b := make([]byte, 2*len(values))
	for i, v := range values {
		Set(b, i, v)
	}
	return b
}

// Decode widens a bf16 byte slice to float32 values.
func Decode(b []byte) []float32 {
	out := make([]float32, len(b)/2)
	for i := range out {
		out[i] = Get(b, i)
	}
	return out
}
