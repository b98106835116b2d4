package host

import (
	"errors"
	"fmt"
	"sync"

	"github.com/kcand/kcand/cuda"
	"github.com/kcand/kcand/sdk/device"
	"github.com/kcand/kcand/sdk/errdefs"
)

// maxScratchStreams is how many streams one exported plan runs on, each
// with a workspace of its own: the prepared candidate's, which the first
// stream a run uses gets, and up to maxScratchStreams-1 more. A workspace
// is never handed from one stream to another, because a CUDA graph
// captured from a stream keeps its address for every replay.
const maxScratchStreams = 8

// streamScratch gives every stream that runs one exported plan a workspace
// of its own. Work on one stream runs in order, so runs on it may share
// scratch memory; runs on two streams may overlap on the GPU, and two
// kernels writing the same workspace at once would give wrong outputs.
// The workspace a stream gets is allocated at its first run (memory the
// size of the candidate's workspace, per stream) and freed by close, also
// when the stream was destroyed before: a graph captured from it may still
// be replayed. Safe for concurrent use.
type streamScratch struct {
	size  int64
	alloc func(size int64) (device.Buffer, error)
	free  func(device.Buffer) error
	// drain waits until the work enqueued on a stream has finished.
	drain func(*cuda.Stream) error

	mu     sync.Mutex
	owner  *cuda.Stream // the stream that uses the prepared workspace
	extra  map[*cuda.Stream]device.Buffer
	closed bool
}

// newStreamScratch serves workspaces of size bytes from dev.
func newStreamScratch(dev *cuda.Device, size int64) *streamScratch {
	return &streamScratch{size: size, alloc: dev.Alloc, free: dev.Free, drain: drainStream}
}

// drainStream waits for s's work. A stream the caller has destroyed since
// may still have work running (cuStreamDestroy does not wait for it), so
// then the whole context is waited for.
func drainStream(s *cuda.Stream) error {
	err := s.Synchronize()
	if errors.Is(err, cuda.ErrClosed) {
		return s.Context().Synchronize()
	}
	return err
}

// forStream returns the workspace runs on s must use: nil for the
// prepared one (the first stream's), else s's own. A stream past
// maxScratchStreams is refused with an error naming it.
func (w *streamScratch) forStream(s *cuda.Stream) (device.Buffer, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil, cuda.ErrClosed
	}
	if w.owner == nil || w.owner == s {
		w.owner = s
		return nil, nil
	}
	if buf, ok := w.extra[s]; ok {
		return buf, nil
	}
	if 1+len(w.extra) >= maxScratchStreams {
		return nil, errdefs.Invalid("stream", fmt.Sprintf("%#x", s.Handle()),
			"the executable already runs on %d streams, each with a workspace of its own (%d bytes); bind another executable for more", maxScratchStreams, w.size)
	}
	buf, err := w.alloc(w.size)
	if err != nil {
		return nil, fmt.Errorf("stream %#x: a workspace of %d bytes of its own: %w", s.Handle(), w.size, err)
	}
	if w.extra == nil {
		w.extra = map[*cuda.Stream]device.Buffer{}
	}
	w.extra[s] = buf
	return buf, nil
}

// close frees every stream's own workspace after that stream's work, and
// waits for the first stream's, so that the prepared workspace, which
// belongs to the prepared candidate, is no longer in use once close
// returns (the device frees memory after waiting for its own stream only).
func (w *streamScratch) close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	w.closed = true
	var errs []error
	if w.owner != nil {
		errs = append(errs, w.drain(w.owner))
	}
	for s, buf := range w.extra {
		errs = append(errs, w.drain(s), w.free(buf))
	}
	w.extra = nil
	return errors.Join(errs...)
}
