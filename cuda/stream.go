package cuda

import (
	"sync/atomic"

	"github.com/kcand/kcand/sdk/errdefs"
)

// StreamFlags are cuStreamCreate flags.
type StreamFlags uint32

// Stream flags (CUstream_flags in cuda.h).
const (
	// StreamDefault synchronises with the legacy NULL stream.
	StreamDefault StreamFlags = 0 // CU_STREAM_DEFAULT
	// StreamNonBlocking runs independently of the NULL stream; the device's
	// stream uses it so that no library's NULL-stream work stalls it.
	StreamNonBlocking StreamFlags = 1 // CU_STREAM_NON_BLOCKING
)

// Stream is an in-order queue of GPU work. Enqueueing work (launches,
// copies, event record and wait) runs on the caller's thread without a
// channel hop; see thread.go.
type Stream struct {
	ctx       *Context
	handle    uintptr
	destroyed atomic.Bool
}

// NewStream creates a stream.
func (c *Context) NewStream(flags StreamFlags) (*Stream, error) {
	if flags&^StreamNonBlocking != 0 {
		return nil, errdefs.Invalid("stream flags", flags, "unknown flag bits")
	}
	s := &Stream{ctx: c}
	err := c.Do(func() error {
		var r Result
		s.handle, r = cuStreamCreate(flags)
		return check("cuStreamCreate", r)
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Context is the stream's context.
func (s *Stream) Context() *Context { return s.ctx }

// Handle is the raw CUstream, for code that calls the driver itself.
func (s *Stream) Handle() uintptr { return s.handle }

// usable rejects a nil, destroyed or closed stream.
func (s *Stream) usable() error {
	switch {
	case s == nil:
		return errdefs.Invalid("stream", nil, "nil stream")
	case s.destroyed.Load() || s.ctx.closed.Load():
		return ErrClosed
	}
	return nil
}

// Synchronize waits until all work on the stream has finished.
func (s *Stream) Synchronize() error {
	if err := s.usable(); err != nil {
		return err
	}
	return check("cuStreamSynchronize", cuStreamSynchronize(s.ctx.handle, s.handle))
}

// Done reports whether all work on the stream has finished, without waiting.
func (s *Stream) Done() (bool, error) {
	if err := s.usable(); err != nil {
		return false, err
	}
	switch r := cuStreamQuery(s.ctx.handle, s.handle); r {
	case ResultSuccess:
		return true, nil
	case ResultNotReady:
		return false, nil
	default:
		return false, check("cuStreamQuery", r)
	}
}

// Record records e on the stream: e completes when the work enqueued so far
// has finished.
func (s *Stream) Record(e *Event) error {
	if err := s.usable(); err != nil {
		return err
	}
	if err := e.usable(s.ctx); err != nil {
		return err
	}
	return check("cuEventRecord", cuEventRecord(s.ctx.handle, e.handle, s.handle))
}

// Wait makes later work on the stream wait until e completes
// (cuStreamWaitEvent), without blocking the host. With an interprocess
// event this orders the stream after another process's stream; the wait
// applies to the most recent record of e at the time of the call.
func (s *Stream) Wait(e *Event) error {
	if err := s.usable(); err != nil {
		return err
	}
	if err := e.usable(s.ctx); err != nil {
		return err
	}
	return check("cuStreamWaitEvent", cuStreamWaitEvent(s.ctx.handle, s.handle, e.handle))
}

// CopyToDevice copies src to dst after the work already on the stream and
// waits until it is done, so src may be reused at once.
func (s *Stream) CopyToDevice(dst DevicePtr, src []byte) error {
	if err := s.usable(); err != nil {
		return err
	}
	return s.ctx.copyToDevice(dst, src, s.handle)
}

// CopyFromDevice copies len(dst) bytes from src after the work already on
// the stream and waits until they arrive.
func (s *Stream) CopyFromDevice(dst []byte, src DevicePtr) error {
	if err := s.usable(); err != nil {
		return err
	}
	return s.ctx.copyFromDevice(dst, src, s.handle)
}

// CopyToDeviceAsync enqueues a copy of n bytes from pinned memory at
// src[offset:] to dst and returns at once; src must not change until the
// stream has reached the copy.
func (s *Stream) CopyToDeviceAsync(dst DevicePtr, src *HostBuffer, offset, n int64) error {
	if err := s.usable(); err != nil {
		return err
	}
	if err := s.ctx.checkTransfer(dst, n); err != nil || n == 0 {
		return err
	}
	p, err := src.rangeOf(offset, n)
	if err != nil {
		return err
	}
	return check("cuMemcpyHtoDAsync_v2", cuMemcpyHtoDAsync(s.ctx.handle, dst, p, n, s.handle))
}

// CopyFromDeviceAsync enqueues a copy of n bytes from src to pinned memory
// at dst[offset:] and returns at once; read dst after the stream (or an
// event recorded after the copy) completes.
func (s *Stream) CopyFromDeviceAsync(dst *HostBuffer, offset int64, src DevicePtr, n int64) error {
	if err := s.usable(); err != nil {
		return err
	}
	if err := s.ctx.checkTransfer(src, n); err != nil || n == 0 {
		return err
	}
	p, err := dst.rangeOf(offset, n)
	if err != nil {
		return err
	}
	return check("cuMemcpyDtoHAsync_v2", cuMemcpyDtoHAsync(s.ctx.handle, p, src, n, s.handle))
}

// CopyDevice enqueues a device-to-device copy of n bytes.
func (s *Stream) CopyDevice(dst, src DevicePtr, n int64) error {
	if err := s.usable(); err != nil {
		return err
	}
	return s.ctx.enqueueCopyDevice(dst, src, n, s.handle)
}

// Memset enqueues setting n bytes at dst to value.
func (s *Stream) Memset(dst DevicePtr, value byte, n int64) error {
	if err := s.usable(); err != nil {
		return err
	}
	return s.ctx.enqueueMemset(dst, value, n, s.handle)
}

// Destroy releases the stream after its work has finished.
func (s *Stream) Destroy() error {
	if s == nil || s.destroyed.Swap(true) {
		return nil
	}
	if s.ctx.closed.Load() {
		return ErrClosed
	}
	return s.ctx.Do(func() error { return check("cuStreamDestroy_v2", cuStreamDestroy(s.handle)) })
}
