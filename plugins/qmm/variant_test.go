package main

import (
	"testing"

	"github.com/kcand/kcand/internal/affinegpu"
	"github.com/kcand/kcand/sdk"
	"github.com/kcand/kcand/sdk/gpukernel"
	"github.com/kcand/kcand/sdk/plugintest"
)

// choice is what prepareGPU chooses: the tiled kernel.
func choice(req sdk.Request, sms int) plugintest.Choice {
	cfg := chooseQMM(req, sms)
	grid, block, shared := cfg.launch(req)
	return plugintest.Choice{OK: true, Variant: gpukernel.Variant{Entry: entryPoint, Defines: cfg.defines()}, Grid: grid, Block: block, SharedBytes: shared}
}

// TestStreamVariantsCompile compiles the stream variant qmm/stream runs for
// every GPU test shape it serves (needs NVRTC, not a GPU).
func TestStreamVariantsCompile(t *testing.T) {
	plugintest.CompileVariants(t, affinegpu.StreamSource, func(req sdk.Request, sms int) plugintest.Choice {
		hw := hopper()
		hw.Multiprocessors = sms
		sc, why := streamAdmit(req, hw)
		if why != "" {
			return plugintest.Choice{}
		}
		grid, block, shared := sc.Launch(req)
		return plugintest.Choice{OK: true, Source: &affinegpu.StreamSource, Variant: sc.Variant(), Grid: grid, Block: block, SharedBytes: shared}
	})
}
