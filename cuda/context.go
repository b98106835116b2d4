package cuda

import (
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
)

// Context is a GPU's primary context together with the locked OS thread that
// runs its work (see thread.go). It is safe for use from any goroutine.
//
// kcand uses the primary context, the one the CUDA runtime, PyTorch and cupy
// share, rather than cuCtxCreate, whose signature changed in CUDA 13.
type Context struct {
	info   DeviceInfo
	handle uintptr
	thread *contextThread
	closed atomic.Bool
	once   sync.Once
}

// NewContext retains the primary context of the GPU with the given ordinal
// and starts its thread. Close releases it.
func NewContext(ordinal int, opts ...Option) (*Context, error) {
	if err := Init(opts...); err != nil {
		return nil, err
	}
	dev, err := deviceByOrdinal(ordinal)
	if err != nil {
		return nil, err
	}
	info, err := describe(ordinal, dev)
	if err != nil {
		return nil, err
	}
	c := &Context{info: info}
	bind := func() (uintptr, error) {
		handle, r := cuDevicePrimaryCtxRetain(dev)
		if err := check("cuDevicePrimaryCtxRetain", r); err != nil {
			return 0, err
		}
		if err := check("cuCtxSetCurrent", threadBind(handle)); err != nil {
			cuDevicePrimaryCtxRelease(dev)
			return 0, err
		}
		return handle, nil
	}
	unbind := func() {
		threadRestore(0)
		cuDevicePrimaryCtxRelease(dev)
	}
	if c.thread, err = startThread(bind, unbind); err != nil {
		return nil, err
	}
	c.handle = c.thread.context
	return c, nil
}

// Info describes the context's GPU.
func (c *Context) Info() DeviceInfo { return c.info }

// Do runs fn on the context's thread and returns its error. Inside fn every
// call on this context runs inline, so a batch of launches, copies and
// allocations costs one channel hop in all. Do called from inside Do (or on
// a thread bound with LockThread) simply calls fn. A panic in fn is raised
// again in the caller.
func (c *Context) Do(fn func() error) error {
	if c.closed.Load() {
		return ErrClosed
	}
	return c.thread.do(fn)
}

// LockThread binds the calling goroutine to this context: it locks the
// goroutine to its OS thread and makes the context current there, so every
// later call on the context from this goroutine runs inline with no channel
// hop and no context switch. Call unlock, from the same goroutine, before it
// ends or before Close. This is the hot path's choice for a goroutine that
// launches kernel after kernel (an engine's decode loop).
func (c *Context) LockThread() (unlock func(), err error) {
	if c.closed.Load() {
		return nil, ErrClosed
	}
	runtime.LockOSThread()
	previous := threadBound()
	if previous == c.handle {
		return runtime.UnlockOSThread, nil
	}
	if err := check("cuCtxSetCurrent", threadBind(c.handle)); err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	return func() {
		threadRestore(previous)
		if previous != 0 {
			threadBind(previous)
		}
		runtime.UnlockOSThread()
	}, nil
}

// Synchronize waits until all work on every stream of the context has
// finished. The wait runs on the caller's thread.
func (c *Context) Synchronize() error {
	if c.closed.Load() {
		return ErrClosed
	}
	return check("cuCtxSynchronize", cuCtxSynchronize(c.handle))
}

// MemoryInfo reports the free and total device memory in bytes.
func (c *Context) MemoryInfo() (free, total int64, err error) {
	err = c.Do(func() error {
		var r Result
		free, total, r = cuMemGetInfo()
		return check("cuMemGetInfo_v2", r)
	})
	return free, total, err
}

// Handle is the raw CUcontext, for code that calls the driver itself.
func (c *Context) Handle() uintptr { return c.handle }

// Close waits for the context's work to finish, stops its thread and
// releases the primary context. Resources created from the context must not
// be used afterwards. Close must not be called from inside Do.
func (c *Context) Close() error {
	if c.thread.onThread() {
		return errors.New("cuda: context closed from its own thread")
	}
	var err error
	c.once.Do(func() {
		err = c.Synchronize()
		c.closed.Store(true)
		c.thread.stop()
	})
	return err
}
