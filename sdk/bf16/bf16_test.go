package bf16

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestRounding(t *testing.T) {
	assert.Equal(t, uint16(0x3f80), FromFloat32(1))
	assert.Equal(t, float32(1), ToFloat32(0x3f80))
	// 1 + 2^-8 is halfway between two bf16 values: ties go to even (1).
	assert.Equal(t, float32(1), Round(1+1.0/256))
	// just above halfway rounds up
	assert.Equal(t, float32(1+1.0/128), Round(1+1.0/256+1.0/4096))
	assert.True(t, math.IsNaN(float64(ToFloat32(FromFloat32(float32(math.NaN()))))))
	assert.True(t, math.IsInf(float64(ToFloat32(FromFloat32(float32(math.Inf(-1))))), -1))
	assert.Equal(t, []float32{1.5, -2}, Decode(Encode([]float32{1.5, -2})))
}
