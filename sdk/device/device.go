// Package device is the memory and execution abstraction that the host and
// every plugin share. The host owns every allocation; it exports a Handle for
// a buffer, and a plugin opens that handle in its own process to read and
// write the same memory. Two implementations exist: the CPU device
// (sdk/device/cpu, shared memory files) and the CUDA device (cuda/, IPC
// memory handles).
package device

import (
	"fmt"

	"github.com/kcand/kcand/sdk/errdefs"
)

// Kind names a device implementation.
type Kind string

// The device kinds.
const (
	CPU  Kind = "cpu"
	CUDA Kind = "cuda"
)

// ParseKind checks that s names a known device kind.
func ParseKind(s string) (Kind, error) {
	switch Kind(s) {
	case CPU, CUDA:
		return Kind(s), nil
	}
	return "", errdefs.Invalid("device", s, "want %q or %q", CPU, CUDA)
}

// Handle names a byte range of one host-owned allocation so that another
// process can open it. It carries no pointer: only what the device needs to
// map the allocation again (a shared-memory path, a CUDA IPC handle).
type Handle struct {
	// Kind is the device the allocation lives on.
	Kind Kind
	// Owner is the process id of the exporting process.
	Owner int
	// Allocation identifies the allocation within its owner; an opener
	// caches one mapping per (Owner, Allocation).
	Allocation uint64
	// AllocationSize is the size in bytes of the whole allocation.
	AllocationSize int64
	// Token is the device-specific name of the allocation.
	Token []byte
	// Offset and Size select the range this handle grants.
	Offset int64
	Size   int64
}

// Validate checks that the handle's range lies inside its allocation.
func (h Handle) Validate() error {
	switch {
	case h.Kind != CPU && h.Kind != CUDA:
		return errdefs.Invalid("handle.kind", h.Kind, "unknown device kind")
	case h.AllocationSize <= 0:
		return errdefs.Invalid("handle.allocation_size", h.AllocationSize, "must be positive")
	case h.Offset < 0 || h.Offset > h.AllocationSize:
		return errdefs.Invalid("handle.offset", h.Offset, "outside allocation of %d bytes", h.AllocationSize)
	case h.Size < 0 || h.Size > h.AllocationSize-h.Offset:
		return errdefs.Invalid("handle.size", h.Size, "range [%d,%d) exceeds allocation of %d bytes", h.Offset, h.Offset+h.Size, h.AllocationSize)
	case len(h.Token) == 0:
		return errdefs.Invalid("handle.token", "", "empty")
	}
	return nil
}

// String describes the handle for logs.
func (h Handle) String() string {
	return fmt.Sprintf("%s:%d/%d[%d:+%d]", h.Kind, h.Owner, h.Allocation, h.Offset, h.Size)
}

// Buffer is a range of device memory: owned by this process (from Alloc) or
// opened from another process's handle (from Open).
type Buffer interface {
	// Size is the length of the range in bytes.
	Size() int64
	// Handle exports the range so another process can open it.
	Handle() (Handle, error)
}

// HostMemory is implemented by buffers that the CPU can address directly.
type HostMemory interface {
	Bytes() []byte
}

// DeviceMemory is implemented by buffers that live in GPU memory.
type DeviceMemory interface {
	DevicePointer() uintptr
}

// Profile describes the hardware behind a device: enough to decide
// admission and to validate cached plans.
type Profile struct {
	Kind              Kind
	Name              string
	UUID              string
	ComputeCapability string
	Multiprocessors   int
	MemoryBytes       int64
	L2Bytes           int64
	Driver            string
	// Limits bound kernel launches; zero on devices that launch no kernels.
	Limits Limits
}

// Limits are a GPU's launch limits, used to validate launch plans.
type Limits struct {
	MaxThreadsPerBlock int
	MaxBlockDim        [3]int
	MaxGridDim         [3]int
	// MaxSharedPerBlock is the opt-in maximum of dynamic shared memory.
	MaxSharedPerBlock int
}

// Device allocates, copies and shares memory, and runs work in order.
type Device interface {
	// Kind names the implementation.
	Kind() Kind
	// Profile describes the hardware.
	Profile() Profile
	// Alloc returns a new zero-filled buffer of size bytes owned by this process.
	Alloc(size int64) (Buffer, error)
	// Free releases a buffer from Alloc. Handles exported from it become invalid.
	Free(b Buffer) error
	// Write copies src into dst at offset.
	Write(dst Buffer, offset int64, src []byte) error
	// Read copies len(dst) bytes from src at offset.
	Read(dst []byte, src Buffer, offset int64) error
	// Fill sets every byte of b to value (used to poison outputs).
	Fill(b Buffer, value byte) error
	// Open maps a range exported by another process. Mappings are cached per
	// allocation; Open of a handle this process exported is an error.
	Open(h Handle) (Buffer, error)
	// Forget drops the cached mapping of an allocation opened with Open.
	Forget(owner int, allocation uint64) error
	// Synchronize waits until all work issued to the device has finished.
	Synchronize() error
	// Close frees everything this device allocated or opened.
	Close() error
}

// FreeWatcher is an optional upgrade of Device: a device that tells its
// owner about each Free before the memory goes. The host uses it to have
// plugins drop their mappings of a buffer an engine frees: another
// process's mapping keeps the memory in use after the owner's free (and
// some CUDA drivers refuse to open the next allocation at that memory).
type FreeWatcher interface {
	// WatchFree registers fn, replacing any earlier one (nil removes it).
	// Free calls it with the allocation's id after the buffer is checked
	// and before its memory is released; fn's error is returned by Free,
	// joined with Free's own, and the memory is released whatever fn
	// returns.
	WatchFree(fn func(allocation uint64) error)
}

// CheckRange reports whether [offset, offset+n) fits in a buffer of size.
func CheckRange(field string, size, offset, n int64) error {
	if offset < 0 || n < 0 || offset > size || n > size-offset {
		return errdefs.Invalid(field, fmt.Sprintf("[%d,%d)", offset, offset+n), "outside buffer of %d bytes", size)
	}
	return nil
}

// Stream is an ordered queue of work on a device. The CPU device has no
// streams: its work is complete when the call that issued it returns, so a
// nil Stream is valid there.
type Stream interface {
	Synchronize() error
}
