package main

import (
	"testing"

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

// TestGPUReproducibleCandidates runs each candidate five times on the same
// inputs at shapes that take its main paths: every run must give the same
// bits. qmm/wgmma's shapes take 256-token tiles, pairs (96 and 200 tokens),
// stream-K (150 tokens) and split tails (left-over tiles split K-wise
// without a cluster: in 4 at 136 tokens 4096→17416, in 3 at 256 tokens
// 4096→22016), whose shares add in pairs onto a cleared zero (the same bits
// in either order) and whose reduction adds the pairs in order. qmm/bulk is
// not reproducible: its K slices meet through float atomics (13 of 458752
// bytes differed between two runs at 16 tokens, 4096→14336).
func TestGPUReproducibleCandidates(t *testing.T) {
	a := plugintest.AffineRequest
	plugintest.RunReproducible(t, plugintest.Self(), plugintest.OpenGPU(t), 5,
		plugintest.Repeat{Candidate: qmm{}.Info().Name, Requests: []sdk.Request{a(33, 4096, 4096, 4, 64, false), a(7, 1152, 1032, 3, 64, true)}},
		plugintest.Repeat{Candidate: qmmStream{}.Info().Name, Requests: []sdk.Request{a(16, 4096, 4104, 4, 64, true), a(12, 4096, 4096, 8, 32, false),
			a(16, 2560, 6912, 5, 64, false)}}, // the general path at 5 bits
		plugintest.Repeat{Candidate: qmmWave{}.Info().Name, Requests: []sdk.Request{a(16, 4096, 14336, 4, 64, false), a(24, 2048, 22008, 4, 64, true), a(13, 28672, 8200, 4, 64, true)}},
		plugintest.Repeat{Candidate: qmmWGMMA{}.Info().Name, Requests: []sdk.Request{a(256, 4096, 14336, 4, 64, false), a(96, 4096, 2056, 4, 64, true), a(200, 4096, 1032, 4, 64, true), a(150, 4096, 25464, 4, 64, true),
			a(136, 4096, 17416, 4, 64, true), a(256, 4096, 22016, 4, 64, false),
			a(150, 4096, 25464, 6, 64, true), a(136, 4096, 17416, 3, 64, false)}}) // the general unpacking: stream-K at 6 bits, a split tail at 3
}
