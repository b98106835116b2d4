package affinegpu

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kcand/kcand/sdk"
	"github.com/kcand/kcand/sdk/family/affine"
	"github.com/kcand/kcand/sdk/gpukernel"
	"github.com/kcand/kcand/sdk/plugintest"
)

// A plan in K slices wires its three kernels to the workspace: the
// product adds into it (y is the workspace, no bias), the clear zeroes
// tokens x out floats of it first, and the finish rounds it into y with
// the bias last. Without slices the product writes y and adds the bias
// itself, and there is no workspace.
func TestBulkPlanWiresTheSlicesThroughTheWorkspace(t *testing.T) {
	req := plugintest.AffineRequest(16, 8192, 28672, 4, 64, true)
	cfg, why := ChooseBulk(req, 132, bulkMaxShared)
	require.Empty(t, why)
	require.Equal(t, 4, cfg.KS)
	assert.Equal(t, int64(4*16*28672), cfg.workspaceBytes(req))

	ws, y, bias := sdk.BufferParam(sdk.BufferWorkspace), sdk.BufferParam(affine.Y), sdk.BufferParam(affine.Bias)
	p := cfg.params(req)
	require.Len(t, p, 9)
	assert.Equal(t, sdk.BufferParam(affine.X), p[3])
	assert.Equal(t, gpukernel.NullPointer, p[4], "the product adds no bias in slices")
	assert.Equal(t, ws, p[5], "the product adds into the workspace")

	l := cfg.edgeLaunches(req, 132)
	assert.Equal(t, []sdk.Param{ws, sdk.Int32Param(16 * 28672)}, l.clear.Params)
	assert.Equal(t, []sdk.Param{ws, bias, y, sdk.Int32Param(16), sdk.Int32Param(28672)}, l.finish.Params)
	assert.True(t, l.clear.Programmatic && l.finish.Programmatic, "both take early start")
	assert.LessOrEqual(t, l.clear.Grid[0], uint32(4*132))

	grid, _, _ := cfg.Launch(req, 132)
	assert.Equal(t, [3]uint32{33, 4, 1}, grid, "132/4 blocks per slice, blockIdx.y the slice")
	assert.Equal(t, 1, cfg.Defines()["SPLITK"])

	one := plugintest.AffineRequest(1, 8192, 28672, 4, 64, true)
	cfg1, why := ChooseBulk(one, 132, bulkMaxShared)
	require.Empty(t, why)
	assert.Zero(t, cfg1.KS)
	p1 := cfg1.params(one)
	assert.Equal(t, bias, p1[4])
	assert.Equal(t, y, p1[5])
	_, split := cfg1.Defines()["SPLITK"]
	assert.False(t, split)
}

// The slice count never exceeds the multiprocessors, whose blocks it
// would put in a second wave.
func TestBulkSplitsStayWithinTheMultiprocessors(t *testing.T) {
	for _, sms := range []int{132, 78, 16, 1} {
		for _, in := range []int{2048, 28672, 53248, 65536} {
			req := plugintest.AffineRequest(16, in, 8192, 4, 32, false)
			if ks := bulkSplits(req, sms); ks != 0 {
				assert.LessOrEqual(t, ks, sms, "%d inputs on %d SMs", in, sms)
				assert.Zero(t, in%(ks*8*32))
			}
		}
	}
	assert.Equal(t, 14, bulkSplits(plugintest.AffineRequest(16, 28672, 8192, 4, 64, false), 132))
}
