package cuda

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
)

// A CUDA context is current per OS thread, and Go moves goroutines between
// threads at will; a prototype that ignored this failed with
// CUDA_ERROR_INVALID_CONTEXT. So each Context owns one goroutine that locks
// its OS thread for life, binds the context to it once, and runs closures
// sent over a channel. Three kinds of call reach the driver:
//
//   - Resource management (alloc, free, module load, stream, event and graph
//     creation, IPC open/close) runs on the context thread: inline when the
//     caller is already bound (inside Context.Do, or after
//     Context.LockThread), otherwise through one channel hop.
//   - Stream-ordered work (launch, graph capture and launch, event record,
//     stream wait, async copy and memset) and blocking waits (synchronize) run on the caller's thread in
//     a single C call that makes the context current for that call only
//     when the thread is not already bound. No hop: this is the hot path, and
//     a long wait never stalls other goroutines' work on the context thread.
//   - Device queries need no context and run anywhere.

// contextThread is the locked OS thread of one context.
type contextThread struct {
	context  uintptr
	requests chan *threadCall
	quit     chan struct{}
	done     chan struct{} // closed when the thread has exited
	stopOnce sync.Once
}

// threadCall is one closure sent to the thread, reused through a pool so the
// hop allocates only the closure itself.
type threadCall struct {
	fn     func() error
	result chan error
	panic  any
}

var threadCalls = sync.Pool{New: func() any { return &threadCall{result: make(chan error, 1)} }}

// threadPanic carries a panic from the context thread to the caller, with
// the stack where it happened.
type threadPanic struct {
	value any
	stack []byte
}

// String formats the panic value with the context thread's stack.
func (p threadPanic) String() string {
	return fmt.Sprintf("%v\n\n[on the cuda context thread]\n%s", p.value, p.stack)
}

// startThread starts the context thread: bind runs first on the locked
// thread and returns the context to bind (or an error, which ends the
// thread); unbind runs last, when stop is called.
func startThread(bind func() (uintptr, error), unbind func()) (*contextThread, error) {
	t := &contextThread{
		requests: make(chan *threadCall),
		quit:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	ready := make(chan error, 1)
	go t.loop(bind, unbind, ready)
	if err := <-ready; err != nil {
		return nil, err
	}
	return t, nil
}

// loop never calls runtime.UnlockOSThread: when it returns, the goroutine
// exits while locked and Go destroys the thread, context binding and all.
func (t *contextThread) loop(bind func() (uintptr, error), unbind func(), ready chan<- error) {
	runtime.LockOSThread()
	ctx, err := bind()
	if err != nil {
		close(t.done)
		ready <- err
		return
	}
	t.context = ctx
	ready <- nil
	for {
		select {
		case call := <-t.requests:
			call.run()
		case <-t.quit:
			unbind()
			close(t.done)
			return
		}
	}
}

func (c *threadCall) run() {
	defer func() {
		if p := recover(); p != nil {
			c.panic = threadPanic{value: p, stack: debug.Stack()}
			c.result <- nil
		}
	}()
	c.result <- c.fn()
}

// onThread reports whether the calling goroutine may run context work
// inline: its OS thread is bound to this context. A bound thread is always
// locked to its goroutine, so the answer cannot change under the caller.
func (t *contextThread) onThread() bool { return threadBound() == t.context }

// do runs fn on the context thread and returns its error; a panic in fn is
// re-raised in the caller.
func (t *contextThread) do(fn func() error) error {
	if t.onThread() {
		return fn()
	}
	call := threadCalls.Get().(*threadCall)
	call.fn = fn
	select {
	case t.requests <- call:
	case <-t.done:
		call.fn = nil
		threadCalls.Put(call)
		return ErrClosed
	}
	err := <-call.result
	p := call.panic
	call.fn, call.panic = nil, nil
	threadCalls.Put(call)
	if p != nil {
		panic(p)
	}
	return err
}

// stop ends the thread after the call in progress and waits for it.
func (t *contextThread) stop() {
	t.stopOnce.Do(func() { close(t.quit) })
	<-t.done
}
