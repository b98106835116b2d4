package sdk

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kcand/kcand/sdk/device"
	"github.com/kcand/kcand/sdk/device/cpu"
	"github.com/kcand/kcand/sdk/errdefs"
)

// forgetSpy is the CPU device, recording which allocations it was told to
// forget.
type forgetSpy struct {
	*cpu.Device
	mu     sync.Mutex
	forgot []uint64
}

func (f *forgetSpy) Forget(owner int, id uint64) error {
	f.mu.Lock()
	f.forgot = append(f.forgot, id)
	f.mu.Unlock()
	return f.Device.Forget(owner, id)
}

// TestReleaseForgetsEvenForAnUnknownID: the host frees the buffers it asks
// a plugin to forget right after the call, so the mappings must go even
// when the prepared id is unknown (the error still says so).
func TestReleaseForgetsEvenForAnUnknownID(t *testing.T) {
	spy := &forgetSpy{Device: cpu.New()}
	saved := deviceOpeners[device.CPU]
	t.Cleanup(func() { deviceOpeners[device.CPU] = saved })
	RegisterDevice(device.CPU, func() (device.Device, error) { return spy, nil })
	r, err := NewRuntime("release", "test", nil, cpuOnly{})
	require.NoError(t, err)
	defer r.Close()
	_, err = r.devices.get(device.CPU) // opened, as by an earlier call
	require.NoError(t, err)
	forget := []device.Handle{{Kind: device.CPU, Owner: 1, Allocation: 7}, {Kind: device.CPU, Owner: 1, Allocation: 9}}
	err = r.Release(context.Background(), "no-such-id", forget)
	assert.ErrorIs(t, err, errdefs.ErrNotFound)
	spy.mu.Lock()
	defer spy.mu.Unlock()
	assert.Equal(t, []uint64{7, 9}, spy.forgot)
}
