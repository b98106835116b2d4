package main

import (
	_ "embed"

	"github.com/kcand/kcand/internal/affinegpu"
	"github.com/kcand/kcand/sdk"
	"github.com/kcand/kcand/sdk/gpukernel"
)

//go:embed kernels/gemv.cu
var kernelSource string

const (
	sourceName = "gemv.cu"
	entryPoint = "affine_gemv"
)

var kernels = gpukernel.NewCache()

// prepareGPU compiles (or finds) the variant for req and binds the weights.
func prepareGPU(env sdk.Env, req sdk.Request, weights sdk.Buffers) (sdk.Prepared, error) {
	dev, err := affinegpu.CUDA(env)
	if err != nil {
		return nil, err
	}
	sms := dev.Profile().Multiprocessors
	cfg := chooseGEMV(req, sms)
	k, err := kernels.Get(dev, gpukernel.Source{Name: sourceName, Code: kernelSource}, gpukernel.Variant{Entry: entryPoint, Defines: cfg.defines()})
	if err != nil {
		return nil, err
	}
	occupancy, err := k.Occupancy(cfg.threads(), cfg.sharedBytes(req))
	if err != nil {
		occupancy = 2
	}
	grid, block, shared := cfg.launch(req, sms, occupancy)
	p, err := affinegpu.NewPrepared(req, weights, k, grid, block, shared)
	if err != nil {
		return nil, err
	}
	env.Logger.Debug("prepared", "request", req.Key(), "kernel", p.Describe(), "nvrtc_cache_hit", k.CacheHit)
	return p, nil
}
