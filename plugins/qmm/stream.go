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

// streamMinTokens: qmm/stream serves more tokens than this (decode is the
// gemv plugin's) and at most affinegpu.StreamMaxTokens.
const streamMinTokens = 8

// qmmStream is QMM's small-batch candidate: the weight-streaming kernel
// (internal/affinegpu/kernels/stream.cu) for 9 to 32 tokens of weights of
// every width (2, 3, 5 and 6 bits on the kernel's general path). Whether
// it or the tiled kernel is faster depends on the shape (bench/NOTES.md),
// so the host times both.
type qmmStream struct{}

var _ sdk.Candidate = qmmStream{}

// Info implements sdk.Candidate.
func (qmmStream) Info() sdk.CandidateInfo {
	return sdk.CandidateInfo{
		Name:      "qmm/stream",
		Family:    sdk.FamilyAffine,
		Numeric:   sdk.NumericBounded,
		Stability: sdk.Stable,
		Devices:   []device.Kind{device.CUDA},
	}
}

// Admit implements sdk.Candidate.
func (qmmStream) Admit(req sdk.Request, hw device.Profile) sdk.Admission {
	cfg, why := streamAdmit(req, hw)
	if why != "" {
		return sdk.Admission{Reason: why}
	}
	return sdk.Admission{Admitted: true, Reason: fmt.Sprintf("small batch (%d < tokens=%d ≤ %d), %s",
		streamMinTokens, req.Tokens, affinegpu.StreamMaxTokens, cfg.Describe())}
}

// streamAdmit picks the stream variant for req on hw, or says why the
// candidate does not serve it.
func streamAdmit(req sdk.Request, hw device.Profile) (affinegpu.StreamConfig, string) {
	if hw.Kind == device.CUDA && req.Tokens <= streamMinTokens {
		return affinegpu.StreamConfig{}, fmt.Sprintf("serves %d to %d tokens, not %d (decode is the gemv plugin's)",
			streamMinTokens+1, affinegpu.StreamMaxTokens, req.Tokens)
	}
	return affinegpu.AdmitStream(req, hw)
}

// Prepare implements sdk.Candidate.
func (qmmStream) Prepare(_ context.Context, env sdk.Env, req sdk.Request, weights sdk.Buffers) (sdk.Prepared, error) {
	if err := affine.Validate(req); err != nil {
		return nil, err
	}
	cfg, why := streamAdmit(req, env.Device.Profile())
	if why != "" {
		return nil, errdefs.Unsupported("qmm/stream: %s", why)
	}
	return affinegpu.PrepareStream(env, req, weights, cfg)
}
