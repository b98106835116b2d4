package host

import (
	bin "encoding/binary"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kcand/kcand/cuda"
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

// Two launches sharing x and a fixed weight, as a multi-step plan does.
func twoLaunchBindings(t *testing.T) (*planBindings, [][]sdk.Param, [][]int) {
	t.Helper()
	params := [][]sdk.Param{
		{sdk.BufferParam("x"), sdk.BufferParam("weight"), sdk.Int32Param(7)},
		{sdk.BufferParam("weight"), {Buffer: "y", Offset: 256}, sdk.BufferParam("x")},
	}
	fixed := map[string]device.Buffer{"weight": gpuBuffer{size: 4096, ptr: 0x10000}}
	b, slots, err := newPlanBindings(params, fixed, map[string]int64{"x": 1024, "y": 2048})
	require.NoError(t, err)
	return b, params, slots
}

// wantArgs is what pack should build for params with the given buffer
// addresses (in parameter order).
func wantArgs(params []sdk.Param, addrs ...uint64) *cuda.Args {
	args := cuda.NewArgs()
	for _, p := range params {
		if p.Buffer == "" {
			args.Bytes(p.Scalar, len(p.Scalar))
			continue
		}
		args.Uint64(addrs[0])
		addrs = addrs[1:]
	}
	return args
}

func packed(b *planBindings, params []sdk.Param, slots []int) *cuda.Args {
	args := cuda.NewArgs()
	b.pack(args, params, slots)
	return args
}

// Each name is indexed once however many launches use it, and a run packs
// the caller's buffers and the fixed ones at their offsets; a run whose io
// also holds a fixed name replaces it for that run only.
func TestPlanBindingsPackEveryLaunch(t *testing.T) {
	b, params, slots := twoLaunchBindings(t)
	assert.Equal(t, []string{"x", "weight", "y"}, b.names)
	assert.Equal(t, [][]int{{0, 1, -1}, {1, 2, 0}}, slots)

	io := map[string]device.Buffer{"x": gpuBuffer{size: 1024, ptr: 0x20000}, "y": gpuBuffer{size: 2048, ptr: 0x30000}}
	require.NoError(t, b.resolve(io))
	assert.Equal(t, wantArgs(params[0], 0x20000, 0x10000), packed(b, params[0], slots[0]))
	assert.Equal(t, wantArgs(params[1], 0x10000, 0x30100, 0x20000), packed(b, params[1], slots[1]))

	io["weight"] = gpuBuffer{size: 4096, ptr: 0x40000} // a rotated copy of the weights
	require.NoError(t, b.resolve(io))
	assert.Equal(t, wantArgs(params[0], 0x20000, 0x40000), packed(b, params[0], slots[0]))
	delete(io, "weight")
	require.NoError(t, b.resolve(io))
	assert.Equal(t, wantArgs(params[0], 0x20000, 0x10000), packed(b, params[0], slots[0]), "the fixed weight is back")
}

// A run's buffer that is missing, not GPU memory, or smaller than the plan
// was validated against (its own, or one replacing a fixed weight) is a
// field error naming it and its size.
func TestPlanBindingsRefuseBadBuffers(t *testing.T) {
	x, y := gpuBuffer{size: 1024, ptr: 0x20000}, gpuBuffer{size: 2048, ptr: 0x30000}
	for _, c := range []struct {
		name  string
		io    map[string]device.Buffer
		field string
		value any
	}{
		{"short input", map[string]device.Buffer{"x": gpuBuffer{size: 1000, ptr: 1}, "y": y}, "io.x", int64(1000)},
		{"short output", map[string]device.Buffer{"x": x, "y": gpuBuffer{size: 2047, ptr: 1}}, "io.y", int64(2047)},
		{"short weight replacement", map[string]device.Buffer{"x": x, "y": y, "weight": gpuBuffer{size: 4095, ptr: 1}}, "io.weight", int64(4095)},
		{"missing output", map[string]device.Buffer{"x": x, "weight": gpuBuffer{size: 4096, ptr: 1}}, "io.y", "missing"},
		{"host memory", map[string]device.Buffer{"x": hostBuffer{size: 1024}, "y": y}, "io.x", "host.hostBuffer"},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, _, _ := twoLaunchBindings(t)
			assertFieldError(t, b.resolve(c.io), c.field, c.value)
		})
	}
	_, _, err := newPlanBindings([][]sdk.Param{{sdk.BufferParam("weight")}}, map[string]device.Buffer{"weight": hostBuffer{size: 8}}, nil)
	assert.ErrorIs(t, err, errdefs.ErrInvalidRequest, "a fixed binding must be GPU memory")
}

// A tensor-map parameter is packed, 64-byte aligned, as the encoding over
// its buffer's address at its offset; each address is encoded once however
// often runs return to it (weight rotation cycles through copies), and an
// encoding the driver refuses is an error naming the buffer.
func TestPlanBindingsEncodeTensorMaps(t *testing.T) {
	desc := cuda.TensorMapDesc{DataType: cuda.TensorU32, Dims: []uint64{64, 8}, Strides: []uint64{256}, Box: []uint32{32, 8}, Swizzle: 128}
	params := [][]sdk.Param{{{Buffer: "weight", Offset: 32, TensorMap: &desc}, sdk.BufferParam("y"), sdk.Int32Param(5)}}
	fixed := map[string]device.Buffer{"weight": gpuBuffer{size: 4096, ptr: 0x10000}}
	b, slots, err := newPlanBindings(params, fixed, map[string]int64{"y": 64})
	require.NoError(t, err)
	assert.Equal(t, [][]int{{mapSlot(0), 1, scalarSlot}}, slots)
	var encoded []cuda.DevicePtr
	b.encode = func(d cuda.TensorMapDesc, addr cuda.DevicePtr) (cuda.TensorMap, error) {
		assert.Equal(t, desc, d)
		encoded = append(encoded, addr)
		var m cuda.TensorMap
		bin.LittleEndian.PutUint64(m[:], uint64(addr))
		m[127] = 0x7E
		return m, nil
	}
	mapAt := func(addr uint64) *cuda.Args {
		var m cuda.TensorMap
		bin.LittleEndian.PutUint64(m[:], addr)
		m[127] = 0x7E
		return cuda.NewArgs().TensorMap(&m).Uint64(0x30000).Int32(5)
	}
	require.NoError(t, b.encodeFixed(), "load encodes the maps over fixed buffers")
	assert.Equal(t, []cuda.DevicePtr{0x10020}, encoded)
	io := map[string]device.Buffer{"y": gpuBuffer{size: 64, ptr: 0x30000}}
	require.NoError(t, b.resolve(io))
	assert.Equal(t, mapAt(0x10020), packed(b, params[0], slots[0]))
	io["weight"] = gpuBuffer{size: 4096, ptr: 0x40000} // a rotated copy
	require.NoError(t, b.resolve(io))
	assert.Equal(t, mapAt(0x40020), packed(b, params[0], slots[0]))
	delete(io, "weight")
	for range 3 {
		require.NoError(t, b.resolve(io))
	}
	assert.Equal(t, mapAt(0x10020), packed(b, params[0], slots[0]), "the fixed weight's map is back")
	assert.Equal(t, []cuda.DevicePtr{0x10020, 0x40020}, encoded, "each address is encoded once")

	// More addresses than a map keeps: the encodings start over, and an
	// address seen before the reset is encoded again.
	for i := range maxEncodedAddresses + 1 {
		io["weight"] = gpuBuffer{size: 4096, ptr: uintptr(0x100000 + 0x10000*i)}
		require.NoError(t, b.resolve(io))
	}
	encoded = nil
	io["weight"] = gpuBuffer{size: 4096, ptr: 0x40000}
	require.NoError(t, b.resolve(io))
	assert.Equal(t, []cuda.DevicePtr{0x40020}, encoded, "forgotten after the reset")
	assert.LessOrEqual(t, len(b.maps[0].earlier), maxEncodedAddresses)

	b.encode = func(cuda.TensorMapDesc, cuda.DevicePtr) (cuda.TensorMap, error) {
		return cuda.TensorMap{}, errdefs.Invalid("tensor map address", "0x50008", "must be a non-null multiple of 16")
	}
	io["weight"] = gpuBuffer{size: 4096, ptr: 0x50000 - 24}
	assertFieldError(t, b.resolve(io), "io.weight", "0x50008")

	// A driver that cannot encode fails the load, naming the fixed buffer,
	// and keeps its error class.
	b, _, err = newPlanBindings(params, fixed, map[string]int64{"y": 64})
	require.NoError(t, err)
	b.encode = func(cuda.TensorMapDesc, cuda.DevicePtr) (cuda.TensorMap, error) {
		return cuda.TensorMap{}, errdefs.Unsupported("cuda driver has no cuTensorMapEncodeTiled (added in CUDA 12.0)")
	}
	err = b.encodeFixed()
	assert.ErrorIs(t, err, errdefs.ErrUnsupported)
	assert.Contains(t, err.Error(), "fixed.weight")
}

// A plan launch's shape, shared memory and early start reach the driver's
// launch configuration unchanged.
func TestLaunchConfigCarriesEarlyStart(t *testing.T) {
	ln := sdk.Launch{Grid: [3]uint32{7, 2, 1}, Block: [3]uint32{384, 1, 1}, SharedBytes: 1 << 17, Programmatic: true}
	want := cuda.LaunchConfig{Grid: cuda.Dim3{X: 7, Y: 2, Z: 1}, Block: cuda.Dim3{X: 384, Y: 1, Z: 1}, SharedMemoryBytes: 1 << 17, Programmatic: true}
	assert.Equal(t, want, launchConfig(ln))
	ln.Programmatic = false
	assert.False(t, launchConfig(ln).Programmatic)
}

// A run that binds the same buffers again allocates nothing while it
// resolves and packs them: this is the exported path's per-call work.
func TestResolveAndPackDoNotAllocate(t *testing.T) {
	b, params, slots := twoLaunchBindings(t)
	io := map[string]device.Buffer{"x": gpuBuffer{size: 1024, ptr: 0x20000}, "y": gpuBuffer{size: 2048, ptr: 0x30000}}
	args := []*cuda.Args{cuda.NewArgs(), cuda.NewArgs()}
	run := func() {
		require.NoError(t, b.resolve(io))
		for i := range params {
			b.pack(args[i], params[i], slots[i])
		}
	}
	run()
	assert.Zero(t, testing.AllocsPerRun(100, run))
}
