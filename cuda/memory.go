package cuda

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/kcand/kcand/sdk/errdefs"
)

// DevicePtr is a CUdeviceptr: an address in the GPU's virtual address space.
type DevicePtr uintptr

// legacyStream is the NULL stream. Context-level copies run on it and wait,
// so they are complete when they return.
const legacyStream = 0

// MemAlloc allocates size bytes of device memory (cuMemAlloc_v2). The memory
// is not cleared. Free it with MemFree.
func (c *Context) MemAlloc(size int64) (DevicePtr, error) {
	if size <= 0 {
		return 0, errdefs.Invalid("size", size, "allocation must be positive")
	}
	if size > c.info.MemoryBytes {
		return 0, errdefs.Invalid("size", size, "exceeds the %d bytes of %s", c.info.MemoryBytes, c.info.Name)
	}
	var p DevicePtr
	err := c.Do(func() error {
		var r Result
		p, r = cuMemAlloc(size)
		if r != ResultSuccess {
			return &Error{Op: "cuMemAlloc_v2", Code: r, Detail: fmt.Sprintf("%d bytes", size)}
		}
		return nil
	})
	return p, err
}

// MemFree frees memory from MemAlloc.
func (c *Context) MemFree(p DevicePtr) error {
	if p == 0 {
		return errdefs.Invalid("pointer", p, "null device pointer")
	}
	return c.Do(func() error { return check("cuMemFree_v2", cuMemFree(p)) })
}

// CopyToDevice copies src to dst and waits until the copy is done.
func (c *Context) CopyToDevice(dst DevicePtr, src []byte) error {
	return c.copyToDevice(dst, src, legacyStream)
}

// CopyFromDevice copies len(dst) bytes from src and waits until they arrive.
func (c *Context) CopyFromDevice(dst []byte, src DevicePtr) error {
	return c.copyFromDevice(dst, src, legacyStream)
}

// CopyDevice copies n bytes between device addresses and waits.
func (c *Context) CopyDevice(dst, src DevicePtr, n int64) error {
	if err := c.enqueueCopyDevice(dst, src, n, legacyStream); err != nil {
		return err
	}
	return check("cuStreamSynchronize", cuStreamSynchronize(c.handle, legacyStream))
}

// Memset sets n bytes at dst to value and waits.
func (c *Context) Memset(dst DevicePtr, value byte, n int64) error {
	if err := c.enqueueMemset(dst, value, n, legacyStream); err != nil {
		return err
	}
	return check("cuStreamSynchronize", cuStreamSynchronize(c.handle, legacyStream))
}

func (c *Context) copyToDevice(dst DevicePtr, src []byte, stream uintptr) error {
	if err := c.checkTransfer(dst, int64(len(src))); err != nil || len(src) == 0 {
		return err
	}
	return check("cuMemcpyHtoDAsync_v2", copyToDeviceAndWait(c.handle, dst, src, stream))
}

func (c *Context) copyFromDevice(dst []byte, src DevicePtr, stream uintptr) error {
	if err := c.checkTransfer(src, int64(len(dst))); err != nil || len(dst) == 0 {
		return err
	}
	return check("cuMemcpyDtoHAsync_v2", copyFromDeviceAndWait(c.handle, dst, src, stream))
}

func (c *Context) enqueueCopyDevice(dst, src DevicePtr, n int64, stream uintptr) error {
	if err := c.checkTransfer(dst, n); err != nil || n == 0 {
		return err
	}
	if src == 0 {
		return errdefs.Invalid("src", src, "null device pointer")
	}
	return check("cuMemcpyDtoDAsync_v2", cuMemcpyDtoDAsync(c.handle, dst, src, n, stream))
}

func (c *Context) enqueueMemset(dst DevicePtr, value byte, n int64, stream uintptr) error {
	if err := c.checkTransfer(dst, n); err != nil || n == 0 {
		return err
	}
	return check("cuMemsetD8Async", cuMemsetD8Async(c.handle, dst, value, n, stream))
}

// checkTransfer rejects what the driver would misread: a null address, a
// negative size, use after Close.
func (c *Context) checkTransfer(p DevicePtr, n int64) error {
	switch {
	case c.closed.Load():
		return ErrClosed
	case n < 0:
		return errdefs.Invalid("size", n, "negative byte count")
	case p == 0 && n > 0:
		return errdefs.Invalid("pointer", p, "null device pointer")
	}
	return nil
}

// HostBuffer is page-locked host memory (cuMemAllocHost_v2): the GPU reads
// and writes it by DMA, so copies to and from it are fast and truly
// asynchronous (Stream.CopyToDeviceAsync, Stream.CopyFromDeviceAsync).
type HostBuffer struct {
	ctx  *Context
	mu   sync.Mutex
	ptr  unsafe.Pointer
	size int64
}

// AllocHost allocates size bytes of pinned host memory.
func (c *Context) AllocHost(size int64) (*HostBuffer, error) {
	if size <= 0 {
		return nil, errdefs.Invalid("size", size, "allocation must be positive")
	}
	h := &HostBuffer{ctx: c, size: size}
	err := c.Do(func() error {
		var r Result
		h.ptr, r = cuMemAllocHost(size)
		if r != ResultSuccess {
			return &Error{Op: "cuMemAllocHost_v2", Code: r, Detail: fmt.Sprintf("%d bytes", size)}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return h, nil
}

// Bytes is the buffer's memory; nil after Free.
func (h *HostBuffer) Bytes() []byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ptr == nil {
		return nil
	}
	return unsafe.Slice((*byte)(h.ptr), h.size)
}

// Size is the buffer's length in bytes.
func (h *HostBuffer) Size() int64 { return h.size }

// Free releases the memory. Copies in flight must have finished.
func (h *HostBuffer) Free() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ptr == nil {
		return nil
	}
	p := h.ptr
	h.ptr = nil
	return h.ctx.Do(func() error { return check("cuMemFreeHost", cuMemFreeHost(p)) })
}

// rangeOf returns the address of [offset, offset+n) of the buffer.
func (h *HostBuffer) rangeOf(offset, n int64) (unsafe.Pointer, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ptr == nil {
		return nil, errdefs.Invalid("host buffer", "freed", "buffer was freed")
	}
	if offset < 0 || n < 0 || offset > h.size || n > h.size-offset {
		return nil, errdefs.Invalid("host range", fmt.Sprintf("[%d,%d)", offset, offset+n), "outside host buffer of %d bytes", h.size)
	}
	return unsafe.Add(h.ptr, offset), nil
}
