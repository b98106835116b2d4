package cuda

import (
	"errors"
	"sync"
)

// Large writes go through pinned memory. A copy from pageable memory runs
// at about 7 GB/s on the H200 machine (a 132 MB layer in 17–24 ms,
// bench/NOTES.md): the driver stages it itself, one piece at a time. Write
// instead fills one of two pinned buffers (in parallel) while the other is
// copied to the device.
const (
	// stagedWriteMin is the smallest write that goes through pinned memory.
	stagedWriteMin = 4 << 20
	// stageBytes is the size of each of the two pinned buffers.
	stageBytes = 8 << 20
	// stageFillers is how many goroutines fill a pinned buffer.
	stageFillers = 4
)

// stager holds a device's two pinned buffers, made at its first large
// write, and the events that say when each was last copied out.
type stager struct {
	mu   sync.Mutex
	bufs [2]*HostBuffer
	done [2]*Event
	used [2]bool
}

// writeStaged copies src to dst through the pinned buffers, after the work
// already on the stream, and returns once the copy is complete.
func (d *Device) writeStaged(dst DevicePtr, src []byte) error {
	st := &d.stage
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.bufs[0] == nil {
		if err := st.make(d.ctx); err != nil {
			return err
		}
	}
	for off, k := 0, 0; off < len(src); off, k = off+stageBytes, k^1 {
		n := min(stageBytes, len(src)-off)
		if st.used[k] { // its last copy to the device must be done before it is refilled
			if err := st.done[k].Synchronize(); err != nil {
				return err
			}
		}
		fill(st.bufs[k].Bytes()[:n], src[off:off+n])
		if err := d.stream.CopyToDeviceAsync(dst+DevicePtr(off), st.bufs[k], 0, int64(n)); err != nil {
			return err
		}
		if err := d.stream.Record(st.done[k]); err != nil {
			return err
		}
		st.used[k] = true
	}
	return d.stream.Synchronize()
}

// make allocates the pinned buffers and their events.
func (st *stager) make(ctx *Context) error {
	for k := range st.bufs {
		b, err := ctx.AllocHost(stageBytes)
		if err != nil {
			return errors.Join(err, st.release())
		}
		st.bufs[k] = b
		e, err := ctx.NewEvent(EventDisableTiming)
		if err != nil {
			return errors.Join(err, st.release())
		}
		st.done[k] = e
	}
	return nil
}

// free releases the pinned buffers and events; the stream must be idle.
func (st *stager) free() error {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.release()
}

// release is free with st.mu held.
func (st *stager) release() error {
	var errs []error
	for k := range st.bufs {
		if st.bufs[k] != nil {
			errs = append(errs, st.bufs[k].Free())
			st.bufs[k] = nil
		}
		if st.done[k] != nil {
			errs = append(errs, st.done[k].Destroy())
			st.done[k] = nil
		}
		st.used[k] = false
	}
	return errors.Join(errs...)
}

// fill copies src into dst (the same length) in stageFillers pieces at once.
func fill(dst, src []byte) {
	piece := (len(src) + stageFillers - 1) / stageFillers
	var wg sync.WaitGroup
	for lo := 0; lo < len(src); lo += piece {
		hi := min(lo+piece, len(src))
		wg.Add(1)
		go func() {
			defer wg.Done()
			copy(dst[lo:hi], src[lo:hi])
		}()
	}
	wg.Wait()
}
