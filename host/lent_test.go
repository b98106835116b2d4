package host

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kcand/kcand/sdk/device"
)

func TestLentBuffersRecordOnlyWhatTheHostsDeviceFrees(t *testing.T) {
	l := newLentBuffers(device.CUDA)
	pid := os.Getpid()
	a, b := &Plugin{}, &Plugin{}
	own := device.Handle{Kind: device.CUDA, Owner: pid, Allocation: 7}
	l.lend(a, map[string]device.Handle{
		"x":     own,
		"y":     {Kind: device.CUDA, Owner: pid, Allocation: 8},
		"cpu":   {Kind: device.CPU, Owner: pid, Allocation: 9},       // another device's: only Host.Forget frees it
		"other": {Kind: device.CUDA, Owner: pid + 1, Allocation: 10}, // opened from another process
	})
	l.lend(a, map[string]device.Handle{"x": own})
	l.lend(b, map[string]device.Handle{"x": own})
	assert.Len(t, l.lent, 2, "allocations 7 and 8 only")

	rec, ok := l.take(7)
	require.True(t, ok)
	assert.Equal(t, []*Plugin{a, b}, rec.plugins, "each plugin once, in the order they were handed it")
	assert.Equal(t, own, rec.handle)
	_, ok = l.take(7)
	assert.False(t, ok, "a record is taken once")

	l.drop([]device.Handle{{Kind: device.CUDA, Owner: pid, Allocation: 8}})
	_, ok = l.take(8)
	assert.False(t, ok, "Host.Forget dropped it")
	_, ok = l.take(9)
	assert.False(t, ok, "another device's allocation of the same id was never recorded")
}
