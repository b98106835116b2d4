// Command gemv is the affine family's decode plugin: a vector kernel for 1 to
// 8 tokens that reads each weight once and folds the group bias into a
// per-group sum of the input. On a GPU it runs kernels/gemv.cu, compiled by
// NVRTC per variant and exported for the host to launch; on the CPU device,
// a Go version of the same method. Two more candidates run on the GPU only:
// gemv/tensor-core streams weights of every width through the tensor cores
// (where a row's groups split into steps of whole 16-byte pieces),
// and gemv/bulk (Hopper) feeds the same arithmetic with tensor copies from
// producer warps. The host times them all and keeps the fastest per shape.
package main

import (
	"context"
	"fmt"

	"github.com/kcand/kcand/internal/affinegpu"
	"github.com/kcand/kcand/sdk"
	"github.com/kcand/kcand/sdk/device"
	"github.com/kcand/kcand/sdk/family/affine"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "0.1.0"

// maxTokens is the largest token count GEMV serves.
const maxTokens = 8

// gemv is the candidate.
type gemv struct{}

var _ sdk.Candidate = gemv{}

// Info implements sdk.Candidate.
func (gemv) Info() sdk.CandidateInfo {
	return sdk.CandidateInfo{
		Name:      "gemv",
		Family:    sdk.FamilyAffine,
		Numeric:   sdk.NumericBounded,
		Stability: sdk.Stable,
		Devices:   []device.Kind{device.CPU, device.CUDA},
	}
}

// Admit implements sdk.Candidate.
func (gemv) Admit(req sdk.Request, hw device.Profile) sdk.Admission {
	if err := affine.Validate(req); err != nil {
		return sdk.Admission{Reason: err.Error()}
	}
	if hw.Kind == device.CUDA {
		if ok, why := affinegpu.Admit(req, hw); !ok {
			return sdk.Admission{Reason: why}
		}
	}
	if req.Tokens > maxTokens {
		return sdk.Admission{Reason: fmt.Sprintf("serves 1 to %d tokens, not %d", maxTokens, req.Tokens)}
	}
	return sdk.Admission{Admitted: true, Reason: fmt.Sprintf("decode shape (tokens=%d ≤ %d)", req.Tokens, maxTokens)}
}

// Prepare implements sdk.Candidate.
func (gemv) Prepare(_ context.Context, env sdk.Env, req sdk.Request, weights sdk.Buffers) (sdk.Prepared, error) {
	if env.Device.Kind() == device.CUDA {
		return prepareGPU(env, req, weights)
	}
	view, err := affine.NewHostView(req, weights)
	if err != nil {
		return nil, err
	}
	return &cpuGEMV{view: view}, nil
}

func main() {
	sdk.Serve(sdk.Options{Name: "gemv", Version: version}, gemv{}, gemvTensorCore{}, gemvBulk{})
}
