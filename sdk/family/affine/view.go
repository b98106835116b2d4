package affine

import (
	"github.com/kcand/kcand/sdk/bf16"
	"github.com/kcand/kcand/sdk/cpukernel"
	"github.com/kcand/kcand/sdk/device"
	"github.com/kcand/kcand/sdk/spec"
)

// HostView reads affine weights and activations that the CPU can address:
// what CPU-device kernels work on.
type HostView struct {
	Req                          spec.Request
	Weight, Scales, Biases, Bias []byte
	rowBytes, groups             int
}

// NewHostView checks the weight bindings against req and returns a view.
func NewHostView(req spec.Request, weights map[string]device.Buffer) (*HostView, error) {
	if err := Validate(req); err != nil {
		return nil, err
	}
	if err := CheckBindings(WeightSizes(req), weights); err != nil {
		return nil, err
	}
	v := &HostView{Req: req, rowBytes: RowWords(req) * 4, groups: Groups(req)}
	var err error
	if v.Weight, err = cpukernel.Bytes(weights, Weight); err != nil {
		return nil, err
	}
	if v.Scales, err = cpukernel.Bytes(weights, Scales); err != nil {
		return nil, err
	}
	if v.Biases, err = cpukernel.Bytes(weights, Biases); err != nil {
		return nil, err
	}
	if req.Bias {
		if v.Bias, err = cpukernel.Bytes(weights, Bias); err != nil {
			return nil, err
		}
	}
	return v, nil
}

// Row returns the packed q of output row o.
func (v *HostView) Row(o int) []byte { return v.Weight[o*v.rowBytes : (o+1)*v.rowBytes] }

// Scale returns the scale of group g of output row o.
func (v *HostView) Scale(o, g int) float32 { return bf16.Get(v.Scales, o*v.groups+g) }

// GroupBias returns the bias of group g of output row o.
func (v *HostView) GroupBias(o, g int) float32 { return bf16.Get(v.Biases, o*v.groups+g) }

// OutputBias returns the output bias of row o, or 0 without one.
func (v *HostView) OutputBias(o int) float32 {
	if v.Bias == nil {
		return 0
	}
	return bf16.Get(v.Bias, o)
}

// IO checks the x and y bindings and returns their bytes.
func (v *HostView) IO(io map[string]device.Buffer) (x, y []byte, err error) {
	if err := CheckBindings(InputSizes(v.Req), io); err != nil {
		return nil, nil, err
	}
	if err := CheckBindings(OutputSizes(v.Req), io); err != nil {
		return nil, nil, err
	}
	if x, err = cpukernel.Bytes(io, X); err != nil {
		return nil, nil, err
	}
	if y, err = cpukernel.Bytes(io, Y); err != nil {
		return nil, nil, err
	}
	return x, y, nil
}
