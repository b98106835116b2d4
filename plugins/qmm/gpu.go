package main

import (
	_ "embed"

	"github.com/kcand/kcand/internal/affinegpu"
	"github.com/kcand/kcand/sdk"
	"github.com/kcand/kcand/sdk/gpukernel"
)

//go:embed kernels/qmm.cu
var kernelSource string

const (
	sourceName = "qmm.cu"
	entryPoint = "affine_qmm"
)

var kernels = gpukernel.NewCache()

// prepareGPU compiles (or finds) the tiled variant for req and binds the
// weights.
func prepareGPU(env sdk.Env, req sdk.Request, weights sdk.Buffers) (sdk.Prepared, error) {
	dev, err := affinegpu.CUDA(env)
	if err != nil {
		return nil, err
	}
	sms := dev.Profile().Multiprocessors
	cfg := chooseQMM(req, sms)
	k, err := kernels.Get(dev, gpukernel.Source{Name: sourceName, Code: kernelSource}, gpukernel.Variant{Entry: entryPoint, Defines: cfg.defines()})
	if err != nil {
		return nil, err
	}
	grid, block, shared := cfg.launch(req)
	p, err := affinegpu.NewPrepared(req, weights, k, grid, block, shared)
	if err != nil {
		return nil, err
	}
	env.Logger.Debug("prepared", "request", req.Key(), "tile", cfg.Tile.Name, "ksplit", cfg.KSplit, "kernel", p.Describe(), "nvrtc_cache_hit", k.CacheHit)
	return p, nil
}
