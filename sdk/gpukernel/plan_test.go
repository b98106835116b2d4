package gpukernel

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kcand/kcand/cuda"
	"github.com/kcand/kcand/sdk"
)

// A plan of several steps keeps their order and lists each module once,
// so two entry points of one source cross the wire as one image.
func TestPlanKeepsOrderAndListsEachModuleOnce(t *testing.T) {
	m1 := sdk.NewModule(sdk.ModuleCubin, []byte("first image"))
	m2 := sdk.NewModule(sdk.ModuleCubin, []byte("second image"))
	prep := &Kernel{Module: m1, Entry: "prep"}
	main := &Kernel{Module: m1, Entry: "main"}
	other := &Kernel{Module: m2, Entry: "other"}
	ws := sdk.BufferParam(sdk.BufferWorkspace)
	plan := Plan(
		Step{Kernel: prep, Launch: Launch{Grid: [3]uint32{2, 3, 1}, Block: [3]uint32{64, 1, 1}, Params: []sdk.Param{ws}}},
		Step{Kernel: main, Launch: Launch{Grid: [3]uint32{7, 1, 1}, Block: [3]uint32{384, 1, 1}, SharedBytes: 1 << 17, Params: []sdk.Param{ws}, Programmatic: true}},
		Step{Kernel: other, Launch: Launch{Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{32, 1, 1}}},
	)
	require.Len(t, plan.Modules, 2)
	assert.Equal(t, m1.Hash, plan.Modules[0].Hash)
	assert.Equal(t, m2.Hash, plan.Modules[1].Hash)
	require.Len(t, plan.Launches, 3)
	assert.Equal(t, []string{"prep", "main", "other"}, []string{plan.Launches[0].Function, plan.Launches[1].Function, plan.Launches[2].Function})
	assert.Equal(t, m1.Hash, plan.Launches[1].Module)
	assert.Equal(t, uint32(1<<17), plan.Launches[1].SharedBytes)
	assert.Equal(t, []bool{false, true, false}, []bool{plan.Launches[0].Programmatic, plan.Launches[1].Programmatic, plan.Launches[2].Programmatic})
	assert.Equal(t, sdk.BufferWorkspace, plan.Launches[0].Params[0].Buffer)

	single := main.Plan(Launch{Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{32, 1, 1}})
	assert.Len(t, single.Modules, 1)
	assert.Len(t, single.Launches, 1)
}

// A step's shape, shared memory and early start reach the driver's launch
// configuration when the plugin runs it itself.
func TestLaunchConfigCarriesEarlyStart(t *testing.T) {
	l := Launch{Grid: [3]uint32{7, 2, 1}, Block: [3]uint32{384, 1, 1}, SharedBytes: 1 << 17, Programmatic: true}
	want := cuda.LaunchConfig{Grid: cuda.Dim3{X: 7, Y: 2, Z: 1}, Block: cuda.Dim3{X: 384, Y: 1, Z: 1}, SharedMemoryBytes: 1 << 17, Programmatic: true}
	assert.Equal(t, want, l.config())
	l.Programmatic = false
	assert.False(t, l.config().Programmatic)
}
