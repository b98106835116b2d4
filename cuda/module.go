package cuda

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/kcand/kcand/sdk/errdefs"
)

// functionAttribute is a CUfunction_attribute.
type functionAttribute int

// The function attributes kcand reads and sets (values from cuda.h).
const (
	funcMaxThreadsPerBlock    functionAttribute = 0 // CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK
	funcSharedSizeBytes       functionAttribute = 1 // CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES
	funcConstSizeBytes        functionAttribute = 2 // CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES
	funcLocalSizeBytes        functionAttribute = 3 // CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES
	funcNumRegs               functionAttribute = 4 // CU_FUNC_ATTRIBUTE_NUM_REGS
	funcPTXVersion            functionAttribute = 5 // CU_FUNC_ATTRIBUTE_PTX_VERSION
	funcBinaryVersion         functionAttribute = 6 // CU_FUNC_ATTRIBUTE_BINARY_VERSION
	funcMaxDynamicSharedBytes functionAttribute = 8 // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
)

// Module is a loaded cubin, fatbin or PTX image.
type Module struct {
	ctx       *Context
	handle    uintptr
	mu        sync.Mutex
	functions map[string]*Function
	unloaded  atomic.Bool
}

// LoadModule loads a cubin, fatbin or PTX image (cuModuleLoadDataEx). PTX is
// compiled by the driver for this GPU; its JIT error log is part of the
// error when that fails.
func (c *Context) LoadModule(image []byte) (*Module, error) {
	if len(image) == 0 {
		return nil, errdefs.Invalid("image", "empty", "no module image")
	}
	m := &Module{ctx: c, functions: map[string]*Function{}}
	err := c.Do(func() error {
		var jitLog string
		var r Result
		m.handle, jitLog, r = cuModuleLoadData(image)
		if r != ResultSuccess {
			return &Error{Op: "cuModuleLoadDataEx", Code: r, Detail: strings.TrimSpace(jitLog)}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

// Unload releases the module; its functions must no longer be launched.
func (m *Module) Unload() error {
	if m == nil || m.unloaded.Swap(true) {
		return nil
	}
	if m.ctx.closed.Load() {
		return ErrClosed
	}
	return m.ctx.Do(func() error { return check("cuModuleUnload", cuModuleUnload(m.handle)) })
}

// Global returns the address and size of a __device__ variable.
func (m *Module) Global(name string) (DevicePtr, int64, error) {
	if m.unloaded.Load() {
		return 0, 0, ErrClosed
	}
	var p DevicePtr
	var size int64
	err := m.ctx.Do(func() error {
		var r Result
		p, size, r = cuModuleGetGlobal(m.handle, name)
		if r != ResultSuccess {
			return &Error{Op: "cuModuleGetGlobal_v2", Code: r, Detail: name}
		}
		return nil
	})
	return p, size, err
}

// FunctionAttributes are what the compiler decided about one kernel.
type FunctionAttributes struct {
	Registers          int // per thread
	MaxThreadsPerBlock int // beyond which a launch fails
	StaticSharedBytes  int
	ConstBytes         int
	LocalBytes         int // per thread (spills)
	PTXVersion         int // major*10+minor
	BinaryVersion      int // major*10+minor: 90 for sm_90
	// MaxDynamicSharedBytes is the current dynamic shared memory limit;
	// Launch raises it when a launch asks for more.
	MaxDynamicSharedBytes int
}

// Function is a kernel of a loaded module.
type Function struct {
	module     *Module
	name       string
	handle     uintptr
	attributes FunctionAttributes
	// dynamicSharedLimit is the function's current
	// MAX_DYNAMIC_SHARED_SIZE_BYTES, read on every launch without a lock.
	dynamicSharedLimit atomic.Int64
}

// Function looks up a kernel by its (lowered, for C++) name.
func (m *Module) Function(name string) (*Function, error) {
	if m.unloaded.Load() {
		return nil, ErrClosed
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if f, ok := m.functions[name]; ok {
		return f, nil
	}
	f := &Function{module: m, name: name}
	err := m.ctx.Do(func() error {
		var r Result
		if f.handle, r = cuModuleGetFunction(m.handle, name); r != ResultSuccess {
			return &Error{Op: "cuModuleGetFunction", Code: r, Detail: name}
		}
		return f.readAttributes()
	})
	if err != nil {
		return nil, err
	}
	f.dynamicSharedLimit.Store(int64(f.attributes.MaxDynamicSharedBytes))
	m.functions[name] = f
	return f, nil
}

// readAttributes runs on the context thread.
func (f *Function) readAttributes() error {
	a := &f.attributes
	for _, q := range []struct {
		attribute functionAttribute
		into      *int
	}{
		{funcNumRegs, &a.Registers},
		{funcMaxThreadsPerBlock, &a.MaxThreadsPerBlock},
		{funcSharedSizeBytes, &a.StaticSharedBytes},
		{funcConstSizeBytes, &a.ConstBytes},
		{funcLocalSizeBytes, &a.LocalBytes},
		{funcPTXVersion, &a.PTXVersion},
		{funcBinaryVersion, &a.BinaryVersion},
		{funcMaxDynamicSharedBytes, &a.MaxDynamicSharedBytes},
	} {
		var r Result
		if *q.into, r = cuFuncGetAttribute(q.attribute, f.handle); r != ResultSuccess {
			return &Error{Op: "cuFuncGetAttribute", Code: r, Detail: fmt.Sprintf("%s attribute %d", f.name, q.attribute)}
		}
	}
	return nil
}

// Name is the kernel's name.
func (f *Function) Name() string { return f.name }

// Handle is the raw CUfunction, for code that calls the driver itself.
func (f *Function) Handle() uintptr { return f.handle }

// Attributes reports registers, limits and shared memory of the kernel.
func (f *Function) Attributes() FunctionAttributes {
	a := f.attributes
	a.MaxDynamicSharedBytes = int(f.dynamicSharedLimit.Load())
	return a
}

// SetMaxDynamicSharedMemory allows launches with up to bytes of dynamic
// shared memory. Beyond 48 KB a kernel must opt in this way, up to the
// device's SharedMemoryPerBlockOptin minus its static shared memory.
func (f *Function) SetMaxDynamicSharedMemory(bytes int) error {
	ctx := f.module.ctx
	if limit := ctx.info.SharedMemoryPerBlockOptin - f.attributes.StaticSharedBytes; bytes < 0 || bytes > limit {
		return errdefs.Invalid("dynamic shared memory", bytes, "%s allows 0..%d bytes (%d opt-in, %d static)",
			f.name, limit, ctx.info.SharedMemoryPerBlockOptin, f.attributes.StaticSharedBytes)
	}
	return ctx.Do(func() error {
		if r := cuFuncSetAttribute(f.handle, funcMaxDynamicSharedBytes, bytes); r != ResultSuccess {
			return &Error{Op: "cuFuncSetAttribute", Code: r, Detail: fmt.Sprintf("%s max dynamic shared memory %d bytes", f.name, bytes)}
		}
		f.dynamicSharedLimit.Store(int64(bytes))
		return nil
	})
}

// MaxActiveBlocksPerMultiprocessor is the occupancy calculator: how many
// blocks of blockSize threads using dynamicSharedBytes fit on one SM.
func (f *Function) MaxActiveBlocksPerMultiprocessor(blockSize, dynamicSharedBytes int) (int, error) {
	if blockSize <= 0 || blockSize > f.attributes.MaxThreadsPerBlock {
		return 0, errdefs.Invalid("block size", blockSize, "%s allows 1..%d threads", f.name, f.attributes.MaxThreadsPerBlock)
	}
	if dynamicSharedBytes < 0 {
		return 0, errdefs.Invalid("dynamic shared memory", dynamicSharedBytes, "negative")
	}
	var blocks int
	err := f.module.ctx.Do(func() error {
		var r Result
		blocks, r = cuOccupancyMaxActiveBlocksPerMultiprocessor(f.handle, blockSize, dynamicSharedBytes)
		return check("cuOccupancyMaxActiveBlocksPerMultiprocessor", r)
	})
	return blocks, err
}
