// Package doorbell is the remote path's fast channel: one shared memory page
// between the host and a plugin, a request slot and a response slot, and
// two sequence words that each side waits on with a futex (spinning briefly
// first). A call costs a few microseconds instead of a gRPC round trip, and
// needs no allocation on either side once the channel is open.
//
// Layout of the page (all little-endian):
//
//	[0]      request sequence (uint32): the host increments it after writing a request
//	[64]     response sequence (uint32): the plugin sets it to the request's after answering
//	[128]    closed flag (uint32)
//	[192]    request length, [256] response length (uint32)
//	[4096]   request bytes  (up to RegionBytes)
//	[36864]  response bytes (up to RegionBytes)
package doorbell

import (
	"errors"
	"sync/atomic"
	"time"
	"unsafe"
)

// PageBytes is the size of a channel's shared memory.
const PageBytes = 69632

// RegionBytes bounds one request or response.
const RegionBytes = 32768

const (
	offRequestSeq  = 0
	offResponseSeq = 64
	offClosed      = 128
	offRequestLen  = 192
	offResponseLen = 256
	offRequest     = 4096
	offResponse    = offRequest + RegionBytes
)

// spinFor is how long a waiter spins before it sleeps in the kernel: a
// plugin's answer to a small request usually arrives within it.
const spinFor = 30 * time.Microsecond

// ErrClosed says the other side closed the channel.
var ErrClosed = errors.New("doorbell channel closed")

// ErrTooLarge says a message does not fit its region.
var ErrTooLarge = errors.New("doorbell message larger than its region")

// page is a view of the shared memory.
type page struct{ mem []byte }

func newPage(mem []byte) (page, error) {
	if len(mem) < PageBytes {
		return page{}, errors.New("doorbell page too small")
	}
	if uintptr(unsafe.Pointer(&mem[0]))%64 != 0 {
		return page{}, errors.New("doorbell page not aligned")
	}
	return page{mem: mem}, nil
}

func (p page) word(off int) *uint32 { return (*uint32)(unsafe.Pointer(&p.mem[off])) }

// wait blocks until the word at off differs from old, the deadline passes,
// or stop says to give up; it spins first, then sleeps on the futex in
// short slices so that stop is consulted.
func (p page) wait(off int, old uint32, deadline time.Time, stop func() error) (uint32, error) {
	w := p.word(off)
	spinUntil := time.Now().Add(spinFor)
	for {
		if v := atomic.LoadUint32(w); v != old {
			return v, nil
		}
		if atomic.LoadUint32(p.word(offClosed)) != 0 {
			return 0, ErrClosed
		}
		now := time.Now()
		if now.Before(spinUntil) {
			continue
		}
		if !deadline.IsZero() && now.After(deadline) {
			return 0, errDeadline
		}
		if stop != nil {
			if err := stop(); err != nil {
				return 0, err
			}
		}
		futexWait(w, old, 2*time.Millisecond)
	}
}

var errDeadline = errors.New("doorbell: no answer before the deadline")

// ErrDeadline is returned when the other side did not answer in time.
var ErrDeadline = errDeadline

func (p page) ring(off int, v uint32) {
	atomic.StoreUint32(p.word(off), v)
	futexWake(p.word(off))
}

func (p page) put(lenOff, dataOff int, msg []byte) error {
	if len(msg) > RegionBytes {
		return ErrTooLarge
	}
	copy(p.mem[dataOff:], msg)
	atomic.StoreUint32(p.word(lenOff), uint32(len(msg)))
	return nil
}

func (p page) get(lenOff, dataOff int, buf []byte) ([]byte, error) {
	n := int(atomic.LoadUint32(p.word(lenOff)))
	if n > RegionBytes {
		return nil, ErrTooLarge
	}
	return append(buf[:0], p.mem[dataOff:dataOff+n]...), nil
}

func (p page) close() { p.ring(offClosed, 1) }
