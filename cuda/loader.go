package cuda

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// DriverLibraryEnv names the environment variable that points at
// libcuda.so.1 when it is not on the loader's path.
const DriverLibraryEnv = "KCAND_LIBCUDA"

// defaultDriverLibraries are tried in order when no path is given: the
// loader's own search (LD_LIBRARY_PATH, ldconfig), then the places NVIDIA's
// container toolkit and distributions put the driver.
var defaultDriverLibraries = []string{
	"libcuda.so.1",
	"/usr/local/nvidia/lib64/libcuda.so.1",
	"/usr/lib/x86_64-linux-gnu/libcuda.so.1",
	"/usr/lib64/libcuda.so.1",
}

// Option configures how the driver is loaded.
type Option func(*options)

type options struct {
	driverLibrary string
}

// WithDriverLibrary loads libcuda from path instead of searching for it.
// It takes precedence over KCAND_LIBCUDA.
func WithDriverLibrary(path string) Option {
	return func(o *options) { o.driverLibrary = path }
}

func collectOptions(opts []Option) options {
	var o options
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	return o
}

// driverLibraryCandidates lists the paths to try, explicit ones alone.
func driverLibraryCandidates(explicit, env string) []string {
	switch {
	case explicit != "":
		return []string{explicit}
	case env != "":
		return []string{env}
	}
	return defaultDriverLibraries
}

// loader holds the process-wide driver state. The driver is loaded at most
// once; a failed attempt is not remembered, so a later Init may retry
// (with another path, say).
var loader struct {
	mu     sync.Mutex
	loaded atomic.Bool
	path   string
}

// Init loads libcuda.so.1 and initialises the driver (cuInit). Every entry
// point of the package calls it, so calling it first is needed only to pick
// the library. It is never called from an init function: a process without
// a GPU pays nothing until it asks for one.
//
// Once the driver is loaded, later calls return nil and ignore opts. When no
// usable driver exists the error wraps ErrNoDriver and says why (the library
// is missing, lacks a symbol, or cuInit failed, which also wraps the
// driver's Result).
func Init(opts ...Option) error {
	if loader.loaded.Load() {
		return nil
	}
	o := collectOptions(opts)
	loader.mu.Lock()
	defer loader.mu.Unlock()
	if loader.loaded.Load() {
		return nil
	}
	var failures []string
	for _, path := range driverLibraryCandidates(o.driverLibrary, os.Getenv(DriverLibraryEnv)) {
		message, ok := driverOpen(path)
		if !ok {
			failures = append(failures, message)
			continue
		}
		// cuInit fails on machines that have the user-space library but
		// no GPU or kernel driver: that is "no driver" too.
		if err := check("cuInit", cuInit()); err != nil {
			return fmt.Errorf("%w: %s: %w", ErrNoDriver, path, err)
		}
		loader.path = path
		loader.loaded.Store(true)
		return nil
	}
	return fmt.Errorf("%w: %s", ErrNoDriver, strings.Join(slices.Compact(failures), "; "))
}

// DriverLibrary reports the path libcuda was loaded from, or "".
func DriverLibrary() string {
	loader.mu.Lock()
	defer loader.mu.Unlock()
	return loader.path
}
