package main

import (
	"github.com/kcand/kcand/sdk"
	"github.com/kcand/kcand/sdk/gpukernel"
	"github.com/kcand/kcand/sdk/plugintest"
)

// choice is what prepareGPU chooses.
func choice(req sdk.Request, sms int) plugintest.Choice {
	cfg := chooseQMM(req, sms)
	grid, block, shared := cfg.launch(req)
	return plugintest.Choice{OK: true, Variant: gpukernel.Variant{Entry: entryPoint, Defines: cfg.defines()}, Grid: grid, Block: block, SharedBytes: shared}
}
