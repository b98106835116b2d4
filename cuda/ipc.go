package cuda

import (
	"encoding/base64"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/kcand/kcand/sdk/errdefs"
)

// IPCHandle is a CUipcMemHandle or CUipcEventHandle: 64 opaque bytes that
// name a device allocation or an event to another process.
type IPCHandle [64]byte

// ipcLazyEnablePeerAccess is CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS: map memory
// that lives on another GPU by enabling peer access on first use.
const ipcLazyEnablePeerAccess = 1

// ExportMemory returns the IPC handle of an allocation. p must be the base
// address MemAlloc returned: a handle always names a whole allocation, and
// ranges inside it travel as offsets beside the handle.
func (c *Context) ExportMemory(p DevicePtr) (IPCHandle, error) {
	if p == 0 {
		return IPCHandle{}, errdefs.Invalid("pointer", p, "null device pointer")
	}
	var h IPCHandle
	err := c.Do(func() error {
		var r Result
		h, r = cuIpcGetMemHandle(p)
		return check("cuIpcGetMemHandle", r)
	})
	return h, err
}

// OpenMemory maps an allocation exported by another process and returns its
// base address in this process. owner is the exporter's pid: the driver
// cannot open a handle in the process that made it, so that is refused here
// with a clear error instead of a confusing driver code. Close the mapping
// with CloseMemory; opening the same handle twice is the caller's business
// (Device.Open caches one mapping per allocation).
func (c *Context) OpenMemory(owner int, h IPCHandle) (DevicePtr, error) {
	if owner == os.Getpid() {
		return 0, errdefs.Invalid("handle.owner", owner, "memory exported by this process cannot be opened by it; use the allocation itself")
	}
	var p DevicePtr
	err := c.Do(func() error {
		var r Result
		p, r = cuIpcOpenMemHandle(h, ipcLazyEnablePeerAccess)
		if r != ResultSuccess {
			return &Error{Op: "cuIpcOpenMemHandle_v2", Code: r, Detail: fmt.Sprintf("handle of pid %d", owner)}
		}
		return nil
	})
	return p, err
}

// CloseMemory unmaps memory opened with OpenMemory.
func (c *Context) CloseMemory(p DevicePtr) error {
	if p == 0 {
		return errdefs.Invalid("pointer", p, "null device pointer")
	}
	return c.Do(func() error { return check("cuIpcCloseMemHandle", cuIpcCloseMemHandle(p)) })
}

// EventHandle names an interprocess event for another process: the
// exporter's pid and the driver's handle.
type EventHandle struct {
	Owner int
	Token IPCHandle
}

// String encodes the handle as "pid:base64", to pass it over a pipe, an
// environment variable or a protocol field.
func (h EventHandle) String() string {
	return strconv.Itoa(h.Owner) + ":" + base64.RawStdEncoding.EncodeToString(h.Token[:])
}

// ParseEventHandle decodes the form String produces.
func ParseEventHandle(s string) (EventHandle, error) {
	owner, token, ok := strings.Cut(s, ":")
	if !ok {
		return EventHandle{}, errdefs.Invalid("event handle", s, "want pid:base64")
	}
	var h EventHandle
	var err error
	if h.Owner, err = strconv.Atoi(owner); err != nil || h.Owner <= 0 {
		return EventHandle{}, errdefs.Invalid("event handle", s, "bad pid %q", owner)
	}
	raw, err := base64.RawStdEncoding.DecodeString(token)
	if err != nil || len(raw) != len(h.Token) {
		return EventHandle{}, errdefs.Invalid("event handle", s, "token must be %d base64 bytes", len(h.Token))
	}
	copy(h.Token[:], raw)
	return h, nil
}

// Export returns the interprocess handle of an event created with
// EventInterprocess|EventDisableTiming.
func (e *Event) Export() (EventHandle, error) {
	if err := e.usable(nil); err != nil {
		return EventHandle{}, err
	}
	if e.flags&EventInterprocess == 0 {
		return EventHandle{}, errdefs.Invalid("event", e.flags, "created without EventInterprocess")
	}
	h := EventHandle{Owner: os.Getpid()}
	err := e.ctx.Do(func() error {
		var r Result
		h.Token, r = cuIpcGetEventHandle(e.handle)
		return check("cuIpcGetEventHandle", r)
	})
	return h, err
}

// OpenEvent opens another process's interprocess event. Recording it there
// and waiting on it here (Stream.Wait) orders this process's stream after
// the other's. Destroy the returned event when done.
func (c *Context) OpenEvent(h EventHandle) (*Event, error) {
	if h.Owner == os.Getpid() {
		return nil, errdefs.Invalid("event handle.owner", h.Owner, "event exported by this process cannot be opened by it; use the event itself")
	}
	e := &Event{ctx: c, flags: EventInterprocess | EventDisableTiming}
	err := c.Do(func() error {
		var r Result
		e.handle, r = cuIpcOpenEventHandle(h.Token)
		return check("cuIpcOpenEventHandle", r)
	})
	if err != nil {
		return nil, err
	}
	return e, nil
}
