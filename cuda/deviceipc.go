package cuda

import (
	"bytes"
	"errors"
	"os"

	"github.com/kcand/kcand/sdk/device"
	"github.com/kcand/kcand/sdk/errdefs"
)

// Open implements device.Device: it maps the allocation behind h with
// cuIpcOpenMemHandle (peer access enabled lazily) once per (owner,
// allocation) and returns the handle's range of it. Opening a handle this
// process exported is an error, checked before the driver is called.
func (d *Device) Open(h device.Handle) (device.Buffer, error) {
	if err := h.Validate(); err != nil {
		return nil, err
	}
	switch {
	case h.Kind != device.CUDA:
		return nil, errdefs.Invalid("handle.kind", h.Kind, "the CUDA device opens only cuda handles")
	case h.Owner == os.Getpid():
		return nil, errdefs.Invalid("handle.owner", h.Owner, "handle was exported by this process; use the buffer itself")
	case len(h.Token) != len(IPCHandle{}):
		return nil, errdefs.Invalid("handle.token", len(h.Token), "a CUDA IPC handle has %d bytes", len(IPCHandle{}))
	}
	if err := d.usable(); err != nil {
		return nil, err
	}
	key := mappingKey{h.Owner, h.Allocation}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, ErrClosed
	}
	a, ok := d.opened[key]
	if ok && (a.size != h.AllocationSize || !bytes.Equal(a.token[:], h.Token)) {
		// A restarted owner reused its pid and allocation id for different
		// memory: drop the stale mapping and map again.
		delete(d.opened, key)
		a.gone.Store(true)
		if err := errors.Join(d.stream.Synchronize(), d.ctx.CloseMemory(a.base)); err != nil {
			return nil, err
		}
		ok = false
	}
	if !ok {
		var token IPCHandle
		copy(token[:], h.Token)
		base, err := d.ctx.OpenMemory(h.Owner, token)
		if err != nil {
			return nil, err
		}
		a = &allocation{id: h.Allocation, owner: h.Owner, size: h.AllocationSize, base: base, token: token}
		d.opened[key] = a
	}
	return &buffer{dev: d, alloc: a, offset: h.Offset, size: h.Size}, nil
}

// Forget implements device.Device: it waits for the device's stream, then
// unmaps the allocation; buffers opened from it die with it.
func (d *Device) Forget(owner int, allocationID uint64) error {
	if d.ctx == nil {
		return nil
	}
	d.mu.Lock()
	a, ok := d.opened[mappingKey{owner, allocationID}]
	delete(d.opened, mappingKey{owner, allocationID})
	d.mu.Unlock()
	if !ok {
		return nil
	}
	a.gone.Store(true)
	return errors.Join(d.stream.Synchronize(), d.ctx.CloseMemory(a.base))
}

// NewIPCEvent creates an interprocess event (timing disabled, as the driver
// requires) and its handle, for ordering this device's stream against
// another process's: record it on Stream, pass the handle over, and the
// other process waits on it with OpenIPCEvent and Stream.Wait.
func (d *Device) NewIPCEvent() (*Event, EventHandle, error) {
	if err := d.usable(); err != nil {
		return nil, EventHandle{}, err
	}
	e, err := d.ctx.NewEvent(EventInterprocess | EventDisableTiming)
	if err != nil {
		return nil, EventHandle{}, err
	}
	h, err := e.Export()
	if err != nil {
		e.Destroy()
		return nil, EventHandle{}, err
	}
	return e, h, nil
}

// OpenIPCEvent opens another process's interprocess event.
func (d *Device) OpenIPCEvent(h EventHandle) (*Event, error) {
	if err := d.usable(); err != nil {
		return nil, err
	}
	return d.ctx.OpenEvent(h)
}
