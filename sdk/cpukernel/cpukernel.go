// Package cpukernel holds helpers for writing kernels for the CPU device.
package cpukernel

import (
	"fmt"
	"runtime"
	"sync"

	"github.com/kcand/kcand/sdk/device"
	"github.com/kcand/kcand/sdk/errdefs"
)

// ParallelFor calls body(lo, hi) over [0, n) split into contiguous chunks of
// at least grain items, one goroutine per chunk, up to GOMAXPROCS chunks.
func ParallelFor(n, grain int, body func(lo, hi int)) {
	workers := runtime.GOMAXPROCS(0)
	if grain < 1 {
		grain = 1
	}
	if chunks := (n + grain - 1) / grain; chunks < workers {
		workers = chunks
	}
	if workers <= 1 {
		body(0, n)
		return
	}
	var wg sync.WaitGroup
	per := (n + workers - 1) / workers
	for lo := 0; lo < n; lo += per {
		hi := min(lo+per, n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			body(lo, hi)
		}()
	}
	wg.Wait()
}

// Bytes returns the CPU-addressable bytes of a bound buffer, or an error
// naming the binding when it is missing or not host memory.
func Bytes(bufs map[string]device.Buffer, name string) ([]byte, error) {
	b, ok := bufs[name]
	if !ok {
		return nil, errdefs.Invalid("buffers."+name, "missing", "binding required")
	}
	hm, ok := b.(device.HostMemory)
	if !ok {
		return nil, errdefs.Invalid("buffers."+name, fmt.Sprintf("%T", b), "not CPU memory")
	}
	mem := hm.Bytes()
	if mem == nil {
		return nil, errdefs.Invalid("buffers."+name, "unmapped", "buffer is no longer mapped")
	}
	return mem, nil
}
