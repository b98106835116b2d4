package host

import (
	"context"
	"os"
	"sync"

	"github.com/kcand/kcand/sdk/device"
)

// A plugin keeps mapped what a remote run hands it (forget.go says why that
// matters), and an engine frees its buffers whenever it likes. The host
// remembers which of the engine's allocations it lent to plugins, and its
// device tells it of each Free (device.FreeWatcher), so a buffer the engine
// frees through Host.Device is forgotten in every plugin before its memory
// goes: Host.Forget is then needed only for memory the host's device did
// not allocate.

// lentBuffers holds one handle per allocation lent to plugins on the remote
// path and not forgotten since.
type lentBuffers struct {
	mu      sync.Mutex
	handles map[lentKey]device.Handle
}

// lentKey names an allocation as plugins cache its mapping.
type lentKey struct {
	owner      int
	allocation uint64
}

func newLentBuffers() *lentBuffers { return &lentBuffers{handles: map[lentKey]device.Handle{}} }

// lend records the allocations behind handles.
func (l *lentBuffers) lend(handles map[string]device.Handle) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, hd := range handles {
		l.handles[lentKey{hd.Owner, hd.Allocation}] = hd
	}
}

// take removes the allocation's record and returns its handle, if it was
// lent.
func (l *lentBuffers) take(owner int, allocation uint64) (device.Handle, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	key := lentKey{owner, allocation}
	hd, ok := l.handles[key]
	delete(l.handles, key)
	return hd, ok
}

// drop removes the records of handles' allocations.
func (l *lentBuffers) drop(handles []device.Handle) {
	for _, hd := range handles {
		l.take(hd.Owner, hd.Allocation)
	}
}

// forgetOnFree is the host device's FreeWatcher callback: an allocation of
// this process that was lent to plugins is forgotten in each of them
// before the device releases it.
func (h *Host) forgetOnFree(allocation uint64) error {
	hd, ok := h.env.lent.take(os.Getpid(), allocation)
	if !ok {
		return nil
	}
	return forgetIn(context.Background(), h.manager.Plugins(), []device.Handle{hd})
}
