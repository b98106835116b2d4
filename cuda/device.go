package cuda

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/kcand/kcand/sdk/device"
	"github.com/kcand/kcand/sdk/errdefs"
)

// Device is the CUDA implementation of device.Device: buffers are cuMemAlloc
// allocations shared through CUDA IPC handles, and all its work runs in
// order on one non-blocking stream, which host code may also launch
// kernels on (Stream). It is safe for concurrent use.
type Device struct {
	ctx     *Context
	stream  *Stream
	profile device.Profile

	mu     sync.Mutex
	owned  map[uint64]*allocation
	opened map[mappingKey]*allocation
	closed bool
	// watch is told of each Free first (device.FreeWatcher).
	watch func(allocation uint64) error

	// stage carries large writes through pinned memory (staged_write.go).
	stage stager
}

// mappingKey names another process's allocation.
type mappingKey struct {
	owner      int
	allocation uint64
}

var (
	_ device.Device      = (*Device)(nil)
	_ device.TimerSource = (*Device)(nil)
	_ device.FreeWatcher = (*Device)(nil)
)

// NewDevice opens the GPU with the given ordinal: its primary context and a
// non-blocking stream. Without a usable driver the error wraps ErrNoDriver.
func NewDevice(ordinal int, opts ...Option) (*Device, error) {
	ctx, err := NewContext(ordinal, opts...)
	if err != nil {
		return nil, err
	}
	stream, err := ctx.NewStream(StreamNonBlocking)
	if err != nil {
		ctx.Close()
		return nil, err
	}
	info := ctx.Info()
	return &Device{
		ctx:    ctx,
		stream: stream,
		profile: device.Profile{
			Kind:              device.CUDA,
			Name:              info.Name,
			UUID:              info.UUID,
			ComputeCapability: info.ComputeCapability.String(),
			Multiprocessors:   info.Multiprocessors,
			MemoryBytes:       info.MemoryBytes,
			L2Bytes:           info.L2CacheBytes,
			Driver:            info.DriverVersionString(),
			Limits: device.Limits{
				MaxThreadsPerBlock: info.MaxThreadsPerBlock,
				MaxBlockDim:        info.MaxBlockDim,
				MaxGridDim:         info.MaxGridDim,
				MaxSharedPerBlock:  info.SharedMemoryPerBlockOptin,
			},
		},
		owned:  map[uint64]*allocation{},
		opened: map[mappingKey]*allocation{},
	}, nil
}

// OpenDevice is NewDevice returning the interface, for registries of device
// openers (sdk.RegisterDevice); unlike returning NewDevice's result
// directly, a failure is a nil interface, not a typed nil.
func OpenDevice(ordinal int, opts ...Option) (device.Device, error) {
	d, err := NewDevice(ordinal, opts...)
	if err != nil {
		return nil, err
	}
	return d, nil
}

// Kind implements device.Device.
func (d *Device) Kind() device.Kind { return device.CUDA }

// Profile implements device.Device.
func (d *Device) Profile() device.Profile { return d.profile }

// Context is the device's context, for loading modules and creating streams
// and events.
func (d *Device) Context() *Context { return d.ctx }

// Stream is the stream all of the device's work runs on; launch on it to be
// ordered with Write, Read and Fill.
func (d *Device) Stream() *Stream { return d.stream }

// Info describes the GPU in full.
func (d *Device) Info() DeviceInfo { return d.ctx.Info() }

// usable rejects calls on an unopened or closed device.
func (d *Device) usable() error {
	if d.ctx == nil {
		return errdefs.Internal("cuda device has no context (use NewDevice)")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return ErrClosed
	}
	return nil
}

// Alloc implements device.Device: the memory is zero-filled before Alloc
// returns.
func (d *Device) Alloc(size int64) (device.Buffer, error) {
	if size <= 0 {
		return nil, errdefs.Invalid("size", size, "allocation must be positive")
	}
	if d.profile.MemoryBytes > 0 && size > d.profile.MemoryBytes {
		return nil, errdefs.Invalid("size", size, "exceeds the %d bytes of %s", d.profile.MemoryBytes, d.profile.Name)
	}
	if err := d.usable(); err != nil {
		return nil, err
	}
	base, err := d.ctx.MemAlloc(size)
	if err != nil {
		return nil, err
	}
	if err := d.zero(base, size); err != nil {
		d.ctx.MemFree(base)
		return nil, fmt.Errorf("cuda alloc %d bytes: zero: %w", size, err)
	}
	a := &allocation{id: nextAllocation.Add(1), owner: os.Getpid(), size: size, base: base}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		d.ctx.MemFree(base)
		return nil, ErrClosed
	}
	d.owned[a.id] = a
	return &buffer{dev: d, alloc: a, size: size}, nil
}

func (d *Device) zero(p DevicePtr, size int64) error {
	if err := d.stream.Memset(p, 0, size); err != nil {
		return err
	}
	return d.stream.Synchronize()
}

// Free implements device.Device. It tells the watcher (WatchFree) first,
// then waits for the device's stream, so no queued kernel still uses the
// memory.
func (d *Device) Free(b device.Buffer) error {
	cb, err := d.liveBuffer("buffer", b)
	if err != nil {
		return err
	}
	d.mu.Lock()
	a, ok := d.owned[cb.alloc.id]
	ok = ok && a == cb.alloc
	if ok {
		delete(d.owned, a.id)
		a.gone.Store(true)
	}
	watch := d.watch
	d.mu.Unlock()
	if !ok {
		return errdefs.Invalid("buffer", cb.alloc.id, "not owned by this device: opened from another process (use Forget)")
	}
	var watched error
	if watch != nil {
		watched = watch(a.id)
	}
	return errors.Join(watched, d.stream.Synchronize(), d.ctx.MemFree(a.base))
}

// WatchFree implements device.FreeWatcher.
func (d *Device) WatchFree(fn func(allocation uint64) error) {
	d.mu.Lock()
	d.watch = fn
	d.mu.Unlock()
}

// Write implements device.Device: the copy is ordered after earlier work on
// the device's stream and complete when Write returns. From stagedWriteMin
// bytes it goes through pinned memory (staged_write.go).
func (d *Device) Write(dst device.Buffer, offset int64, src []byte) error {
	b, err := d.liveBuffer("dst", dst)
	if err != nil {
		return err
	}
	if err := device.CheckRange("offset", b.size, offset, int64(len(src))); err != nil {
		return err
	}
	to := DevicePtr(b.DevicePointer()) + DevicePtr(offset)
	if len(src) >= stagedWriteMin {
		return d.writeStaged(to, src)
	}
	return d.stream.CopyToDevice(to, src)
}

// Read implements device.Device, ordered after earlier work on the stream.
func (d *Device) Read(dst []byte, src device.Buffer, offset int64) error {
	b, err := d.liveBuffer("src", src)
	if err != nil {
		return err
	}
	if err := device.CheckRange("offset", b.size, offset, int64(len(dst))); err != nil {
		return err
	}
	return d.stream.CopyFromDevice(dst, DevicePtr(b.DevicePointer())+DevicePtr(offset))
}

// Fill implements device.Device: complete when it returns, so a poisoned
// output is poisoned for every process.
func (d *Device) Fill(b device.Buffer, value byte) error {
	cb, err := d.liveBuffer("buffer", b)
	if err != nil {
		return err
	}
	if err := d.stream.Memset(DevicePtr(cb.DevicePointer()), value, cb.size); err != nil {
		return err
	}
	return d.stream.Synchronize()
}

// Synchronize implements device.Device: it waits for the device's stream.
// Work the caller put on other streams needs Context.Synchronize.
func (d *Device) Synchronize() error {
	if err := d.usable(); err != nil {
		return err
	}
	return d.stream.Synchronize()
}

// Close implements device.Device: it frees every allocation, closes every
// mapping, destroys the stream and releases the context.
func (d *Device) Close() error {
	if d.ctx == nil {
		return nil
	}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	owned, opened := d.owned, d.opened
	d.owned, d.opened = nil, nil
	d.mu.Unlock()

	errs := []error{d.stream.Synchronize(), d.stage.free()}
	for _, a := range owned {
		a.gone.Store(true)
		errs = append(errs, d.ctx.MemFree(a.base))
	}
	for _, a := range opened {
		a.gone.Store(true)
		errs = append(errs, d.ctx.CloseMemory(a.base))
	}
	errs = append(errs, d.stream.Destroy(), d.ctx.Close())
	return errors.Join(errs...)
}
