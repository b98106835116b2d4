package main

import (
	"github.com/kcand/kcand/sdk"
)

func admitsOnGPU(req sdk.Request) bool { return req.Tokens <= maxTokens }

// variantFor is what prepareGPU chooses, with an occupancy of 2 blocks.
func variantFor(req sdk.Request, sms int) (map[string]int, [3]uint32, [3]uint32, uint32) {
	cfg := chooseGEMV(req, sms)
	grid, block, shared := cfg.launch(req, sms, 2)
	return cfg.defines(), grid, block, shared
}
