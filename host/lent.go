package host

import (
	"context"
	"os"
	"slices"
	"sync"

	"github.com/kcand/kcand/sdk/device"
)

// A plugin keeps mapped what a remote run hands it (forget.go says why that
// matters), and an engine frees its buffers whenever it likes. The host
// remembers which of its device's allocations it lent to which plugins, and
// its device tells it of each Free (device.FreeWatcher), so a buffer the
// engine frees through Host.Device is forgotten in those plugins before its
// memory goes: Host.Forget is then needed only for memory the host's
// device did not allocate.

// lentBuffers records, per allocation of the host's device lent to plugins
// on the remote path and not forgotten since, a handle of it and the
// plugins it went to.
type lentBuffers struct {
	kind device.Kind // the host's device: only its allocations are recorded
	pid  int         // this process: the owner of those allocations

	mu   sync.Mutex
	lent map[uint64]*lentAllocation // by allocation id
}

// lentAllocation is one allocation's record.
type lentAllocation struct {
	handle  device.Handle
	plugins []*Plugin
}

func newLentBuffers(kind device.Kind) *lentBuffers {
	return &lentBuffers{kind: kind, pid: os.Getpid(), lent: map[uint64]*lentAllocation{}}
}

// lend records that p was handed the allocations behind handles. Handles of
// other devices or processes are not recorded: the host's device never
// frees them, so only Host.Forget can.
func (l *lentBuffers) lend(p *Plugin, handles map[string]device.Handle) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, hd := range handles {
		if hd.Kind != l.kind || hd.Owner != l.pid {
			continue
		}
		a, ok := l.lent[hd.Allocation]
		if !ok {
			a = &lentAllocation{handle: hd}
			l.lent[hd.Allocation] = a
		}
		if !slices.Contains(a.plugins, p) {
			a.plugins = append(a.plugins, p)
		}
	}
}

// take removes an allocation's record and returns it, if it was lent.
func (l *lentBuffers) take(allocation uint64) (*lentAllocation, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	a, ok := l.lent[allocation]
	delete(l.lent, allocation)
	return a, ok
}

// drop removes the records of handles' allocations (Host.Forget has every
// plugin forget them).
func (l *lentBuffers) drop(handles []device.Handle) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, hd := range handles {
		if hd.Kind == l.kind && hd.Owner == l.pid {
			delete(l.lent, hd.Allocation)
		}
	}
}

// forgetOnFree is the host device's FreeWatcher callback: an allocation
// that was lent to plugins is forgotten in each of them before the device
// releases it.
func (h *Host) forgetOnFree(allocation uint64) error {
	a, ok := h.env.lent.take(allocation)
	if !ok {
		return nil
	}
	return forgetIn(context.Background(), a.plugins, []device.Handle{a.handle})
}
