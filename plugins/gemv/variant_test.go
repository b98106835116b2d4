package main

import (
	"github.com/kcand/kcand/internal/affinegpu"
	"github.com/kcand/kcand/sdk"
	"github.com/kcand/kcand/sdk/device"
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

// tensorCoreChoice is what gemv/tensor-core prepares.
func tensorCoreChoice(req sdk.Request, sms int) plugintest.Choice {
	if req.Tokens > maxTokens {
		return plugintest.Choice{}
	}
	sc, why := affinegpu.ChooseStream(req, sms)
	if why != "" {
		return plugintest.Choice{}
	}
	grid, block, shared := sc.Launch(req)
	return plugintest.Choice{OK: true, Source: &affinegpu.StreamSource,
		Variant: sc.Variant(), Grid: grid, Block: block, SharedBytes: shared}
}

// bulkChoice is what gemv/bulk prepares on an H100/H200 (compute
// capability 9.0, 227 KiB of shared memory).
func bulkChoice(req sdk.Request, sms int) plugintest.Choice {
	cfg, why := bulkAdmit(req, device.Profile{Kind: device.CUDA, ComputeCapability: "9.0", Multiprocessors: sms})
	if why != "" {
		return plugintest.Choice{}
	}
	grid, block, shared := cfg.Launch(req, sms)
	return plugintest.Choice{OK: true, Source: &affinegpu.BulkSource, Variant: cfg.Variant(),
		Grid: grid, Block: block, SharedBytes: shared, MinNVRTC: 12}
}
