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

// gemvBulk is the third decode candidate: internal/affinegpu/kernels/bulk.cu,
// in which producer warps feed a block-wide ring of shared memory with
// Hopper tensor copies (TMA) and the other warps only compute. It needs compute
// capability 9.0 and tensor maps of the weights, which the host encodes at
// bind time. It serves the decode range, 1 to maxTokens tokens. It was
// once kept to one token, when it was slower than gemv/tensor-core at 4
// and 8 tokens on every shape measured (bench/NOTES.md, seventh and eighth
// sessions); since the later sessions' changes to the kernel it is faster
// at some shapes (4 tokens: 4096^2 6.1 us against 7.0, twentieth session)
// and slower at others, so the host's tuner times both where its policy
// tunes the key and keeps the faster.
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
	return sdk.Admission{Admitted: true, Reason: fmt.Sprintf("decode shape (tokens=%d ≤ %d), %s", req.Tokens, maxTokens, cfg.Describe())}
}

// bulkAdmit picks the bulk variant for req on hw, or says why the
// candidate does not serve it.
func bulkAdmit(req sdk.Request, hw device.Profile) (affinegpu.BulkConfig, string) {
	if hw.Kind == device.CUDA && req.Tokens > maxTokens {
		return affinegpu.BulkConfig{}, fmt.Sprintf("serves 1 to %d tokens, not %d (more is the qmm plugin's)", maxTokens, req.Tokens)
	}
	return affinegpu.AdmitBulk(req, hw)
}

// Prepare implements sdk.Candidate.
func (gemvBulk) Prepare(_ context.Context, env sdk.Env, req sdk.Request, weights sdk.Buffers) (sdk.Prepared, error) {
	if err := affine.Validate(req); err != nil {
		return nil, err
	}
	cfg, why := bulkAdmit(req, env.Device.Profile())
	if why != "" {
		return nil, errdefs.Unsupported("gemv/bulk: %s", why)
	}
	return affinegpu.PrepareBulk(env, req, weights, cfg)
}
