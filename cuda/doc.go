// Package cuda is kcand's window to the GPU: a binding to the CUDA driver
// API and NVRTC that needs no CUDA headers or libraries to build, and the
// CUDA implementation of sdk/device.Device.
//
// # Loading
//
// libcuda.so.1 is opened with dlopen on first use (Init, or any entry point),
// never in an init function; libnvrtc likewise by NewCompiler. Binaries
// link only libdl. KCAND_LIBCUDA and KCAND_LIBNVRTC (or WithDriverLibrary and
// WithNVRTCLibrary) name the libraries when the loader cannot find them.
// Without a usable driver every entry point returns an error wrapping
// ErrNoDriver (and errdefs.ErrUnsupported); built with CGO_ENABLED=0, always.
//
// # Errors
//
// A failed driver call is an *Error naming the call and the CUDA error
// (cuGetErrorName); it unwraps to a Result, so
// errors.Is(err, cuda.ResultOutOfMemory) works through any wrapping. Bad
// arguments are errdefs field errors (errdefs.ErrInvalidRequest).
//
// # Threads and the hot path
//
// A CUDA context is current per OS thread, and goroutines move between
// threads. Each Context therefore owns one goroutine locked to its OS
// thread with the context bound, fed closures through a channel. Creating
// and releasing resources (memory, modules, streams, events, graphs, IPC
// mappings) runs there. Enqueueing stream work (Function.Launch,
// GraphExec.Launch, Stream.BeginCapture and EndCapture, Stream.Record,
// Stream.Wait, async copies) and waiting (Synchronize) instead run on the
// caller's thread in a single C call that makes the context current for that
// call when needed, so they never pay the channel hop.
//
// For the lowest launch cost, bind the launching goroutine once:
//
//	unlock, err := ctx.LockThread() // pins this goroutine's thread to ctx
//	defer unlock()
//	for ... { fn.Launch(stream, cfg, args) } // one cgo call each
//
// or batch work into Context.Do, inside which every call runs inline on the
// context thread. Everything in the package is safe to call from any
// goroutine.
//
// # Graphs
//
// Launches that repeat (an engine's decode step) can be captured once and
// replayed for the cost of about one launch: Stream.BeginCapture, the
// launches, Stream.EndCapture, Graph.Instantiate, then GraphExec.Launch as
// often as needed. Capture with CaptureRelaxed, the mode kcand recommends:
// the strict modes forbid allocating while the capture lasts (CaptureGlobal
// in the whole process) and must end on the OS thread that began them.
//
// # Sharing memory between processes
//
// The host allocates (Device.Alloc) and exports device.Handle values whose
// Token is the 64-byte CUipcMemHandle; a plugin opens them (Device.Open),
// which maps each allocation once per (owner pid, allocation id) until
// Forget. Interprocess events (Device.NewIPCEvent, Device.OpenIPCEvent,
// Stream.Record, Stream.Wait) order one process's stream after another's.
//
// # Compiling kernels
//
// Compiler compiles CUDA C++ with NVRTC to a cubin for the GPU's exact
// architecture (PTX when NVRTC is older than the GPU) and caches the result
// on disk by sha256 of source, options, architecture and NVRTC version, so a
// second start compiles nothing. It needs no GPU.
package cuda
