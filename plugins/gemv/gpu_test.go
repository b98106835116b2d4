package main

import (
	"testing"

	"github.com/kcand/kcand/internal/affinegpu"
	"github.com/kcand/kcand/sdk/gpukernel"
	"github.com/kcand/kcand/sdk/plugintest"
)

// TestGPUShapes checks the GPU kernel on every shape of
// plugintest.GPURequests, through the plugin process, against the float64
// reference on fresh random inputs with the output poisoned first.
func TestGPUShapes(t *testing.T) {
	plugintest.RunShapes(t, plugintest.Self(), plugintest.OpenGPU(t), plugintest.GPURequests())
}

// TestVariantsCompile compiles every variant the plugin would choose for
// the GPU test shapes (needs NVRTC, not a GPU).
func TestVariantsCompile(t *testing.T) {
	plugintest.CompileVariants(t, gpukernel.Source{Name: sourceName, Code: kernelSource}, choice)
}

// TestTensorCoreVariantsCompile compiles every stream-kernel variant
// gemv/tensor-core would choose for the GPU test shapes.
func TestTensorCoreVariantsCompile(t *testing.T) {
	plugintest.CompileVariants(t, gpukernel.Source{Name: sourceName, Code: kernelSource}, tensorCoreChoice)
}

// TestBulkVariantsCompile compiles every variant gemv/bulk would choose
// for the GPU test shapes (NVRTC 12 or newer: tensor copies are PTX ISA 8.0).
func TestBulkVariantsCompile(t *testing.T) {
	plugintest.CompileVariants(t, affinegpu.BulkSource, bulkChoice)
}
