package affinegpu

import (
	_ "embed"
	"fmt"

	"github.com/kcand/kcand/cuda"
	"github.com/kcand/kcand/sdk"
	"github.com/kcand/kcand/sdk/device"
	"github.com/kcand/kcand/sdk/family/affine"
	"github.com/kcand/kcand/sdk/gpukernel"
)

//go:embed kernels/bulk.cu
var bulkCode string

// BulkSource is kernels/bulk.cu (see the comment at its top), the kernel
// behind gemv/bulk (1 to 8 tokens) and qmm/bulk (9 to 16 tokens in K slices).
var BulkSource = gpukernel.Source{Name: "bulk.cu", Code: bulkCode}

// The kernel's entry points: the product, and around a launch in K slices
// the clearing of the float workspace and the rounding of its total.
const (
	BulkEntry       = "affine_bulk"
	bulkClearEntry  = "affine_bulk_clear"
	bulkFinishEntry = "affine_bulk_finish"
	bulkEdgeThreads = 256 // threads per block of the clear and finish kernels
)

// AdmitBulk picks the bulk variant for req on hw, or says why the kernel
// does not serve it: it needs a CUDA device of compute capability 9.0 or
// newer (tensor copies) and a ring of stages in its shared memory.
func AdmitBulk(req sdk.Request, hw device.Profile) (BulkConfig, string) {
	if why := AdmitCUDA(req, hw); why != "" {
		return BulkConfig{}, why
	}
	if major := ComputeMajor(hw.ComputeCapability); major < 9 {
		return BulkConfig{}, fmt.Sprintf("tensor copies need compute capability 9.0 or newer, the GPU has %s", hw.ComputeCapability)
	}
	maxShared := bulkMaxShared
	if l := hw.Limits.MaxSharedPerBlock; l > 0 {
		maxShared = min(maxShared, l)
	}
	return ChooseBulk(req, hw.Multiprocessors, maxShared)
}

var bulkKernels = gpukernel.NewCache()

// PrepareBulk compiles (or finds) the bulk variant cfg and binds the
// weights of req to it. Without K slices the plan is one launch; with
// them, three: the clear of a float workspace of tokens x out_features,
// the product (which adds each slice's sums into it) and the rounding
// into y with the bias. All take early start (the kernel's header).
func PrepareBulk(env sdk.Env, req sdk.Request, weights sdk.Buffers, cfg BulkConfig) (*Prepared, error) {
	dev, err := CUDA(env)
	if err != nil {
		return nil, err
	}
	k, err := bulkKernels.Get(dev, BulkSource, cfg.Variant())
	if err != nil {
		return nil, err
	}
	grid, block, shared := cfg.Launch(req, dev.Profile().Multiprocessors)
	main := gpukernel.Launch{Grid: grid, Block: block, SharedBytes: shared, Params: cfg.params(req), Programmatic: true}
	steps := []gpukernel.Step{{Kernel: k, Launch: main}}
	var workspace int64
	if cfg.KS > 1 {
		clearK, err := k.Sibling(bulkClearEntry)
		if err != nil {
			return nil, err
		}
		finishK, err := k.Sibling(bulkFinishEntry)
		if err != nil {
			return nil, err
		}
		l := cfg.edgeLaunches(req, dev.Profile().Multiprocessors)
		steps = []gpukernel.Step{{Kernel: clearK, Launch: l.clear}, steps[0], {Kernel: finishK, Launch: l.finish}}
		workspace = cfg.workspaceBytes(req)
	}
	p, err := NewPreparedSteps(req, weights, steps, workspace)
	if err != nil {
		return nil, err
	}
	env.Logger.Debug("prepared", "request", req.Key(), "kernel", p.Describe(), "variant", cfg.Describe(), "nvrtc_cache_hit", k.CacheHit)
	return p, nil
}

// Variant is the product's entry point with the variant's macros.
func (c BulkConfig) Variant() gpukernel.Variant {
	return gpukernel.Variant{Entry: BulkEntry, Defines: c.Defines()}
}

// workspaceBytes is the float sums of a launch in K slices, [tokens][out].
func (c BulkConfig) workspaceBytes(req sdk.Request) int64 {
	return 4 * int64(req.Tokens) * int64(req.OutFeatures)
}

// bulkEdges are the launches around the product in K slices.
type bulkEdges struct{ clear, finish gpukernel.Launch }

// edgeLaunches are the clear and finish launches for req: four floats per
// thread, at most four blocks per multiprocessor (both kernels loop).
func (c BulkConfig) edgeLaunches(req sdk.Request, sms int) bulkEdges {
	n := req.Tokens * req.OutFeatures
	blocks := uint32(max(1, min(ceilDiv(n/4, bulkEdgeThreads), 4*max(sms, 1))))
	ws := sdk.BufferParam(sdk.BufferWorkspace)
	bias := gpukernel.NullPointer
	if req.Bias {
		bias = sdk.BufferParam(affine.Bias)
	}
	edge := gpukernel.Launch{Grid: [3]uint32{blocks, 1, 1}, Block: [3]uint32{bulkEdgeThreads, 1, 1}, Programmatic: true}
	clear, finish := edge, edge
	clear.Params = []sdk.Param{ws, sdk.Int32Param(int32(n))}
	finish.Params = []sdk.Param{ws, bias, sdk.BufferParam(affine.Y), sdk.Int32Param(int32(req.Tokens)), sdk.Int32Param(int32(req.OutFeatures))}
	return bulkEdges{clear: clear, finish: finish}
}

// params is the product's parameter list: tensor maps of the weights, the
// scales and the biases, then (x, bias or null, y, tokens, in, out); in K
// slices y is the workspace and the bias is the finish kernel's.
func (c BulkConfig) params(req sdk.Request) []sdk.Param {
	weights, scales, biases := c.tensorMaps(req)
	bias, y := gpukernel.NullPointer, sdk.BufferParam(affine.Y)
	if req.Bias && c.KS <= 1 {
		bias = sdk.BufferParam(affine.Bias)
	}
	if c.KS > 1 {
		y = sdk.BufferParam(sdk.BufferWorkspace)
	}
	return []sdk.Param{
		sdk.TensorMapParam(affine.Weight, weights), sdk.TensorMapParam(affine.Scales, scales), sdk.TensorMapParam(affine.Biases, biases),
		sdk.BufferParam(affine.X), bias, y,
		sdk.Int32Param(int32(req.Tokens)), sdk.Int32Param(int32(req.InFeatures)), sdk.Int32Param(int32(req.OutFeatures)),
	}
}

// tensorMaps describes the views the kernel's copies read (its header):
// the packed weights as rows of 32-bit words in boxes of [TR rows][32
// words], 128-byte swizzled; the scales and the biases as rows of bf16 in
// boxes of [TR rows][U groups]. 128-byte L2 fetches are what was measured.
func (c BulkConfig) tensorMaps(req sdk.Request) (weights, scales, biases cuda.TensorMapDesc) {
	rows, tr := uint64(req.OutFeatures), uint32(16*c.MT)
	words := uint64(req.InFeatures * c.Bits / 32)
	groups := uint64(req.InFeatures / c.Group)
	weights = cuda.TensorMapDesc{DataType: cuda.TensorU32, Dims: []uint64{words, rows}, Strides: []uint64{4 * words},
		Box: []uint32{32, tr}, Swizzle: 128, L2Promotion: 128}
	scales = cuda.TensorMapDesc{DataType: cuda.TensorU16, Dims: []uint64{groups, rows}, Strides: []uint64{2 * groups},
		Box: []uint32{uint32(c.U), tr}, L2Promotion: 128}
	return weights, scales, scales
}
