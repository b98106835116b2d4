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

// scratchID is the workspace forStream gives s: 0 for the prepared one,
// else the fake allocator's number.
func scratchID(t *testing.T, w *streamScratch, s *cuda.Stream) int {
	t.Helper()
	buf, err := w.forStream(s)
	require.NoError(t, err)
	if buf == nil {
		return 0
	}
	return buf.(*scratchBuffer).id
}

// testStreams are distinct *cuda.Stream keys; no driver call is made
// through them.
func testStreams(n int) []*cuda.Stream {
	out := make([]*cuda.Stream, n)
	for i := range out {
		out[i] = &cuda.Stream{}
	}
	return out
}

// TestStreamScratchGivesEachStreamItsOwnWorkspace: the first stream keeps
// the prepared workspace, each further stream gets one of its own that it
// keeps, and close waits for every stream before it frees theirs.
func TestStreamScratchGivesEachStreamItsOwnWorkspace(t *testing.T) {
	w, l := newTestScratch(4096)
	s := testStreams(maxScratchStreams)
	for i := range s {
		assert.Equal(t, i, scratchID(t, w, s[i]), "stream %d", i)
	}
	for round := 0; round < 3; round++ {
		for i := len(s) - 1; i >= 0; i-- {
			assert.Equal(t, i, scratchID(t, w, s[i]), "round %d, stream %d", round, i)
		}
	}
	assert.Len(t, l.allocated, maxScratchStreams-1)
	for _, n := range l.allocated {
		assert.EqualValues(t, 4096, n)
	}
	assert.Empty(t, l.drained, "running waits for nothing")

	require.NoError(t, w.close())
	assert.Len(t, l.freed, maxScratchStreams-1)
	assert.ElementsMatch(t, s, l.drained, "every stream's work, the first's too, is waited for")
	require.NoError(t, w.close(), "a second close does nothing")
	assert.Len(t, l.freed, maxScratchStreams-1)
	_, err := w.forStream(s[1])
	assert.ErrorIs(t, err, cuda.ErrClosed)
}

// TestStreamScratchRefusesAStreamPastTheLimit: a stream past the limit is
// refused with an error naming it, and the others keep their workspaces:
// none is handed over, since a captured graph would keep using it.
func TestStreamScratchRefusesAStreamPastTheLimit(t *testing.T) {
	w, l := newTestScratch(64)
	s := testStreams(maxScratchStreams + 1)
	for i := 0; i < maxScratchStreams; i++ {
		scratchID(t, w, s[i])
	}
	_, err := w.forStream(s[maxScratchStreams])
	assertFieldError(t, err, "stream", "0x0")
	assert.Contains(t, err.Error(), fmt.Sprintf("already runs on %d streams", maxScratchStreams))
	for i := 0; i < maxScratchStreams; i++ {
		assert.Equal(t, i, scratchID(t, w, s[i]), "stream %d keeps its workspace", i)
	}
	assert.Len(t, l.allocated, maxScratchStreams-1)
	assert.Empty(t, l.drained)
}

// TestStreamScratchAllocationFailureKeepsState: a failed allocation is an
// error saying what it was for, and the stream can try again.
func TestStreamScratchAllocationFailureKeepsState(t *testing.T) {
	w, l := newTestScratch(1 << 30)
	s := testStreams(3)
	scratchID(t, w, s[0])
	l.failAlloc = errors.New("out of memory")
	_, err := w.forStream(s[1])
	require.Error(t, err)
	assert.ErrorIs(t, err, l.failAlloc)
	assert.Contains(t, err.Error(), fmt.Sprintf("a workspace of %d bytes of its own", 1<<30))
	l.failAlloc = nil
	assert.Equal(t, 1, scratchID(t, w, s[1]))
	assert.Equal(t, 2, scratchID(t, w, s[2]))
	assert.Equal(t, 0, scratchID(t, w, s[0]))
}
