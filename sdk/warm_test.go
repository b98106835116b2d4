package sdk

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kcand/kcand/sdk/device"
	"github.com/kcand/kcand/sdk/device/cpu"
)

// cpuOnly is a candidate that runs on the CPU device only.
type cpuOnly struct{}

func (cpuOnly) Info() CandidateInfo {
	return CandidateInfo{Name: "cpu-only", Family: FamilyAffine, Numeric: NumericBounded, Stability: Stable, Devices: []device.Kind{device.CPU}}
}
func (cpuOnly) Admit(Request, device.Profile) Admission { return Admission{Reason: "a probe"} }
func (cpuOnly) Prepare(context.Context, Env, Request, Buffers) (Prepared, error) {
	return nil, errors.New("a probe prepares nothing")
}

// TestWarmDeviceOpensOnlyDevicesItsCandidatesUse: the host's device is
// opened ahead of use once, and kept for the first call that needs it; a
// device no candidate runs on is never opened.
func TestWarmDeviceOpensOnlyDevicesItsCandidatesUse(t *testing.T) {
	var cpuOpens, cudaOpens atomic.Int32
	saved := map[device.Kind]func() (device.Device, error){}
	for k, v := range deviceOpeners {
		saved[k] = v
	}
	t.Cleanup(func() { deviceOpeners = saved })
	RegisterDevice(device.CPU, func() (device.Device, error) { cpuOpens.Add(1); return cpu.New(), nil })
	RegisterDevice(device.CUDA, func() (device.Device, error) { cudaOpens.Add(1); return nil, errors.New("no GPU in this test") })

	r, err := NewRuntime("warm", "test", nil, cpuOnly{})
	require.NoError(t, err)
	assert.Nil(t, r.WarmDevice(device.CUDA), "no candidate runs on CUDA")
	assert.Nil(t, r.WarmDevice("tpu"), "no opener for the kind")
	done := r.WarmDevice(device.CPU)
	require.NotNil(t, done)
	<-done
	assert.EqualValues(t, 1, cpuOpens.Load())
	_, err = r.devices.get(device.CPU)
	require.NoError(t, err)
	assert.EqualValues(t, 1, cpuOpens.Load(), "the device opened ahead is the one calls use")
	assert.EqualValues(t, 0, cudaOpens.Load())
}

// TestWarmDeviceAfterCloseOpensNothing: a device opened ahead of use never
// outlives the runtime, even when Close comes first.
func TestWarmDeviceAfterCloseOpensNothing(t *testing.T) {
	var opens atomic.Int32
	saved := deviceOpeners[device.CPU]
	t.Cleanup(func() { deviceOpeners[device.CPU] = saved })
	RegisterDevice(device.CPU, func() (device.Device, error) { opens.Add(1); return cpu.New(), nil })
	r, err := NewRuntime("warm", "test", nil, cpuOnly{})
	require.NoError(t, err)
	require.NoError(t, r.Close())
	<-r.WarmDevice(device.CPU)
	assert.EqualValues(t, 0, opens.Load())
	_, err = r.devices.get(device.CPU)
	assert.ErrorIs(t, err, ErrUnavailable)
}
