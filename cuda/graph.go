package cuda

import (
	"fmt"
	"sync/atomic"

	"github.com/kcand/kcand/sdk/errdefs"
)

// CaptureMode is how strictly the driver guards a stream capture against
// calls that could disturb it (CUstreamCaptureMode). Use CaptureRelaxed:
// the zero value is CaptureGlobal only because the driver numbers it so.
type CaptureMode int

// Capture modes (CUstreamCaptureMode in cuda.h).
const (
	// CaptureGlobal forbids potentially unsafe calls, cuMemAlloc among
	// them, on every thread of the process while the capture lasts, and
	// needs EndCapture on the thread that began the capture.
	CaptureGlobal CaptureMode = 0 // CU_STREAM_CAPTURE_MODE_GLOBAL
	// CaptureThreadLocal forbids them on the capturing thread only, and
	// also needs EndCapture on that thread.
	CaptureThreadLocal CaptureMode = 1 // CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
	// CaptureRelaxed forbids nothing but what no capture allows (waiting
	// for the capturing stream), and the capture may end on any thread.
	// It is the mode kcand recommends.
	CaptureRelaxed CaptureMode = 2 // CU_STREAM_CAPTURE_MODE_RELAXED
)

// String names the mode for messages.
func (m CaptureMode) String() string {
	switch m {
	case CaptureGlobal:
		return "global"
	case CaptureThreadLocal:
		return "thread-local"
	case CaptureRelaxed:
		return "relaxed"
	}
	return fmt.Sprintf("CaptureMode(%d)", int(m))
}

// BeginCapture starts capturing the stream into a graph
// (cuStreamBeginCapture_v2): until EndCapture, work enqueued on it (kernel
// launches, async copies, memsets) is recorded, not run. Each launch's arguments are copied as it is captured,
// so Args may be reused at once; device pointers are recorded as values, so
// the memory they point to must outlive every replay. Capture a stream of
// your own, not Device.Stream, which the device's copies wait on.
//
// Pass CaptureRelaxed. The strict modes suit C programs, not Go: with
// CaptureGlobal the host must not allocate while the capture lasts, because
// a cuMemAlloc on any thread (a Device.Alloc from an unrelated goroutine)
// fails with ResultStreamCaptureUnsupported and invalidates the capture;
// with CaptureThreadLocal the same holds on the capturing thread. Both
// strict modes also need EndCapture on the OS thread that began the
// capture, so they are accepted only from a goroutine bound to the context
// (Context.LockThread, or inside Context.Do). CaptureRelaxed lifts both
// restrictions. In every mode, waiting for the capturing stream
// (Synchronize, Done, blocking copies on it, Context.Synchronize) fails and
// invalidates the capture.
//
// Like Function.Launch, BeginCapture runs on the caller's thread.
func (s *Stream) BeginCapture(mode CaptureMode) error {
	if err := s.usable(); err != nil {
		return err
	}
	switch mode {
	case CaptureRelaxed:
	case CaptureGlobal, CaptureThreadLocal:
		if threadBound() != s.ctx.handle {
			return errdefs.Invalid("capture mode", mode,
				"needs the goroutine bound to the context (Context.LockThread or Context.Do) so that EndCapture runs on the same thread; use CaptureRelaxed")
		}
	default:
		return errdefs.Invalid("capture mode", mode, "want CaptureGlobal, CaptureThreadLocal or CaptureRelaxed")
	}
	return checkOptional("cuStreamBeginCapture_v2", "10.1", cuStreamBeginCapture(s.ctx.handle, s.handle, mode))
}

// EndCapture ends the stream's capture and returns the captured graph
// (cuStreamEndCapture). Without a capture in progress the error is an
// *Error (CUDA_ERROR_ILLEGAL_STATE); if a forbidden call spoiled the
// capture it wraps ResultStreamCaptureInvalidated, and the capture is over
// all the same. Like Function.Launch, it runs on the caller's thread.
func (s *Stream) EndCapture() (*Graph, error) {
	if err := s.usable(); err != nil {
		return nil, err
	}
	handle, r := cuStreamEndCapture(s.ctx.handle, s.handle)
	if err := checkOptional("cuStreamEndCapture", "10.0", r); err != nil {
		return nil, err
	}
	return &Graph{ctx: s.ctx, handle: handle}, nil
}

// Graph is captured work that cannot run yet: Instantiate turns it into a
// GraphExec, after which the Graph may be destroyed.
type Graph struct {
	ctx       *Context
	handle    uintptr
	destroyed atomic.Bool
}

// Handle is the raw CUgraph, for code that calls the driver itself.
func (g *Graph) Handle() uintptr { return g.handle }

func (g *Graph) usable() error {
	switch {
	case g == nil:
		return errdefs.Invalid("graph", nil, "nil graph")
	case g.destroyed.Load() || g.ctx.closed.Load():
		return ErrClosed
	}
	return nil
}

// Instantiate makes an executable graph that can be launched any number of
// times (cuGraphInstantiateWithFlags, no flags). It runs on the context
// thread, and its cost is paid once, not per launch.
func (g *Graph) Instantiate() (*GraphExec, error) {
	if err := g.usable(); err != nil {
		return nil, err
	}
	e := &GraphExec{ctx: g.ctx}
	err := g.ctx.Do(func() error {
		var r Result
		e.handle, r = cuGraphInstantiate(g.handle)
		return checkOptional("cuGraphInstantiateWithFlags", "11.4", r)
	})
	if err != nil {
		return nil, err
	}
	return e, nil
}

// Destroy releases the graph; executable graphs made from it stay valid.
func (g *Graph) Destroy() error {
	if g == nil || g.destroyed.Swap(true) {
		return nil
	}
	if g.ctx.closed.Load() {
		return ErrClosed
	}
	return g.ctx.Do(func() error { return checkOptional("cuGraphDestroy", "10.0", cuGraphDestroy(g.handle)) })
}

// GraphExec is an instantiated graph: a replayable sequence of launches.
type GraphExec struct {
	ctx       *Context
	handle    uintptr
	destroyed atomic.Bool
}

// Handle is the raw CUgraphExec, for code that calls the driver itself.
func (e *GraphExec) Handle() uintptr { return e.handle }

func (e *GraphExec) usable() error {
	switch {
	case e == nil:
		return errdefs.Invalid("graph exec", nil, "nil executable graph")
	case e.destroyed.Load() || e.ctx.closed.Load():
		return ErrClosed
	}
	return nil
}

// Launch enqueues one replay of the graph on s (cuGraphLaunch): every
// captured kernel, in captured order, with its captured arguments. It is
// ordered after earlier work on s and after the previous replay of e. Like
// Function.Launch it runs on the caller's thread in one cgo call and
// allocates nothing, so one replay costs about what one launch does.
func (e *GraphExec) Launch(s *Stream) error {
	if err := e.usable(); err != nil {
		return err
	}
	if err := s.usable(); err != nil {
		return err
	}
	if s.ctx.handle != e.ctx.handle {
		return errdefs.Invalid("stream", "foreign", "stream and graph belong to different contexts")
	}
	return checkOptional("cuGraphLaunch", "10.0", cuGraphLaunch(s.ctx.handle, e.handle, s.handle))
}

// Destroy releases the executable graph. A replay still queued is not cut
// short: the driver frees the graph once it completes.
func (e *GraphExec) Destroy() error {
	if e == nil || e.destroyed.Swap(true) {
		return nil
	}
	if e.ctx.closed.Load() {
		return ErrClosed
	}
	return e.ctx.Do(func() error { return checkOptional("cuGraphExecDestroy", "10.0", cuGraphExecDestroy(e.handle)) })
}
