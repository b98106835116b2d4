package host

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kcand/kcand/sdk"
	"github.com/kcand/kcand/sdk/device"
	"github.com/kcand/kcand/sdk/errdefs"
)

// gpuBuffer stands for a GPU allocation: a size and a device address.
type gpuBuffer struct {
	size int64
	ptr  uintptr
}

func (b gpuBuffer) Size() int64                    { return b.size }
func (b gpuBuffer) Handle() (device.Handle, error) { return device.Handle{}, nil }
func (b gpuBuffer) DevicePointer() uintptr         { return b.ptr }

// hostBuffer is memory the CPU addresses, which a kernel cannot take.
type hostBuffer struct{ size int64 }

func (b hostBuffer) Size() int64                    { return b.size }
func (b hostBuffer) Handle() (device.Handle, error) { return device.Handle{}, nil }

// A run of an exported plan binds each buffer parameter from io or the
// fixed bindings, at its offset, and refuses a buffer smaller than the plan
// was validated against (an io buffer, or one replacing a fixed weight)
// with an error naming the binding and the size, before anything launches.
func TestExportedRunBindsOnlyBuffersLargeEnough(t *testing.T) {
	fixed := map[string]device.Buffer{"weight": gpuBuffer{size: 4096, ptr: 0x10000}}
	l := &cudaLaunch{
		params: []sdk.Param{sdk.BufferParam("x"), sdk.BufferParam("weight"), sdk.Int32Param(7), {Buffer: "y", Offset: 256}},
		needs:  []int64{1024, 4096, 0, 2048},
	}
	p := &cudaPlan{fixed: fixed, launches: []*cudaLaunch{l}}

	io := map[string]device.Buffer{"x": gpuBuffer{size: 1024, ptr: 0x20000}, "y": gpuBuffer{size: 4096, ptr: 0x30000}}
	for j, want := range map[int]uintptr{0: 0x20000, 1: 0x10000, 3: 0x30100} {
		ptr, err := p.bind(l, j, io)
		require.NoError(t, err)
		assert.Equal(t, want, uintptr(ptr), "param %d", j)
	}

	for _, c := range []struct {
		name string
		io   map[string]device.Buffer
		j    int
		want string
	}{
		{"short input", map[string]device.Buffer{"x": gpuBuffer{size: 1000, ptr: 1}}, 0, "io.x"},
		{"short output", map[string]device.Buffer{"y": gpuBuffer{size: 2047, ptr: 1}}, 3, "buffer holds 2047 bytes, needs 2048"},
		{"short weight override", map[string]device.Buffer{"weight": gpuBuffer{size: 4095, ptr: 1}}, 1, "io.weight"},
		{"missing", map[string]device.Buffer{}, 0, "binding required"},
		{"host memory", map[string]device.Buffer{"x": hostBuffer{size: 1024}}, 0, "not GPU memory"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := p.bind(l, c.j, c.io)
			require.Error(t, err)
			assert.True(t, errors.Is(err, errdefs.ErrInvalidRequest), "%v", err)
			assert.Contains(t, err.Error(), c.want)
		})
	}
}
