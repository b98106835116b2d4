package cuda

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/kcand/kcand/sdk/device"
	"github.com/kcand/kcand/sdk/errdefs"
)

// nextAllocation numbers this process's allocations; with the pid it names
// an allocation to every other process.
var nextAllocation atomic.Uint64

// allocation is one cuMemAlloc allocation, owned by this process or mapped
// from another's IPC handle.
type allocation struct {
	id    uint64
	owner int
	size  int64
	base  DevicePtr
	gone  atomic.Bool // freed or forgotten: every buffer on it is dead

	exportOnce sync.Once
	token      IPCHandle
	exportErr  error
}

// buffer is a range of an allocation; it implements device.Buffer and
// device.DeviceMemory.
type buffer struct {
	dev    *Device
	alloc  *allocation
	offset int64
	size   int64
}

var (
	_ device.Buffer       = (*buffer)(nil)
	_ device.DeviceMemory = (*buffer)(nil)
)

// Size implements device.Buffer.
func (b *buffer) Size() int64 { return b.size }

// DevicePointer implements device.DeviceMemory: the address of the range,
// or 0 once the allocation is freed or forgotten.
func (b *buffer) DevicePointer() uintptr {
	if b.alloc.gone.Load() {
		return 0
	}
	return uintptr(b.alloc.base) + uintptr(b.offset)
}

// Handle implements device.Buffer. The IPC handle is made on first export;
// a buffer opened from another process re-exports the owner's handle.
func (b *buffer) Handle() (device.Handle, error) {
	a := b.alloc
	if a.gone.Load() {
		return device.Handle{}, errdefs.Invalid("buffer", a.id, "freed")
	}
	a.exportOnce.Do(func() {
		if a.exportErr == nil && a.token == (IPCHandle{}) {
			a.token, a.exportErr = b.dev.ctx.ExportMemory(a.base)
		}
	})
	if a.exportErr != nil {
		return device.Handle{}, a.exportErr
	}
	return device.Handle{
		Kind:           device.CUDA,
		Owner:          a.owner,
		Allocation:     a.id,
		AllocationSize: a.size,
		Token:          append([]byte(nil), a.token[:]...),
		Offset:         b.offset,
		Size:           b.size,
	}, nil
}

// Slice returns the sub-range [offset, offset+size) of a CUDA buffer.
func Slice(b device.Buffer, offset, size int64) (device.Buffer, error) {
	cb, ok := b.(*buffer)
	if !ok {
		return nil, errdefs.Invalid("buffer", fmt.Sprintf("%T", b), "not a CUDA buffer")
	}
	if err := device.CheckRange("slice", cb.size, offset, size); err != nil {
		return nil, err
	}
	return &buffer{dev: cb.dev, alloc: cb.alloc, offset: cb.offset + offset, size: size}, nil
}

// liveBuffer checks that b is a live buffer of d.
func (d *Device) liveBuffer(field string, b device.Buffer) (*buffer, error) {
	cb, ok := b.(*buffer)
	switch {
	case !ok:
		return nil, errdefs.Invalid(field, fmt.Sprintf("%T", b), "not a CUDA buffer")
	case cb.dev != d:
		return nil, errdefs.Invalid(field, cb.alloc.id, "buffer belongs to another device")
	case cb.alloc.gone.Load():
		return nil, errdefs.Invalid(field, cb.alloc.id, "buffer was freed")
	}
	return cb, nil
}
