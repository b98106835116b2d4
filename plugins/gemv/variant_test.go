package main

import (
	"github.com/kcand/kcand/sdk"
	"github.com/kcand/kcand/sdk/gpukernel"
	"github.com/kcand/kcand/sdk/plugintest"
)

// choice is what prepareGPU chooses, with an occupancy of 2 blocks.
func choice(req sdk.Request, sms int) plugintest.Choice {
	if req.Tokens > maxTokens {
		return plugintest.Choice{}
	}
	cfg := chooseGEMV(req, sms)
	grid, block, shared := cfg.launch(req, sms, 2)
	return plugintest.Choice{OK: true, Variant: gpukernel.Variant{Entry: entryPoint, Defines: cfg.defines()}, Grid: grid, Block: block, SharedBytes: shared}
}
