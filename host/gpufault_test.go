package host

import (
	"context"

	"github.com/kcand/kcand/internal/affinegpu"
	"github.com/kcand/kcand/sdk"
	"github.com/kcand/kcand/sdk/device"
	"github.com/kcand/kcand/sdk/gpukernel"
)

// gpuFault is a CUDA candidate whose kernel writes through a null-ish
// pointer: the plugin's context dies with CUDA_ERROR_ILLEGAL_ADDRESS.
type gpuFault struct{}

var faultSource = gpukernel.Source{Name: "fault.cu", Code: `
extern "C" __global__ void fault(const unsigned short* x, const unsigned int* w, const unsigned short* s,
    const unsigned short* b, const unsigned short* bias, unsigned short* y, int tokens, int in, int out) {
  *(volatile int*)(0x10 + threadIdx.x * 4) = 1;
}`}

var faultKernels = gpukernel.NewCache()

func (gpuFault) Info() sdk.CandidateInfo {
	return sdk.CandidateInfo{Name: "gpufault", Family: sdk.FamilyAffine, Numeric: sdk.NumericBounded, Stability: sdk.Stable, Devices: []device.Kind{device.CUDA}}
}

func (gpuFault) Admit(req sdk.Request, hw device.Profile) sdk.Admission {
	if ok, why := affinegpu.Admit(req, hw); !ok {
		return sdk.Admission{Reason: why}
	}
	return sdk.Admission{Admitted: true, Reason: "faults on purpose"}
}

func (gpuFault) Prepare(_ context.Context, env sdk.Env, req sdk.Request, weights sdk.Buffers) (sdk.Prepared, error) {
	dev, err := affinegpu.CUDA(env)
	if err != nil {
		return nil, err
	}
	k, err := faultKernels.Get(dev, faultSource, gpukernel.Variant{Entry: "fault"})
	if err != nil {
		return nil, err
	}
	p, err := affinegpu.NewPrepared(req, weights, k, [3]uint32{1, 1, 1}, [3]uint32{32, 1, 1}, 0)
	if err != nil {
		return nil, err
	}
	return remoteOnly{p}, nil
}

// remoteOnly hides Export, so the fault runs in the plugin, never the host.
type remoteOnly struct{ p *affinegpu.Prepared }

func (r remoteOnly) WorkspaceBytes() int64                             { return 0 }
func (r remoteOnly) Release() error                                    { return nil }
func (r remoteOnly) Execute(ctx context.Context, io sdk.Buffers) error { return r.p.Execute(ctx, io) }
