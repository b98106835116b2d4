package affinegpu

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kcand/kcand/sdk"
	"github.com/kcand/kcand/sdk/device"
	"github.com/kcand/kcand/sdk/errdefs"
	"github.com/kcand/kcand/sdk/family/affine"
	"github.com/kcand/kcand/sdk/gpukernel"
)

// sized is a buffer that only has a size: enough for binding checks.
type sized int64

func (s sized) Size() int64                    { return int64(s) }
func (s sized) Handle() (device.Handle, error) { return device.Handle{}, errors.New("not shareable") }

func buffersOf(sizes map[string]int64) sdk.Buffers {
	out := sdk.Buffers{}
	for k, v := range sizes {
		out[k] = sized(v)
	}
	return out
}

func TestPreparedStepsExportInOrderWithTheirWorkspace(t *testing.T) {
	req := streamRequest(64, 1024, 512, 4, 64)
	weights := buffersOf(affine.WeightSizes(req))
	mod := sdk.NewModule(sdk.ModuleCubin, []byte("image"))
	steps := []gpukernel.Step{
		{Kernel: &gpukernel.Kernel{Module: mod, Entry: "prep"}, Launch: gpukernel.Launch{Grid: [3]uint32{1, 16, 1}, Block: [3]uint32{64, 1, 1}}},
		{Kernel: &gpukernel.Kernel{Module: mod, Entry: "main"}, Launch: gpukernel.Launch{Grid: [3]uint32{4, 1, 1}, Block: [3]uint32{384, 1, 1}}},
	}
	p, err := NewPreparedSteps(req, weights, steps, 1<<20)
	require.NoError(t, err)
	assert.Equal(t, int64(1<<20), p.WorkspaceBytes())
	plan, err := p.Export()
	require.NoError(t, err)
	require.Len(t, plan.Launches, 2)
	assert.Equal(t, "prep", plan.Launches[0].Function)
	assert.Equal(t, "main", plan.Launches[1].Function)
	assert.Len(t, plan.Modules, 1)
	assert.Contains(t, p.Describe(), "workspace 1048576 bytes")

	// Executing without the workspace (or with too small a one) is the
	// caller's mistake, named by binding.
	io := buffersOf(affine.InputSizes(req))
	for k, v := range buffersOf(affine.OutputSizes(req)) {
		io[k] = v
	}
	err = p.Execute(context.Background(), io)
	require.Error(t, err)
	assert.True(t, errors.Is(err, errdefs.ErrInvalidRequest), err)
	assert.Contains(t, err.Error(), "buffers.workspace")
	io[sdk.BufferWorkspace] = sized(1 << 10)
	err = p.Execute(context.Background(), io)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "needs 1048576")
}

func TestPreparedStepsNeedTheWeightsAndALaunch(t *testing.T) {
	req := streamRequest(64, 1024, 512, 4, 64)
	_, err := NewPreparedSteps(req, sdk.Buffers{}, []gpukernel.Step{{Kernel: &gpukernel.Kernel{}}}, 0)
	assert.ErrorContains(t, err, "buffers.")
	_, err = NewPreparedSteps(req, buffersOf(affine.WeightSizes(req)), nil, 0)
	assert.ErrorContains(t, err, "no launches")
}
