package host

import (
	"errors"
	"fmt"
	"sync"

	"github.com/kcand/kcand/cuda"
	"github.com/kcand/kcand/sdk/device"
)

// maxScratchStreams is how many streams at once an exported plan keeps a
// workspace for: the prepared candidate's own, given to the first stream a
// run uses, and up to maxScratchStreams-1 more. A run on a further stream
// takes over the workspace of the stream used least recently, after
// waiting for that stream's work.
const maxScratchStreams = 4

// streamScratch gives every stream that runs one exported plan a workspace
// of its own. Work on one stream runs in order, so runs on it may share
// scratch memory; runs on two streams may overlap on the GPU, and two
// kernels writing the same workspace at once would give wrong outputs.
// The workspace a stream gets is allocated at its first run (memory the
// size of the candidate's workspace, per stream) and freed by close. Safe
// for concurrent use.
type streamScratch struct {
	size  int64
	alloc func(size int64) (device.Buffer, error)
	free  func(device.Buffer) error
	// drain waits until the work enqueued on a stream has finished.
	drain func(*cuda.Stream) error

	mu     sync.Mutex
	owner  *cuda.Stream   // the stream that uses the prepared workspace
	extra  []streamBuffer // the other streams' workspaces, least recently used first
	closed bool
}

// streamBuffer is one stream's own workspace.
type streamBuffer struct {
	stream *cuda.Stream
	buf    device.Buffer
}

// newStreamScratch serves workspaces of size bytes from dev.
func newStreamScratch(dev *cuda.Device, size int64) *streamScratch {
	return &streamScratch{size: size, alloc: dev.Alloc, free: dev.Free, drain: drainStream}
}

// drainStream waits for s's work; a stream the caller has destroyed since
// has none left to wait for.
func drainStream(s *cuda.Stream) error {
	err := s.Synchronize()
	if errors.Is(err, cuda.ErrClosed) {
		return nil
	}
	return err
}

// forStream returns the workspace runs on s must use: nil for the
// prepared one (the first stream's), else s's own.
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
	for i, e := range w.extra {
		if e.stream == s {
			w.extra = append(append(w.extra[:i:i], w.extra[i+1:]...), e)
			return e.buf, nil
		}
	}
	if len(w.extra) < maxScratchStreams-1 {
		buf, err := w.alloc(w.size)
		if err != nil {
			return nil, fmt.Errorf("a workspace of %d bytes for a new stream (one per stream, up to %d streams): %w", w.size, maxScratchStreams, err)
		}
		w.extra = append(w.extra, streamBuffer{stream: s, buf: buf})
		return buf, nil
	}
	// Every slot is taken: s takes the least recently used stream's
	// workspace once that stream's work, which may still use it, is done.
	e := w.extra[0]
	if err := w.drain(e.stream); err != nil {
		return nil, fmt.Errorf("waiting for a stream whose workspace a new stream takes over (at most %d streams keep their own): %w", maxScratchStreams, err)
	}
	w.extra = append(w.extra[1:], streamBuffer{stream: s, buf: e.buf})
	return e.buf, nil
}

// close frees every stream's own workspace after that stream's work; the
// prepared workspace belongs to the prepared candidate.
func (w *streamScratch) close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	w.closed = true
	var errs []error
	for _, e := range w.extra {
		errs = append(errs, w.drain(e.stream), w.free(e.buf))
	}
	w.extra = nil
	return errors.Join(errs...)
}
