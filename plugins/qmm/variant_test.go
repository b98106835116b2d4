package main

import (
	"github.com/kcand/kcand/internal/affinegpu"
	"github.com/kcand/kcand/sdk"
	"github.com/kcand/kcand/sdk/gpukernel"
	"github.com/kcand/kcand/sdk/plugintest"
)

// choice is what prepareGPU chooses: the stream kernel for small batches it
// serves, else the tiled kernel.
func choice(req sdk.Request, sms int) plugintest.Choice {
	if req.Tokens > streamMinTokens {
		if sc, why := affinegpu.ChooseStream(req, sms); why == "" {
			grid, block, shared := sc.Launch(req)
			return plugintest.Choice{OK: true, Source: &affinegpu.StreamSource,
				Variant: sc.Variant(), Grid: grid, Block: block, SharedBytes: shared}
		}
	}
	cfg := chooseQMM(req, sms)
	grid, block, shared := cfg.launch(req)
	return plugintest.Choice{OK: true, Variant: gpukernel.Variant{Entry: entryPoint, Defines: cfg.defines()}, Grid: grid, Block: block, SharedBytes: shared}
}
