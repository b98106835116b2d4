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
// tensor-core kernel (internal/affinegpu/kernels/stream.cu) for 4- and 8-bit
// weights. It fetches whole cache lines into shared memory with cp.async
// and leaves the multiply-adds to mma.sync; which of the two decode kernels
// is faster depends on the shape, so the host times both.
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
	if hw.Kind != device.CUDA {
		return sdk.Admission{Reason: fmt.Sprintf("needs a CUDA device, not %s", hw.Kind)}
	}
	if ok, why := affinegpu.Admit(req, hw); !ok {
		return sdk.Admission{Reason: why}
	}
	if req.Tokens > maxTokens {
		return sdk.Admission{Reason: fmt.Sprintf("serves 1 to %d tokens, not %d", maxTokens, req.Tokens)}
	}
	cfg, why := affinegpu.ChooseStream(req, hw.Multiprocessors)
	if why != "" {
		return sdk.Admission{Reason: why}
	}
	return sdk.Admission{Admitted: true, Reason: fmt.Sprintf("decode shape (tokens=%d ≤ %d), %s", req.Tokens, maxTokens, cfg.Describe())}
}

// Prepare implements sdk.Candidate.
func (gemvTensorCore) Prepare(_ context.Context, env sdk.Env, req sdk.Request, weights sdk.Buffers) (sdk.Prepared, error) {
	if err := affine.Validate(req); err != nil {
		return nil, err
	}
	if env.Device.Kind() != device.CUDA {
		return nil, errdefs.Unsupported("gemv/tensor-core needs a CUDA device, not %s", env.Device.Kind())
	}
	cfg, why := affinegpu.ChooseStream(req, env.Device.Profile().Multiprocessors)
	if why != "" {
		return nil, errdefs.Unsupported("gemv/tensor-core: %s", why)
	}
	return affinegpu.PrepareStream(env, req, weights, cfg)
}
