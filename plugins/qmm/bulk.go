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

// qmmBulk is QMM's small-batch candidate on Hopper: the bulk kernel behind
// gemv/bulk (internal/affinegpu/kernels/bulk.cu: producer warps feed a
// ring of shared memory with tensor copies, consumer warps only compute)
// with K in slices, so that each block keeps its slice of x resident in
// fp16.
// It serves 9 to 16 tokens of 4-bit weights. On the H200 at 16 tokens it
// was faster than qmm/stream at 4096->14336, 8192->28672 and 28672->8192,
// level at 14336->4096 and slower at 4096x4096 (bench/NOTES.md, twelfth
// session), so the host times both.
type qmmBulk struct{}

var _ sdk.Candidate = qmmBulk{}

// Info implements sdk.Candidate.
func (qmmBulk) Info() sdk.CandidateInfo {
	return sdk.CandidateInfo{
		Name:      "qmm/bulk",
		Family:    sdk.FamilyAffine,
		Numeric:   sdk.NumericBounded,
		Stability: sdk.Stable,
		Devices:   []device.Kind{device.CUDA},
	}
}

// Admit implements sdk.Candidate.
func (qmmBulk) Admit(req sdk.Request, hw device.Profile) sdk.Admission {
	cfg, why := bulkAdmit(req, hw)
	if why != "" {
		return sdk.Admission{Reason: why}
	}
	return sdk.Admission{Admitted: true, Reason: fmt.Sprintf("small batch (%d < tokens=%d ≤ %d), %s",
		affinegpu.BulkSplitTokens, req.Tokens, affinegpu.BulkMaxTokens, cfg.Describe())}
}

// bulkAdmit picks the bulk variant for req on hw, or says why the
// candidate does not serve it.
func bulkAdmit(req sdk.Request, hw device.Profile) (affinegpu.BulkConfig, string) {
	if hw.Kind == device.CUDA && (req.Tokens <= affinegpu.BulkSplitTokens || req.Tokens > affinegpu.BulkMaxTokens) {
		why := fmt.Sprintf("serves %d to %d tokens, not %d", affinegpu.BulkSplitTokens+1, affinegpu.BulkMaxTokens, req.Tokens)
		if req.Tokens <= affinegpu.BulkSplitTokens {
			why += " (decode is the gemv plugin's)"
		}
		return affinegpu.BulkConfig{}, why
	}
	return affinegpu.AdmitBulk(req, hw)
}

// Prepare implements sdk.Candidate.
func (qmmBulk) Prepare(_ context.Context, env sdk.Env, req sdk.Request, weights sdk.Buffers) (sdk.Prepared, error) {
	if err := affine.Validate(req); err != nil {
		return nil, err
	}
	cfg, why := bulkAdmit(req, env.Device.Profile())
	if why != "" {
		return nil, errdefs.Unsupported("qmm/bulk: %s", why)
	}
	return affinegpu.PrepareBulk(env, req, weights, cfg)
}
