package main

import (
	"testing"

	"github.com/kcand/kcand/internal/affinegpu"
	"github.com/kcand/kcand/sdk"
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

// TestGPUBulkIsBitReproducibleAtOneToken runs gemv/bulk five times on the
// same inputs at one token, where its warps' sums are added in warp order:
// every run must give the same bits (with shared float atomics they
// differed in the last bit from run to run). Blocks of several tiles on
// the integer path (4096→14336, 5120→13824), one tile per
// block (14336→4096), 64-row tiles in two parts with bf16 x (28672→8192),
// 8 bits in 16-row tiles (2304→4240).
func TestGPUBulkIsBitReproducibleAtOneToken(t *testing.T) {
	a := plugintest.AffineRequest
	plugintest.RunReproducible(t, plugintest.Self(), plugintest.OpenGPU(t), 5, plugintest.Repeat{Candidate: gemvBulk{}.Info().Name, Requests: []sdk.Request{
		a(1, 4096, 14336, 4, 64, false),
		a(1, 5120, 13824, 4, 64, true),
		a(1, 14336, 4096, 4, 64, false),
		a(1, 28672, 8192, 4, 64, true),
		a(1, 2304, 4240, 8, 32, true),
	}})
}

// TestGPUReproducibleCandidates runs gemv and gemv/tensor-core five times on
// the same inputs: every run must give the same bits. gemv/bulk has its own
// test at one token (TestGPUBulkIsBitReproducibleAtOneToken); above one
// token its warps add their sums with shared float atomics, in whatever
// order they finish.
func TestGPUReproducibleCandidates(t *testing.T) {
	a := plugintest.AffineRequest
	plugintest.RunReproducible(t, plugintest.Self(), plugintest.OpenGPU(t), 5,
		plugintest.Repeat{Candidate: gemv{}.Info().Name, Requests: []sdk.Request{a(1, 4096, 4096, 4, 64, false), a(3, 2880, 2880, 4, 32, true)}},
		plugintest.Repeat{Candidate: gemvTensorCore{}.Info().Name, Requests: []sdk.Request{a(1, 4096, 14336, 4, 64, false), a(4, 4096, 4096, 8, 32, true),
			a(1, 4096, 14336, 6, 64, false), a(5, 3072, 2056, 3, 64, true)}}) // the general path at 6 and 3 bits
}
