package main

import (
	"context"
	_ "embed"
	"fmt"

	"github.com/kcand/kcand/cuda"
	"github.com/kcand/kcand/internal/affinegpu"
	"github.com/kcand/kcand/sdk"
	"github.com/kcand/kcand/sdk/device"
	"github.com/kcand/kcand/sdk/errdefs"
	"github.com/kcand/kcand/sdk/family/affine"
	"github.com/kcand/kcand/sdk/gpukernel"
)

//go:embed kernels/bulk.cu
var bulkCode string

// bulkSource is kernels/bulk.cu (see the comment at its top).
var bulkSource = gpukernel.Source{Name: "bulk.cu", Code: bulkCode}

const bulkEntry = "affine_bulk"

// gemvBulk is the third decode candidate: kernels/bulk.cu, in which
// producer warps feed a block-wide ring of shared memory with Hopper tensor
// copies (TMA) and the other warps only compute. It needs compute
// capability 9.0 and tensor maps of the weights, which the host encodes at
// bind time. It serves one token: at 4 and 8 tokens it was slower than
// gemv/tensor-core on every shape measured (bench/NOTES.md, seventh and
// eighth sessions).
type gemvBulk struct{}

var _ sdk.Candidate = gemvBulk{}

// Info implements sdk.Candidate.
func (gemvBulk) Info() sdk.CandidateInfo {
	return sdk.CandidateInfo{
		Name:      "gemv/bulk",
		Family:    sdk.FamilyAffine,
		Numeric:   sdk.NumericBounded,
		Stability: sdk.Stable,
		Devices:   []device.Kind{device.CUDA},
	}
}

// Admit implements sdk.Candidate.
func (gemvBulk) Admit(req sdk.Request, hw device.Profile) sdk.Admission {
	cfg, why := bulkAdmit(req, hw)
	if why != "" {
		return sdk.Admission{Reason: why}
	}
	return sdk.Admission{Admitted: true, Reason: "one token, " + cfg.describe()}
}

// bulkAdmit picks the bulk variant for req on hw, or says why the candidate
// does not serve it.
func bulkAdmit(req sdk.Request, hw device.Profile) (bulkConfig, string) {
	if why := affinegpu.AdmitCUDA(req, hw); why != "" {
		return bulkConfig{}, why
	}
	if major := affinegpu.ComputeMajor(hw.ComputeCapability); major < 9 {
		return bulkConfig{}, fmt.Sprintf("tensor copies need compute capability 9.0 or newer, the GPU has %s", hw.ComputeCapability)
	}
	if req.Tokens != 1 {
		return bulkConfig{}, fmt.Sprintf("serves 1 token, not %d (at 4 and 8 it was slower than gemv/tensor-core)", req.Tokens)
	}
	maxShared := bulkMaxShared
	if l := hw.Limits.MaxSharedPerBlock; l > 0 {
		maxShared = min(maxShared, l)
	}
	return chooseBulk(req, hw.Multiprocessors, maxShared)
}

// Prepare implements sdk.Candidate.
func (gemvBulk) Prepare(_ context.Context, env sdk.Env, req sdk.Request, weights sdk.Buffers) (sdk.Prepared, error) {
	if err := affine.Validate(req); err != nil {
		return nil, err
	}
	dev, err := affinegpu.CUDA(env)
	if err != nil {
		return nil, err
	}
	cfg, why := bulkAdmit(req, dev.Profile())
	if why != "" {
		return nil, errdefs.Unsupported("gemv/bulk: %s", why)
	}
	k, err := kernels.Get(dev, bulkSource, gpukernel.Variant{Entry: bulkEntry, Defines: cfg.defines()})
	if err != nil {
		return nil, err
	}
	grid, block, shared := cfg.launch(req, dev.Profile().Multiprocessors)
	// Early start: the kernel streams its first weights while the kernel
	// ahead finishes and waits for it before it reads x (see its header).
	step := gpukernel.Step{Kernel: k, Launch: gpukernel.Launch{Grid: grid, Block: block, SharedBytes: shared, Params: cfg.params(req), Programmatic: true}}
	p, err := affinegpu.NewPreparedSteps(req, weights, []gpukernel.Step{step}, 0)
	if err != nil {
		return nil, err
	}
	env.Logger.Debug("prepared", "request", req.Key(), "kernel", p.Describe(), "variant", cfg.describe(), "nvrtc_cache_hit", k.CacheHit)
	return p, nil
}

// params is the kernel's parameter list: tensor maps of the weights, the
// scales and the biases, then (x, bias or null, y, tokens, in, out).
func (c bulkConfig) params(req sdk.Request) []sdk.Param {
	weights, scales, biases := c.tensorMaps(req)
	bias := gpukernel.NullPointer
	if req.Bias {
		bias = sdk.BufferParam(affine.Bias)
	}
	return []sdk.Param{
		sdk.TensorMapParam(affine.Weight, weights), sdk.TensorMapParam(affine.Scales, scales), sdk.TensorMapParam(affine.Biases, biases),
		sdk.BufferParam(affine.X), bias, sdk.BufferParam(affine.Y),
		sdk.Int32Param(int32(req.Tokens)), sdk.Int32Param(int32(req.InFeatures)), sdk.Int32Param(int32(req.OutFeatures)),
	}
}

// tensorMaps describes the views the kernel's copies read (its header):
// the packed weights as rows of 32-bit words in boxes of [TR rows][32
// words], 128-byte swizzled; the scales and the biases as rows of bf16 in
// boxes of [TR rows][U groups]. 128-byte L2 fetches are what was measured.
func (c bulkConfig) tensorMaps(req sdk.Request) (weights, scales, biases cuda.TensorMapDesc) {
	rows, tr := uint64(req.OutFeatures), uint32(16*c.MT)
	words := uint64(req.InFeatures * c.Bits / 32)
	groups := uint64(req.InFeatures / c.Group)
	weights = cuda.TensorMapDesc{DataType: cuda.TensorU32, Dims: []uint64{words, rows}, Strides: []uint64{4 * words},
		Box: []uint32{32, tr}, Swizzle: 128, L2Promotion: 128}
	scales = cuda.TensorMapDesc{DataType: cuda.TensorU16, Dims: []uint64{groups, rows}, Strides: []uint64{2 * groups},
		Box: []uint32{uint32(c.U), tr}, L2Promotion: 128}
	return weights, scales, scales
}
