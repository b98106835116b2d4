package cuda

import (
	"sync/atomic"

	"github.com/kcand/kcand/sdk/errdefs"
)

// EventFlags are cuEventCreate flags.
type EventFlags uint32

// Event flags (CUevent_flags in cuda.h).
const (
	EventDefault       EventFlags = 0 // CU_EVENT_DEFAULT: records timing
	EventBlockingSync  EventFlags = 1 // CU_EVENT_BLOCKING_SYNC: Synchronize sleeps instead of spinning
	EventDisableTiming EventFlags = 2 // CU_EVENT_DISABLE_TIMING: cheaper to record and wait on
	EventInterprocess  EventFlags = 4 // CU_EVENT_INTERPROCESS: exportable; needs EventDisableTiming
)

// Event marks a point in a stream's work: to time it, to wait for it from
// the host, or to make another stream (in this or another process) wait.
type Event struct {
	ctx       *Context
	handle    uintptr
	flags     EventFlags
	destroyed atomic.Bool
}

// NewEvent creates an event.
func (c *Context) NewEvent(flags EventFlags) (*Event, error) {
	if flags&^(EventBlockingSync|EventDisableTiming|EventInterprocess) != 0 {
		return nil, errdefs.Invalid("event flags", flags, "unknown flag bits")
	}
	if flags&EventInterprocess != 0 && flags&EventDisableTiming == 0 {
		return nil, errdefs.Invalid("event flags", flags, "an interprocess event must also disable timing")
	}
	e := &Event{ctx: c, flags: flags}
	err := c.Do(func() error {
		var r Result
		e.handle, r = cuEventCreate(flags)
		return check("cuEventCreate", r)
	})
	if err != nil {
		return nil, err
	}
	return e, nil
}

// Handle is the raw CUevent, for code that calls the driver itself.
func (e *Event) Handle() uintptr { return e.handle }

// usable rejects a nil or destroyed event, or one of another context.
func (e *Event) usable(ctx *Context) error {
	switch {
	case e == nil:
		return errdefs.Invalid("event", nil, "nil event")
	case e.destroyed.Load() || e.ctx.closed.Load():
		return ErrClosed
	case ctx != nil && e.ctx.handle != ctx.handle:
		return errdefs.Invalid("event", "foreign", "event belongs to another context")
	}
	return nil
}

// Synchronize waits on the host until the event completes.
func (e *Event) Synchronize() error {
	if err := e.usable(nil); err != nil {
		return err
	}
	return check("cuEventSynchronize", cuEventSynchronize(e.ctx.handle, e.handle))
}

// Done reports whether the event has completed, without waiting.
func (e *Event) Done() (bool, error) {
	if err := e.usable(nil); err != nil {
		return false, err
	}
	switch r := cuEventQuery(e.ctx.handle, e.handle); r {
	case ResultSuccess:
		return true, nil
	case ResultNotReady:
		return false, nil
	default:
		return false, check("cuEventQuery", r)
	}
}

// ElapsedSince returns the milliseconds between start and e; both must have
// completed and been created with timing.
func (e *Event) ElapsedSince(start *Event) (float32, error) {
	if err := e.usable(nil); err != nil {
		return 0, err
	}
	if err := start.usable(e.ctx); err != nil {
		return 0, err
	}
	ms, r := cuEventElapsedTime(e.ctx.handle, start.handle, e.handle)
	return ms, check("cuEventElapsedTime", r)
}

// Destroy releases the event. Work that records or waits on it may still be
// queued: the driver frees it once that work has finished.
func (e *Event) Destroy() error {
	if e == nil || e.destroyed.Swap(true) {
		return nil
	}
	if e.ctx.closed.Load() {
		return ErrClosed
	}
	return e.ctx.Do(func() error { return check("cuEventDestroy_v2", cuEventDestroy(e.handle)) })
}
