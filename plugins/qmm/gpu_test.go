package main

import (
	"testing"

	"github.com/kcand/kcand/cuda"
	"github.com/kcand/kcand/sdk/gpukernel"
	"github.com/kcand/kcand/sdk/plugintest"
)

// TestGPUShapes checks the GPU kernel on every shape of
// plugintest.GPURequests, through the plugin process, against the float64
// reference on fresh random inputs with the output poisoned first.
func TestGPUShapes(t *testing.T) {
	plugintest.RunShapes(t, plugintest.Self(), plugintest.OpenGPU(t), plugintest.GPURequests())
}

// TestVariantsCompile compiles, with NVRTC for sm_90, the variant chosen
// for every GPU test shape, and checks its launch fits an H100/H200 (132
// SMs, 227 KiB of shared memory per block). It needs only NVRTC, no GPU.
func TestVariantsCompile(t *testing.T) {
	comp, err := cuda.NewCompiler(cuda.WithoutKernelCache())
	if err != nil {
		t.Skipf("no NVRTC: %v", err)
	}
	target := cuda.ComputeCapability{Major: 9, Minor: 0}.Target(false)
	seen := map[string]bool{}
	for _, req := range plugintest.GPURequests() {
		if !admitsOnGPU(req) {
			continue
		}
		defines, grid, block, shared := variantFor(req, 132)
		key := gpukernel.Variant{Entry: entryPoint, Defines: defines}
		if shared > 232448 || block[0] > 1024 || grid[0] == 0 {
			t.Errorf("%s: launch grid %v block %v shared %d does not fit", req.Key(), grid, block, shared)
		}
		name := req.Key()
		if seen[key.String()] {
			continue
		}
		seen[key.String()] = true
		out, err := comp.Compile(cuda.Source{Name: sourceName, Code: kernelSource, Options: gpukernel.Options(key)}, target)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		t.Logf("%s: %s compiled (%d bytes, %s)", name, key.String(), len(out.Image), out.Format)
	}
}
