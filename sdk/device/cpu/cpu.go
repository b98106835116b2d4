// Package cpu is the CPU device: buffers are anonymous shared-memory files
// (memfd) mapped into the owner, and another process opens one through
// /proc/<owner>/fd/<fd>. When the owner exits its files vanish with it, so a
// dead host leaks nothing and a dead plugin only drops its mappings.
package cpu

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/kcand/kcand/sdk/device"
	"github.com/kcand/kcand/sdk/errdefs"
)

// maxAllocation bounds one allocation (64 GiB) so a bad size is an error, not an OOM.
const maxAllocation = 64 << 30

var nextAllocation atomic.Uint64

// Device is the CPU implementation of device.Device. It is safe for
// concurrent use.
type Device struct {
	mu     sync.Mutex
	owned  map[uint64]*allocation
	opened map[mappingKey]*allocation
	closed bool
	// watch is told of each Free first (device.FreeWatcher).
	watch func(allocation uint64) error
}

type mappingKey struct {
	owner      int
	allocation uint64
}

// allocation is one mapped shared-memory file.
type allocation struct {
	id    uint64
	owner int
	fd    int // -1 when opened from another process (the file is closed after mmap)
	mem   []byte
}

// buffer is a range of an allocation.
type buffer struct {
	alloc  *allocation
	offset int64
	size   int64
}

var (
	_ device.Device      = (*Device)(nil)
	_ device.Buffer      = (*buffer)(nil)
	_ device.HostMemory  = (*buffer)(nil)
	_ device.FreeWatcher = (*Device)(nil)
)

// New returns a CPU device.
func New() *Device {
	return &Device{owned: map[uint64]*allocation{}, opened: map[mappingKey]*allocation{}}
}

// Kind implements device.Device.
func (d *Device) Kind() device.Kind { return device.CPU }

// Profile implements device.Device.
func (d *Device) Profile() device.Profile {
	return device.Profile{
		Kind:            device.CPU,
		Name:            fmt.Sprintf("cpu/%s", runtime.GOARCH),
		Multiprocessors: runtime.NumCPU(),
		Driver:          runtime.Version(),
	}
}

// Alloc implements device.Device.
func (d *Device) Alloc(size int64) (device.Buffer, error) {
	if size <= 0 || size > maxAllocation {
		return nil, errdefs.Invalid("size", size, "allocation must be between 1 and %d bytes", int64(maxAllocation))
	}
	id := nextAllocation.Add(1)
	fd, err := memfdCreate(fmt.Sprintf("kcand-%d", id))
	if err != nil {
		return nil, fmt.Errorf("cpu alloc %d bytes: memfd_create: %w", size, err)
	}
	if err := syscall.Ftruncate(fd, size); err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("cpu alloc %d bytes: ftruncate: %w", size, err)
	}
	mem, err := syscall.Mmap(fd, 0, int(size), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("cpu alloc %d bytes: mmap: %w", size, err)
	}
	a := &allocation{id: id, owner: os.Getpid(), fd: fd, mem: mem}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		a.unmap()
		return nil, errdefs.Internal("cpu device is closed")
	}
	d.owned[id] = a
	return &buffer{alloc: a, size: size}, nil
}

// Free implements device.Device; it tells the watcher (WatchFree) before
// the memory goes.
func (d *Device) Free(b device.Buffer) error {
	cb, ok := b.(*buffer)
	if !ok {
		return errdefs.Invalid("buffer", fmt.Sprintf("%T", b), "not a CPU buffer")
	}
	d.mu.Lock()
	a, ok := d.owned[cb.alloc.id]
	if ok && a == cb.alloc && cb.alloc.owner == os.Getpid() {
		delete(d.owned, cb.alloc.id)
	} else {
		ok = false
	}
	watch := d.watch
	d.mu.Unlock()
	if !ok {
		return errdefs.Invalid("buffer", cb.alloc.id, "not allocated by this device (double free?)")
	}
	var watched error
	if watch != nil {
		watched = watch(a.id)
	}
	return errors.Join(watched, a.unmap())
}

// WatchFree implements device.FreeWatcher.
func (d *Device) WatchFree(fn func(allocation uint64) error) {
	d.mu.Lock()
	d.watch = fn
	d.mu.Unlock()
}

// Write implements device.Device.
func (d *Device) Write(dst device.Buffer, offset int64, src []byte) error {
	mem, err := hostBytes("dst", dst)
	if err != nil {
		return err
	}
	if err := device.CheckRange("offset", int64(len(mem)), offset, int64(len(src))); err != nil {
		return err
	}
	copy(mem[offset:], src)
	return nil
}

// Read implements device.Device.
func (d *Device) Read(dst []byte, src device.Buffer, offset int64) error {
	mem, err := hostBytes("src", src)
	if err != nil {
		return err
	}
	if err := device.CheckRange("offset", int64(len(mem)), offset, int64(len(dst))); err != nil {
		return err
	}
	copy(dst, mem[offset:])
	return nil
}

// Fill implements device.Device.
func (d *Device) Fill(b device.Buffer, value byte) error {
	mem, err := hostBytes("buffer", b)
	if err != nil {
		return err
	}
	for i := range mem {
		mem[i] = value
	}
	return nil
}

// Open implements device.Device.
func (d *Device) Open(h device.Handle) (device.Buffer, error) {
	if err := h.Validate(); err != nil {
		return nil, err
	}
	if h.Kind != device.CPU {
		return nil, errdefs.Invalid("handle.kind", h.Kind, "the CPU device opens only cpu handles")
	}
	if h.Owner == os.Getpid() {
		return nil, errdefs.Invalid("handle.owner", h.Owner, "handle was exported by this process; use the buffer itself")
	}
	key := mappingKey{h.Owner, h.Allocation}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, errdefs.Internal("cpu device is closed")
	}
	a, ok := d.opened[key]
	if ok && int64(len(a.mem)) != h.AllocationSize {
		// The owner reused the id for a different allocation: map again.
		a.unmap()
		ok = false
	}
	if !ok {
		var err error
		if a, err = mapForeign(h); err != nil {
			return nil, err
		}
		d.opened[key] = a
	}
	return &buffer{alloc: a, offset: h.Offset, size: h.Size}, nil
}

// Forget implements device.Device.
func (d *Device) Forget(owner int, id uint64) error {
	d.mu.Lock()
	a, ok := d.opened[mappingKey{owner, id}]
	delete(d.opened, mappingKey{owner, id})
	d.mu.Unlock()
	if !ok {
		return nil
	}
	return a.unmap()
}

// Opened is how many allocations of other processes the device has mapped
// (Open) and not yet forgotten.
func (d *Device) Opened() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.opened)
}

// Synchronize implements device.Device: CPU work completes before the call
// that issued it returns.
func (d *Device) Synchronize() error { return nil }

// Close implements device.Device.
func (d *Device) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	d.closed = true
	var first error
	for _, a := range d.owned {
		if err := a.unmap(); err != nil && first == nil {
			first = err
		}
	}
	for _, a := range d.opened {
		if err := a.unmap(); err != nil && first == nil {
			first = err
		}
	}
	d.owned, d.opened = nil, nil
	return first
}

// mapForeign maps another process's shared-memory file named by h.
func mapForeign(h device.Handle) (*allocation, error) {
	path := string(h.Token)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("open cpu handle %s: %w", h, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("open cpu handle %s: %w", h, err)
	}
	if st.Size() != h.AllocationSize {
		return nil, errdefs.Invalid("handle.allocation_size", h.AllocationSize, "shared file %s holds %d bytes", path, st.Size())
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, int(h.AllocationSize), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("open cpu handle %s: mmap: %w", h, err)
	}
	return &allocation{id: h.Allocation, owner: h.Owner, fd: -1, mem: mem}, nil
}

func (a *allocation) unmap() error {
	var err error
	if a.mem != nil {
		err = syscall.Munmap(a.mem)
		a.mem = nil
	}
	if a.fd >= 0 {
		syscall.Close(a.fd)
		a.fd = -1
	}
	return err
}

// Size implements device.Buffer.
func (b *buffer) Size() int64 { return b.size }

// Bytes implements device.HostMemory.
func (b *buffer) Bytes() []byte {
	if b.alloc.mem == nil {
		return nil
	}
	return b.alloc.mem[b.offset : b.offset+b.size : b.offset+b.size]
}

// Handle implements device.Buffer. A buffer opened from another process
// re-exports the owner's handle.
func (b *buffer) Handle() (device.Handle, error) {
	if b.alloc.mem == nil {
		return device.Handle{}, errdefs.Invalid("buffer", b.alloc.id, "freed")
	}
	return device.Handle{
		Kind:           device.CPU,
		Owner:          b.alloc.owner,
		Allocation:     b.alloc.id,
		AllocationSize: int64(len(b.alloc.mem)),
		Token:          []byte("/proc/" + strconv.Itoa(b.alloc.owner) + "/fd/" + strconv.Itoa(b.alloc.fd)),
		Offset:         b.offset,
		Size:           b.size,
	}, nil
}

// Slice returns the sub-range [offset, offset+size) of b.
func Slice(b device.Buffer, offset, size int64) (device.Buffer, error) {
	cb, ok := b.(*buffer)
	if !ok {
		return nil, errdefs.Invalid("buffer", fmt.Sprintf("%T", b), "not a CPU buffer")
	}
	if err := device.CheckRange("slice", cb.size, offset, size); err != nil {
		return nil, err
	}
	return &buffer{alloc: cb.alloc, offset: cb.offset + offset, size: size}, nil
}

func hostBytes(field string, b device.Buffer) ([]byte, error) {
	hm, ok := b.(device.HostMemory)
	if !ok {
		return nil, errdefs.Invalid(field, fmt.Sprintf("%T", b), "not addressable by the CPU")
	}
	mem := hm.Bytes()
	if mem == nil {
		return nil, errdefs.Invalid(field, "freed", "buffer was freed")
	}
	return mem, nil
}

func memfdCreate(name string) (int, error) {
	p, err := syscall.BytePtrFromString(name)
	if err != nil {
		return -1, err
	}
	const mfdCloexec = 0x1
	fd, _, errno := syscall.Syscall(sysMemfdCreate, uintptr(unsafePointer(p)), mfdCloexec, 0)
	if errno != 0 {
		return -1, errno
	}
	return int(fd), nil
}
