package sdk

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kcand/kcand/cuda"
	"github.com/kcand/kcand/sdk/device"
)

var h200Limits = device.Limits{MaxThreadsPerBlock: 1024, MaxBlockDim: [3]int{1024, 1024, 64}, MaxGridDim: [3]int{1<<31 - 1, 65535, 65535}, MaxSharedPerBlock: 232448}

func goodPlan() *LaunchPlan {
	m := NewModule(ModuleCubin, []byte("\x7fELF pretend cubin"))
	return &LaunchPlan{
		Modules: []Module{m},
		Launches: []Launch{{
			Module: m.Hash, Function: "gemv_q4_g64", Grid: [3]uint32{112, 1, 1}, Block: [3]uint32{256, 1, 1}, SharedBytes: 1024,
			Params: []Param{BufferParam("x"), BufferParam("weight"), {Buffer: "y", Offset: 64}, Int32Param(4096), {Scalar: []byte{1, 2, 3, 4, 5, 6, 7, 8}},
				// The whole weight binding as 256 rows of 1024 words.
				TensorMapParam("weight", cuda.TensorMapDesc{DataType: cuda.TensorU32, Dims: []uint64{1024, 256}, Strides: []uint64{4096}, Box: []uint32{32, 32}, Swizzle: 128})},
		}},
	}
}

var planBindings = map[string]int64{"x": 8192, "weight": 1 << 20, "y": 4096}

func TestValidateLaunchPlanRejectsEachMalformedKind(t *testing.T) {
	require.NoError(t, ValidateLaunchPlan(goodPlan(), nil, planBindings, h200Limits))
	cases := []struct {
		name  string
		edit  func(p *LaunchPlan)
		field string
	}{
		{"no launches", func(p *LaunchPlan) { p.Launches = nil }, "launches"},
		{"too many launches", func(p *LaunchPlan) {
			for len(p.Launches) <= MaxLaunches {
				p.Launches = append(p.Launches, p.Launches[0])
			}
		}, "launches"},
		{"unknown module kind", func(p *LaunchPlan) { p.Modules[0].Kind = "elf" }, "modules[0].kind"},
		{"hash is not sha256", func(p *LaunchPlan) { p.Modules[0].Hash = "abc"; p.Launches[0].Module = "abc" }, "modules[0].hash"},
		{"image does not match hash", func(p *LaunchPlan) { p.Modules[0].Image = []byte("other") }, "modules[0].hash"},
		{"missing image of unknown module", func(p *LaunchPlan) { p.Modules[0].Image = nil }, "modules[0].image"},
		{"launch names no module", func(p *LaunchPlan) { p.Launches[0].Module = NewModule(ModuleCubin, []byte("x")).Hash }, "launches[0].module"},
		{"empty function", func(p *LaunchPlan) { p.Launches[0].Function = "" }, "launches[0].function"},
		{"function with NUL", func(p *LaunchPlan) { p.Launches[0].Function = "a\x00b" }, "launches[0].function"},
		{"zero grid", func(p *LaunchPlan) { p.Launches[0].Grid[1] = 0 }, "launches[0].grid[1]"},
		{"grid beyond device", func(p *LaunchPlan) { p.Launches[0].Grid[2] = 70000 }, "launches[0].grid[2]"},
		{"zero block", func(p *LaunchPlan) { p.Launches[0].Block[0] = 0 }, "launches[0].block[0]"},
		{"block dim beyond device", func(p *LaunchPlan) { p.Launches[0].Block[2] = 65 }, "launches[0].block[2]"},
		{"too many threads", func(p *LaunchPlan) { p.Launches[0].Block = [3]uint32{64, 32, 1} }, "launches[0].block"},
		{"too much shared memory", func(p *LaunchPlan) { p.Launches[0].SharedBytes = 300000 }, "launches[0].shared_bytes"},
		{"unknown buffer", func(p *LaunchPlan) { p.Launches[0].Params[0].Buffer = "secret" }, "launches[0].params[0].buffer"},
		{"offset outside buffer", func(p *LaunchPlan) { p.Launches[0].Params[2].Offset = 4096 }, "launches[0].params[2].offset"},
		{"negative offset", func(p *LaunchPlan) { p.Launches[0].Params[2].Offset = -8 }, "launches[0].params[2].offset"},
		{"scalar of 3 bytes", func(p *LaunchPlan) { p.Launches[0].Params[3].Scalar = []byte{1, 2, 3} }, "launches[0].params[3].scalar"},
		{"empty parameter", func(p *LaunchPlan) { p.Launches[0].Params[3].Scalar = nil }, "launches[0].params[3].scalar"},
		{"buffer and scalar", func(p *LaunchPlan) { p.Launches[0].Params[0].Scalar = []byte{1} }, "launches[0].params[0]"},
		{"tensor map without a buffer", func(p *LaunchPlan) { p.Launches[0].Params[5].Buffer = "" }, "launches[0].params[5].buffer"},
		{"tensor map of an unknown buffer", func(p *LaunchPlan) { p.Launches[0].Params[5].Buffer = "secret" }, "launches[0].params[5].buffer"},
		{"tensor map with a bad box", func(p *LaunchPlan) { p.Launches[0].Params[5].TensorMap.Box[1] = 300 }, "launches[0].params[5].tensor_map.box[1]"},
		{"tensor map past the buffer's end", func(p *LaunchPlan) { p.Launches[0].Params[5].Offset = 16 }, "launches[0].params[5].tensor_map"},
		{"tensor map off a 16-byte boundary", func(p *LaunchPlan) { p.Launches[0].Params[5].Offset = 8 }, "launches[0].params[5].offset"},
		{"tensor map offset that wraps", func(p *LaunchPlan) { p.Launches[0].Params[5].Offset = 0x7FFFFFFFFFFFFFF0 }, "launches[0].params[5].offset"},
		{"tensor map before its buffer", func(p *LaunchPlan) { p.Launches[0].Params[5].Offset = -16 }, "launches[0].params[5].offset"},
		{"tensor map and scalar", func(p *LaunchPlan) { p.Launches[0].Params[5].Scalar = []byte{1} }, "launches[0].params[5]"},
		{"too many parameters", func(p *LaunchPlan) {
			for len(p.Launches[0].Params) <= MaxParams {
				p.Launches[0].Params = append(p.Launches[0].Params, Int32Param(1))
			}
		}, "launches[0].params"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := goodPlan()
			tc.edit(p)
			err := ValidateLaunchPlan(p, nil, planBindings, h200Limits)
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrBadLaunchPlan)
			var le *LaunchPlanError
			require.True(t, errors.As(err, &le))
			assert.Equal(t, tc.field, le.Field, "%v", err)
		})
	}
}

func TestKnownModulesNeedNoImage(t *testing.T) {
	p := goodPlan()
	hash := p.Modules[0].Hash
	p.Modules[0].Image = nil
	assert.NoError(t, ValidateLaunchPlan(p, func(h string) bool { return h == hash }, planBindings, h200Limits))
}

func TestLaunchPlanSurvivesTheWire(t *testing.T) {
	p := goodPlan()
	assert.Equal(t, p, launchPlanFromProto(launchPlanToProto(p)))
	second := p.Launches[0]
	second.Programmatic = true
	p.Launches = append(p.Launches, second)
	back := launchPlanFromProto(launchPlanToProto(p))
	assert.Equal(t, p, back)
	assert.Equal(t, []bool{false, true}, []bool{back.Launches[0].Programmatic, back.Launches[1].Programmatic}, "a launch keeps its early start")
	require.NotNil(t, back.Launches[1].Params[5].TensorMap, "a tensor map crosses the wire")
	assert.Equal(t, 128, back.Launches[1].Params[5].TensorMap.Swizzle)
	assert.Nil(t, launchPlanFromProto(nil))
	stripped := withoutKnownImages(*p, []string{p.Modules[0].Hash})
	assert.Empty(t, stripped.Modules[0].Image, "a module the host has is sent without its image")
	assert.Equal(t, p.Modules[0].Hash, stripped.Modules[0].Hash)
}
