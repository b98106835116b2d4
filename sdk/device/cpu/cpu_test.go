package cpu

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kcand/kcand/sdk/device"
	"github.com/kcand/kcand/sdk/errdefs"
)

const childEnv = "KCAND_CPU_TEST_CHILD"

// TestMain lets the test binary act as a second process that opens a
// handle, checks what the first wrote, and writes its own answer.
func TestMain(m *testing.M) {
	if h := os.Getenv(childEnv); h != "" {
		os.Exit(child(h))
	}
	os.Exit(m.Run())
}

func child(encoded string) int {
	var h device.Handle
	if err := json.Unmarshal([]byte(encoded), &h); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	d := New()
	defer d.Close()
	b, err := d.Open(h)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	mem := b.(device.HostMemory).Bytes()
	for i := range mem {
		if mem[i] != byte(i) {
			fmt.Fprintf(os.Stderr, "byte %d is %d\n", i, mem[i])
			return 4
		}
		mem[i] = byte(255 - i)
	}
	return 0
}

func TestAnotherProcessReadsAndWritesThroughAHandle(t *testing.T) {
	d := New()
	defer d.Close()
	b, err := d.Alloc(4096)
	require.NoError(t, err)
	data := make([]byte, 100)
	for i := range data {
		data[i] = byte(i)
	}
	require.NoError(t, d.Write(b, 1000, data))
	whole, err := b.Handle()
	require.NoError(t, err)
	view := whole
	view.Offset, view.Size = 1000, 100
	encoded, err := json.Marshal(view)
	require.NoError(t, err)
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+string(encoded))
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "child: %s", out)
	got := make([]byte, 100)
	require.NoError(t, d.Read(got, b, 1000))
	for i := range got {
		require.Equal(t, byte(255-i), got[i], "byte %d", i)
	}
}

func TestBadInputIsTyped(t *testing.T) {
	d := New()
	defer d.Close()
	_, err := d.Alloc(0)
	assert.ErrorIs(t, err, errdefs.ErrInvalidRequest)
	b, err := d.Alloc(64)
	require.NoError(t, err)
	assert.ErrorIs(t, d.Write(b, 60, make([]byte, 8)), errdefs.ErrInvalidRequest)
	assert.ErrorIs(t, d.Read(make([]byte, 65), b, 0), errdefs.ErrInvalidRequest)
	h, err := b.Handle()
	require.NoError(t, err)
	_, err = d.Open(h)
	var fe *errdefs.FieldError
	require.ErrorAs(t, err, &fe, "opening our own handle")
	assert.Equal(t, "handle.owner", fe.Field)
	h.Owner, h.Size = h.Owner+1, 65
	_, err = d.Open(h)
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, "handle.size", fe.Field)
	require.NoError(t, d.Free(b))
	assert.ErrorIs(t, d.Free(b), errdefs.ErrInvalidRequest, "double free")
	_, err = b.Handle()
	assert.Error(t, err, "handle of a freed buffer")
}

func TestFillAndSlice(t *testing.T) {
	d := New()
	defer d.Close()
	b, err := d.Alloc(16)
	require.NoError(t, err)
	require.NoError(t, d.Fill(b, 0xab))
	s, err := Slice(b, 4, 8)
	require.NoError(t, err)
	require.NoError(t, d.Fill(s, 0))
	got := make([]byte, 16)
	require.NoError(t, d.Read(got, b, 0))
	assert.Equal(t, []byte{0xab, 0xab, 0xab, 0xab, 0, 0, 0, 0, 0, 0, 0, 0, 0xab, 0xab, 0xab, 0xab}, got)
	_, err = Slice(b, 10, 8)
	assert.ErrorIs(t, err, errdefs.ErrInvalidRequest)
}

func TestFreeTellsTheWatcherFirst(t *testing.T) {
	d := New()
	defer d.Close()
	b, err := d.Alloc(64)
	require.NoError(t, err)
	h, err := b.Handle()
	require.NoError(t, err)
	refused := errors.New("a plugin refused to forget")
	var told []uint64
	d.WatchFree(func(allocation uint64) error {
		told = append(told, allocation)
		// The memory is still there for the watcher: another process
		// could still open it.
		_, err := os.Stat(string(h.Token))
		assert.NoError(t, err, "the shared-memory file is gone before the watcher ran")
		return refused
	})
	assert.ErrorIs(t, d.Free(b), refused, "the watcher's error comes back from Free")
	assert.Equal(t, []uint64{h.Allocation}, told)
	assert.ErrorIs(t, d.Free(b), errdefs.ErrInvalidRequest, "the memory went despite the watcher's error")
	assert.Len(t, told, 1, "a refused Free tells nobody")

	d.WatchFree(nil)
	c, err := d.Alloc(64)
	require.NoError(t, err)
	require.NoError(t, d.Free(c))
	assert.Len(t, told, 1, "a removed watcher is not told")
}
