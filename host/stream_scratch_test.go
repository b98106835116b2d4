package host

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kcand/kcand/cuda"
	"github.com/kcand/kcand/sdk/device"
)

// scratchBuffer is a workspace the fake allocator made.
type scratchBuffer struct {
	id   int
	size int64
}

func (b *scratchBuffer) Size() int64                    { return b.size }
func (b *scratchBuffer) Handle() (device.Handle, error) { return device.Handle{}, nil }

// scratchLedger records what a streamScratch allocated, freed and waited for.
type scratchLedger struct {
	allocated []int64
	freed     []int
	drained   []*cuda.Stream
	failAlloc error
}

func newTestScratch(size int64) (*streamScratch, *scratchLedger) {
	l := &scratchLedger{}
	w := &streamScratch{
		size: size,
		alloc: func(n int64) (device.Buffer, error) {
			if l.failAlloc != nil {
				return nil, l.failAlloc
			}
			l.allocated = append(l.allocated, n)
			return &scratchBuffer{id: len(l.allocated), size: n}, nil
		},
		free:  func(b device.Buffer) error { l.freed = append(l.freed, b.(*scratchBuffer).id); return nil },
		drain: func(s *cuda.Stream) error { l.drained = append(l.drained, s); return nil },
	}
	return w, l
}

func scratchID(t *testing.T, w *streamScratch, s *cuda.Stream) int {
	t.Helper()
	buf, err := w.forStream(s)
	require.NoError(t, err)
	if buf == nil {
		return 0 // the prepared workspace
	}
	return buf.(*scratchBuffer).id
}

// Streams (as *cuda.Stream keys; no driver call is made through them).
func testStreams(n int) []*cuda.Stream {
	out := make([]*cuda.Stream, n)
	for i := range out {
		out[i] = &cuda.Stream{}
	}
	return out
}

// TestStreamScratchGivesEachStreamItsOwnWorkspace: the first stream keeps
// the prepared workspace, each further stream gets one of its own that it
// keeps, and nothing waits while every stream has a slot.
func TestStreamScratchGivesEachStreamItsOwnWorkspace(t *testing.T) {
	w, l := newTestScratch(4096)
	s := testStreams(maxScratchStreams)
	assert.Equal(t, 0, scratchID(t, w, s[0]))
	for i := 1; i < len(s); i++ {
		assert.Equal(t, i, scratchID(t, w, s[i]), "stream %d", i)
	}
	for round := 0; round < 3; round++ {
		for i := len(s) - 1; i >= 0; i-- {
			assert.Equal(t, i, scratchID(t, w, s[i]), "round %d, stream %d", round, i)
		}
	}
	assert.Equal(t, []int64{4096, 4096, 4096}, l.allocated)
	assert.Empty(t, l.drained)

	require.NoError(t, w.close())
	assert.ElementsMatch(t, []int{1, 2, 3}, l.freed)
	assert.ElementsMatch(t, s[1:], l.drained, "each stream's work is waited for before its workspace is freed")
	require.NoError(t, w.close(), "a second close does nothing")
	assert.Len(t, l.freed, 3)
	_, err := w.forStream(s[1])
	assert.ErrorIs(t, err, cuda.ErrClosed)
}

// TestStreamScratchHandsOverTheLeastRecentlyUsed: past the limit a new
// stream takes the workspace of the stream used least recently, after
// waiting for that stream; the first stream's prepared workspace is never
// handed over.
func TestStreamScratchHandsOverTheLeastRecentlyUsed(t *testing.T) {
	w, l := newTestScratch(64)
	s := testStreams(maxScratchStreams + 2)
	for i := 0; i < maxScratchStreams; i++ {
		scratchID(t, w, s[i])
	}
	scratchID(t, w, s[1]) // s[2] is now the least recently used
	assert.Equal(t, 2, scratchID(t, w, s[maxScratchStreams]), "the new stream takes s[2]'s workspace")
	assert.Equal(t, []*cuda.Stream{s[2]}, l.drained)
	assert.Equal(t, 3, scratchID(t, w, s[maxScratchStreams+1]), "then s[3]'s")
	assert.Equal(t, []*cuda.Stream{s[2], s[3]}, l.drained)
	assert.Equal(t, 0, scratchID(t, w, s[0]))
	assert.Len(t, l.allocated, maxScratchStreams-1, "no workspace beyond the limit")

	// s[2] comes back: it takes the least recently used again (s[1]'s).
	assert.Equal(t, 1, scratchID(t, w, s[2]))
	assert.Equal(t, s[1], l.drained[len(l.drained)-1])
}

// TestStreamScratchFailuresAreErrorsThatKeepState: a failed allocation or a
// failed wait is an error saying what it was for, and the streams that
// have a workspace keep it.
func TestStreamScratchFailuresAreErrorsThatKeepState(t *testing.T) {
	w, l := newTestScratch(1 << 30)
	s := testStreams(maxScratchStreams + 1)
	scratchID(t, w, s[0])
	l.failAlloc = errors.New("out of memory")
	_, err := w.forStream(s[1])
	require.Error(t, err)
	assert.ErrorIs(t, err, l.failAlloc)
	assert.Contains(t, err.Error(), fmt.Sprintf("a workspace of %d bytes for a new stream", 1<<30))
	l.failAlloc = nil
	for i := 1; i < maxScratchStreams; i++ {
		assert.Equal(t, i, scratchID(t, w, s[i]))
	}

	stuck := errors.New("illegal address")
	w.drain = func(*cuda.Stream) error { return stuck }
	_, err = w.forStream(s[maxScratchStreams])
	assert.ErrorIs(t, err, stuck)
	assert.Contains(t, err.Error(), "waiting for a stream whose workspace a new stream takes over")
	for i := 1; i < maxScratchStreams; i++ {
		assert.Equal(t, i, scratchID(t, w, s[i]), "stream %d keeps its workspace", i)
	}
}
