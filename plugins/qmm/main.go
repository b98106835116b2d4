// Command qmm is the affine family's fallback plugin: a matrix kernel that
// serves any token count. On a GPU it runs kernels/qmm.cu (bf16 tensor-core
// mma with dequantisation in registers), compiled by NVRTC per variant and
// exported for the host to launch; on the CPU device it dequantises each
// weight row once and multiplies it with every token. Four GPU candidates
// join it where they may be faster, and the host's tuner times them against
// it where its policy tunes the key: qmm/stream
// (internal/affinegpu/kernels/stream.cu, 9 to 32 tokens of weights of any
// width), qmm/bulk (internal/affinegpu/kernels/bulk.cu in K slices on
// compute capability 9.0, 9 to 16 tokens of 4-bit weights), qmm/wave
// (kernels/wave.cu on compute capability 9.0, 9 to 32 tokens of 4-bit
// group-64 weights in one or two token tiles, with at least 64 output rows
// per multiprocessor) and qmm/wgmma (kernels/wg.cu on compute capability
// 9.0, weights of any width in groups of 32, 64 or 128 at 17 or more
// tokens).
package main

import (
	"context"

	"github.com/kcand/kcand/internal/affinegpu"
	"github.com/kcand/kcand/sdk"
	"github.com/kcand/kcand/sdk/device"
	"github.com/kcand/kcand/sdk/family/affine"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "0.1.0"

// qmm is the candidate.
type qmm struct{}

var _ sdk.Candidate = qmm{}

// Info implements sdk.Candidate.
func (qmm) Info() sdk.CandidateInfo {
	return sdk.CandidateInfo{
		Name:      "qmm",
		Family:    sdk.FamilyAffine,
		Fallback:  true,
		Numeric:   sdk.NumericBounded,
		Stability: sdk.Stable,
		Devices:   []device.Kind{device.CPU, device.CUDA},
	}
}

// Admit implements sdk.Candidate: QMM serves every valid affine request
// (on a GPU, every one whose output rows are a multiple of 8).
func (qmm) Admit(req sdk.Request, hw device.Profile) sdk.Admission {
	if err := affine.Validate(req); err != nil {
		return sdk.Admission{Reason: err.Error()}
	}
	if hw.Kind == device.CUDA {
		if ok, why := affinegpu.Admit(req, hw); !ok {
			return sdk.Admission{Reason: why}
		}
	}
	return sdk.Admission{Admitted: true, Reason: "serves every affine shape"}
}

// Prepare implements sdk.Candidate.
func (qmm) Prepare(_ context.Context, env sdk.Env, req sdk.Request, weights sdk.Buffers) (sdk.Prepared, error) {
	if env.Device.Kind() == device.CUDA {
		return prepareGPU(env, req, weights)
	}
	view, err := affine.NewHostView(req, weights)
	if err != nil {
		return nil, err
	}
	return &cpuQMM{view: view}, nil
}

func main() {
	sdk.Serve(sdk.Options{Name: "qmm", Version: version}, qmm{}, qmmStream{}, qmmBulk{}, qmmWave{}, qmmWGMMA{})
}
