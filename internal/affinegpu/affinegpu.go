// Package affinegpu is what the affine plugins (qmm, gemv) share on a GPU:
// the kernels' common signature, the admission rules every affine kernel
// needs, and a prepared candidate that exports its kernel to the host and
// can also execute it in the plugin (the remote path).
package affinegpu

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/kcand/kcand/cuda"
	"github.com/kcand/kcand/sdk"
	"github.com/kcand/kcand/sdk/device"
	"github.com/kcand/kcand/sdk/errdefs"
	"github.com/kcand/kcand/sdk/family/affine"
	"github.com/kcand/kcand/sdk/gpukernel"
)

// Admit applies what every affine GPU kernel needs: output rows in
// multiples of 8 (the kernels store 16-byte vectors) and bf16 tensor-core
// instructions (compute capability 8.0 or newer).
func Admit(req sdk.Request, hw device.Profile) (bool, string) {
	if err := affine.Validate(req); err != nil {
		return false, err.Error()
	}
	if req.OutFeatures%8 != 0 {
		return false, fmt.Sprintf("out_features=%d is not a multiple of 8", req.OutFeatures)
	}
	if major := ComputeMajor(hw.ComputeCapability); major < 8 {
		return false, fmt.Sprintf("needs compute capability 8.0 or newer, the GPU has %s", hw.ComputeCapability)
	}
	return true, ""
}

// AdmitCUDA is Admit for candidates that run on CUDA devices only: it
// returns why req is refused on hw, or "".
func AdmitCUDA(req sdk.Request, hw device.Profile) string {
	if hw.Kind != device.CUDA {
		return fmt.Sprintf("needs a CUDA device, not %s", hw.Kind)
	}
	if ok, why := Admit(req, hw); !ok {
		return why
	}
	return ""
}

// ComputeMajor is the major number of a compute capability such as "9.0"
// (0 when it cannot be read).
func ComputeMajor(cc string) int {
	head, _, _ := strings.Cut(cc, ".")
	v, err := strconv.Atoi(head)
	if err != nil {
		return 0
	}
	return v
}

// Params is the parameter list both kernels take:
// (x, weight, scales, biases, bias or null, y, tokens, in, out).
func Params(req sdk.Request) []sdk.Param {
	bias := gpukernel.NullPointer
	if req.Bias {
		bias = sdk.BufferParam(affine.Bias)
	}
	return []sdk.Param{
		sdk.BufferParam(affine.X), sdk.BufferParam(affine.Weight), sdk.BufferParam(affine.Scales), sdk.BufferParam(affine.Biases),
		bias, sdk.BufferParam(affine.Y),
		sdk.Int32Param(int32(req.Tokens)), sdk.Int32Param(int32(req.InFeatures)), sdk.Int32Param(int32(req.OutFeatures)),
	}
}

// CUDA returns the CUDA device of env, or an error saying it is not one.
func CUDA(env sdk.Env) (*cuda.Device, error) {
	d, ok := env.Device.(*cuda.Device)
	if !ok {
		return nil, errdefs.Unsupported("not a CUDA device: %T", env.Device)
	}
	return d, nil
}

// Prepared is an affine kernel (or a sequence of kernels sharing a
// workspace) bound to one request's weights.
type Prepared struct {
	req       sdk.Request
	steps     []gpukernel.Step
	workspace int64
	weights   sdk.Buffers
}

var (
	_ sdk.Prepared = (*Prepared)(nil)
	_ sdk.Exporter = (*Prepared)(nil)
)

// NewPrepared checks the weights against the request and binds them to one
// kernel launch.
func NewPrepared(req sdk.Request, weights sdk.Buffers, k *gpukernel.Kernel, grid, block [3]uint32, shared uint32) (*Prepared, error) {
	return NewPreparedSteps(req, weights, []gpukernel.Step{{Kernel: k,
		Launch: gpukernel.Launch{Grid: grid, Block: block, SharedBytes: shared, Params: Params(req)}}}, 0)
}

// NewPreparedSteps checks the weights against the request and binds them to
// launches run in order, which may use a workspace of the given size (bound
// as sdk.BufferWorkspace).
func NewPreparedSteps(req sdk.Request, weights sdk.Buffers, steps []gpukernel.Step, workspace int64) (*Prepared, error) {
	if err := affine.CheckBindings(affine.WeightSizes(req), weights); err != nil {
		return nil, err
	}
	if len(steps) == 0 {
		return nil, errdefs.Internal("affine kernel for %s has no launches", req.Key())
	}
	return &Prepared{req: req, steps: steps, workspace: workspace, weights: weights}, nil
}

// WorkspaceBytes implements sdk.Prepared.
func (p *Prepared) WorkspaceBytes() int64 { return p.workspace }

// Release implements sdk.Prepared.
func (p *Prepared) Release() error { return nil }

// Export implements sdk.Exporter.
func (p *Prepared) Export() (sdk.LaunchPlan, error) { return gpukernel.Plan(p.steps...), nil }

// Execute implements sdk.Prepared: it launches on the plugin's stream.
func (p *Prepared) Execute(_ context.Context, io sdk.Buffers) error {
	if err := affine.CheckBindings(affine.InputSizes(p.req), io); err != nil {
		return err
	}
	if err := affine.CheckBindings(affine.OutputSizes(p.req), io); err != nil {
		return err
	}
	if p.workspace > 0 {
		if err := affine.CheckBindings(map[string]int64{sdk.BufferWorkspace: p.workspace}, io); err != nil {
			return err
		}
	}
	all := make(map[string]device.Buffer, len(p.weights)+len(io))
	for k, v := range p.weights {
		all[k] = v
	}
	for k, v := range io {
		all[k] = v
	}
	for _, s := range p.steps {
		if err := s.Kernel.Run(s.Launch, all); err != nil {
			return err
		}
	}
	return nil
}

// Describe names the kernel variant for logs: each launch's entry point
// and geometry.
func (p *Prepared) Describe() string {
	parts := make([]string, len(p.steps))
	for i, s := range p.steps {
		parts[i] = fmt.Sprintf("%s grid %v block %v shared %d", s.Kernel.Entry, s.Launch.Grid, s.Launch.Block, s.Launch.SharedBytes)
	}
	d := strings.Join(parts, "; ")
	if p.workspace > 0 {
		d += fmt.Sprintf("; workspace %d bytes", p.workspace)
	}
	return d
}
