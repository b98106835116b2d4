package main

import (
	"github.com/kcand/kcand/sdk"
)

func admitsOnGPU(sdk.Request) bool { return true }

// variantFor is what prepareGPU chooses.
func variantFor(req sdk.Request, sms int) (map[string]int, [3]uint32, [3]uint32, uint32) {
	cfg := chooseQMM(req, sms)
	grid, block, shared := cfg.launch(req)
	return cfg.defines(), grid, block, shared
}
