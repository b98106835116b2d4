package cuda

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/kcand/kcand/sdk/device"
	"github.com/kcand/kcand/sdk/errdefs"
)

// Dim3 is a grid or block shape. A zero Y or Z means 1, so Dim3{X: 256} is
// a one-dimensional shape; X must be at least 1.
type Dim3 struct {
	X, Y, Z int
}

// LaunchConfig is how a kernel runs: grid and block shapes and the dynamic
// shared memory per block.
type LaunchConfig struct {
	Grid              Dim3
	Block             Dim3
	SharedMemoryBytes int
	// Programmatic lets the kernel start before the work ahead of it in the
	// stream has finished (programmatic dependent launch, compute
	// capability 9.0+, CUDA 12.0+ drivers): the kernel must wait for that
	// work with griddepcontrol.wait before it reads what the work wrote or
	// writes what the work reads, and may release its own dependents early
	// with griddepcontrol.launch_dependents. Without driver or device
	// support the launch is an ordinary one, which such a kernel also
	// runs correctly under.
	Programmatic bool
}

// String formats the configuration for error messages.
func (c LaunchConfig) String() string {
	s := fmt.Sprintf("grid (%d,%d,%d) block (%d,%d,%d) shared %d bytes",
		c.Grid.X, c.Grid.Y, c.Grid.Z, c.Block.X, c.Block.Y, c.Block.Z, c.SharedMemoryBytes)
	if c.Programmatic {
		s += ", programmatic"
	}
	return s
}

// Launch enqueues the kernel on s with args. It runs on the caller's thread:
// from a goroutine bound to the context (inside Context.Do, or after
// Context.LockThread) it is one cgo call into cuLaunchKernel; from any
// other goroutine the same C call also makes the context current around the
// launch, which costs two cheap driver calls and no channel hop. A launch
// asking for more dynamic shared memory than the kernel allows raises the
// kernel's limit first (once). The driver copies args during the call, so
// args may be reused as soon as Launch returns.
func (f *Function) Launch(s *Stream, cfg LaunchConfig, args *Args) error {
	return f.launch(s, cfg, args, 1)
}

// LaunchRepeated enqueues count identical launches in one C call. It exists
// to measure the floor of launch cost (the driver alone, no Go per launch)
// and for warm-up; normal code calls Launch.
func (f *Function) LaunchRepeated(s *Stream, cfg LaunchConfig, args *Args, count int) error {
	if count < 1 || count > math.MaxInt32 {
		return errdefs.Invalid("count", count, "want at least one launch")
	}
	return f.launch(s, cfg, args, count)
}

func (f *Function) launch(s *Stream, cfg LaunchConfig, args *Args, repeat int) error {
	if err := f.checkLaunch(s, &cfg, args); err != nil {
		return err
	}
	if int64(cfg.SharedMemoryBytes) > f.dynamicSharedLimit.Load() {
		if err := f.SetMaxDynamicSharedMemory(cfg.SharedMemoryBytes); err != nil {
			return err
		}
	}
	if r := cuLaunchKernel(s.ctx.handle, f.handle, &cfg, s.handle, args, repeat); r != ResultSuccess {
		return &Error{Op: "cuLaunchKernel", Code: r, Detail: f.name + " " + cfg.String()}
	}
	return nil
}

// checkLaunch validates a launch against the device and the kernel, and
// fills in zero Y and Z dimensions.
func (f *Function) checkLaunch(s *Stream, cfg *LaunchConfig, args *Args) error {
	if f == nil {
		return errdefs.Invalid("function", nil, "nil kernel")
	}
	if err := s.usable(); err != nil {
		return err
	}
	ctx := f.module.ctx
	switch {
	case s.ctx.handle != ctx.handle:
		return errdefs.Invalid("stream", "foreign", "stream and kernel %s belong to different contexts", f.name)
	case f.module.unloaded.Load():
		return ErrClosed
	}
	if args != nil {
		if err := args.check(); err != nil {
			return err
		}
	}
	maxThreads := min(ctx.info.MaxThreadsPerBlock, f.attributes.MaxThreadsPerBlock)
	sharedLimit := ctx.info.SharedMemoryPerBlockOptin - f.attributes.StaticSharedBytes
	return checkLaunchConfig(cfg, ctx.info.MaxGridDim, ctx.info.MaxBlockDim, maxThreads, sharedLimit)
}

// checkLaunchConfig is the device-independent part of checkLaunch.
func checkLaunchConfig(cfg *LaunchConfig, maxGrid, maxBlock [3]int, maxThreads, sharedLimit int) error {
	for _, d := range []*Dim3{&cfg.Grid, &cfg.Block} {
		if d.Y == 0 {
			d.Y = 1
		}
		if d.Z == 0 {
			d.Z = 1
		}
	}
	grid, block := [3]int{cfg.Grid.X, cfg.Grid.Y, cfg.Grid.Z}, [3]int{cfg.Block.X, cfg.Block.Y, cfg.Block.Z}
	for i, axis := range [3]string{"x", "y", "z"} {
		if grid[i] < 1 || grid[i] > maxGrid[i] {
			return errdefs.Invalid("grid."+axis, grid[i], "must be 1..%d", maxGrid[i])
		}
		if block[i] < 1 || block[i] > maxBlock[i] {
			return errdefs.Invalid("block."+axis, block[i], "must be 1..%d", maxBlock[i])
		}
	}
	if threads := block[0] * block[1] * block[2]; threads > maxThreads {
		return errdefs.Invalid("block", fmt.Sprintf("(%d,%d,%d)", block[0], block[1], block[2]), "%d threads exceed the limit of %d", threads, maxThreads)
	}
	if cfg.SharedMemoryBytes < 0 || cfg.SharedMemoryBytes > sharedLimit {
		return errdefs.Invalid("shared memory", cfg.SharedMemoryBytes, "must be 0..%d bytes", sharedLimit)
	}
	return nil
}

// Args packs kernel parameters in declaration order, each at its natural
// alignment, the layout cuLaunchKernel's kernelParams expects. The zero
// value is ready to use; Reset empties it for reuse without allocating. A
// bad argument is remembered and returned by Launch (and Err), so calls can
// be chained. Args is not safe for concurrent use.
type Args struct {
	data    []byte
	offsets []uint32
	err     error
}

// NewArgs returns an empty parameter list.
func NewArgs() *Args { return &Args{} }

// Reset empties the list, keeping its storage.
func (a *Args) Reset() *Args {
	a.data, a.offsets, a.err = a.data[:0], a.offsets[:0], nil
	return a
}

// Len is the number of parameters.
func (a *Args) Len() int { return len(a.offsets) }

// Err is the first bad argument, if any.
func (a *Args) Err() error { return a.err }

// Pointer appends a device pointer (a T* parameter).
func (a *Args) Pointer(p DevicePtr) *Args { return a.Uint64(uint64(p)) }

// Buffer appends the device address of a buffer from a CUDA device.
func (a *Args) Buffer(b device.Buffer) *Args {
	m, ok := b.(device.DeviceMemory)
	if !ok || m.DevicePointer() == 0 {
		a.fail(errdefs.Invalid("argument", fmt.Sprintf("%T", b), "parameter %d is not live device memory", len(a.offsets)))
		return a
	}
	return a.Uint64(uint64(m.DevicePointer()))
}

// Int32 appends an int parameter.
func (a *Args) Int32(v int32) *Args { return a.Uint32(uint32(v)) }

// Uint32 appends an unsigned int parameter.
func (a *Args) Uint32(v uint32) *Args {
	binary.NativeEndian.PutUint32(a.slot(4, 4), v)
	return a
}

// Int64 appends a long long parameter.
func (a *Args) Int64(v int64) *Args { return a.Uint64(uint64(v)) }

// Uint64 appends an unsigned long long parameter.
func (a *Args) Uint64(v uint64) *Args {
	binary.NativeEndian.PutUint64(a.slot(8, 8), v)
	return a
}

// Float32 appends a float parameter.
func (a *Args) Float32(v float32) *Args { return a.Uint32(math.Float32bits(v)) }

// Float64 appends a double parameter.
func (a *Args) Float64(v float64) *Args { return a.Uint64(math.Float64bits(v)) }

// Bytes appends a by-value struct parameter: its bytes as the kernel lays
// them out, and its alignment (a power of two up to 64, which a CUtensorMap
// has).
func (a *Args) Bytes(v []byte, align int) *Args {
	switch {
	case align < 1 || align > 64 || align&(align-1) != 0:
		a.fail(errdefs.Invalid("argument alignment", align, "parameter %d: want 1, 2, 4, 8, 16, 32 or 64", len(a.offsets)))
	case len(v) == 0:
		a.fail(errdefs.Invalid("argument", "empty", "parameter %d has no bytes", len(a.offsets)))
	default:
		copy(a.slot(len(v), align), v)
	}
	return a
}

// slot appends a parameter of size bytes at the given alignment and
// returns its bytes.
func (a *Args) slot(size, align int) []byte {
	start := len(a.data)
	offset := (start + align - 1) &^ (align - 1)
	end := offset + size
	if end > cap(a.data) {
		grown := make([]byte, start, max(2*cap(a.data), end, 64))
		copy(grown, a.data)
		a.data = grown
	}
	a.data = a.data[:end]
	clear(a.data[start:offset]) // padding may hold bytes from before a Reset
	a.offsets = append(a.offsets, uint32(offset))
	return a.data[offset:end]
}

func (a *Args) fail(err error) {
	if a.err == nil {
		a.err = err
	}
}

// check reports a remembered error or a list the driver cannot take.
func (a *Args) check() error {
	switch {
	case a.err != nil:
		return a.err
	case len(a.data) > maxParamBytes:
		return errdefs.Invalid("arguments", len(a.data), "more than %d bytes of kernel parameters", maxParamBytes)
	case len(a.offsets) > maxParams:
		return errdefs.Invalid("arguments", len(a.offsets), "more than %d kernel parameters", maxParams)
	}
	return nil
}
