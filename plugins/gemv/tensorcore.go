package main

import (
	"context"
	"fmt"

	"github.com/kcand/kcand/internal/affinegpu"
	"github.com/kcand/kcand/sdk"
	"github.com/kcand/kcand/sdk/device"
	"github.com/kcand/kcand/sdk/errdefs"
	"github.com/kcand/kcand/sdk/family/affine"
)

// gemvTensorCore is the second decode candidate: the weight-streaming
// tensor-core kernel (internal/affinegpu/kernels/stream.cu) for weights of
// 2 to 8 bits (2, 3, 5 and 6 on the kernel's general path). It fetches
// whole cache lines into shared memory with cp.async and leaves the
// multiply-adds to mma.sync; which of the decode kernels is faster depends
// on the shape, so the host times them all.
type gemvTensorCore struct{}

var _ sdk.Candidate = gemvTensorCore{}

// Info implements sdk.Candidate.
func (gemvTensorCore) Info() sdk.CandidateInfo {
	return sdk.CandidateInfo{
		Name:      "gemv/tensor-core",
		Family:    sdk.FamilyAffine,
		Numeric:   sdk.NumericBounded,
		Stability: sdk.Stable,
		Devices:   []device.Kind{device.CUDA},
	}
}

// Admit implements sdk.Candidate.
func (gemvTensorCore) Admit(req sdk.Request, hw device.Profile) sdk.Admission {
	cfg, why := tensorCoreAdmit(req, hw)
	if why != "" {
		return sdk.Admission{Reason: why}
	}
	return sdk.Admission{Admitted: true, Reason: fmt.Sprintf("decode shape (tokens=%d ≤ %d), %s", req.Tokens, maxTokens, cfg.Describe())}
}

// tensorCoreAdmit picks the stream variant for a decode request on hw, or
// says why the candidate does not serve it.
func tensorCoreAdmit(req sdk.Request, hw device.Profile) (affinegpu.StreamConfig, string) {
	if hw.Kind == device.CUDA && req.Tokens > maxTokens {
		return affinegpu.StreamConfig{}, fmt.Sprintf("serves 1 to %d tokens, not %d", maxTokens, req.Tokens)
	}
	return affinegpu.AdmitStream(req, hw)
}

// Prepare implements sdk.Candidate.
func (gemvTensorCore) Prepare(_ context.Context, env sdk.Env, req sdk.Request, weights sdk.Buffers) (sdk.Prepared, error) {
	if err := affine.Validate(req); err != nil {
		return nil, err
	}
	cfg, why := tensorCoreAdmit(req, env.Device.Profile())
	if why != "" {
		return nil, errdefs.Unsupported("gemv/tensor-core: %s", why)
	}
	return affinegpu.PrepareStream(env, req, weights, cfg)
}
