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
	if major := ccMajor(hw.ComputeCapability); major < 8 {
		return false, fmt.Sprintf("needs compute capability 8.0 or newer, the GPU has %s", hw.ComputeCapability)
	}
	return true, ""
}

func ccMajor(cc string) int {
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

// Prepared is an affine kernel bound to one request's weights.
type Prepared struct {
	req     sdk.Request
	kernel  *gpukernel.Kernel
	launch  gpukernel.Launch
	weights sdk.Buffers
}

var (
	_ sdk.Prepared = (*Prepared)(nil)
	_ sdk.Exporter = (*Prepared)(nil)
)

// NewPrepared checks the weights against the request and binds them.
func NewPrepared(req sdk.Request, weights sdk.Buffers, k *gpukernel.Kernel, grid, block [3]uint32, shared uint32) (*Prepared, error) {
	if err := affine.CheckBindings(affine.WeightSizes(req), weights); err != nil {
		return nil, err
	}
	return &Prepared{req: req, kernel: k, weights: weights,
		launch: gpukernel.Launch{Grid: grid, Block: block, SharedBytes: shared, Params: Params(req)}}, nil
}

// WorkspaceBytes implements sdk.Prepared.
func (p *Prepared) WorkspaceBytes() int64 { return 0 }

// Release implements sdk.Prepared.
func (p *Prepared) Release() error { return nil }

// Export implements sdk.Exporter.
func (p *Prepared) Export() (sdk.LaunchPlan, error) { return p.kernel.Plan(p.launch), nil }

// Execute implements sdk.Prepared: it launches on the plugin's stream.
func (p *Prepared) Execute(_ context.Context, io sdk.Buffers) error {
	if err := affine.CheckBindings(affine.InputSizes(p.req), io); err != nil {
		return err
	}
	if err := affine.CheckBindings(affine.OutputSizes(p.req), io); err != nil {
		return err
	}
	all := make(map[string]device.Buffer, len(p.weights)+len(io))
	for k, v := range p.weights {
		all[k] = v
	}
	for k, v := range io {
		all[k] = v
	}
	return p.kernel.Run(p.launch, all)
}

// Describe names the kernel variant for logs.
func (p *Prepared) Describe() string {
	return fmt.Sprintf("%s grid %v block %v shared %d", p.kernel.Entry, p.launch.Grid, p.launch.Block, p.launch.SharedBytes)
}
