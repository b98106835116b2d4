package main

import (
	"context"

	"github.com/kcand/kcand/sdk"
	"github.com/kcand/kcand/sdk/bf16"
	"github.com/kcand/kcand/sdk/cpukernel"
	"github.com/kcand/kcand/sdk/family/affine"
)

// cpuQMM is QMM on the CPU device: each output row is dequantised to float32
// once, then dotted with every token, accumulating in float32.
type cpuQMM struct {
	view *affine.HostView
}

func (p *cpuQMM) WorkspaceBytes() int64 { return 0 }
func (p *cpuQMM) Release() error        { return nil }

func (p *cpuQMM) Execute(ctx context.Context, io sdk.Buffers) error {
	x, y, err := p.view.IO(io)
	if err != nil {
		return err
	}
	req := p.view.Req
	in, out, g, bits := req.InFeatures, req.OutFeatures, req.Weight.GroupSize, req.Weight.Bits
	xf := bf16.Decode(x[:2*req.Tokens*in])
	cpukernel.ParallelFor(out, 16, func(lo, hi int) {
		w := make([]float32, in)
		q := make([]uint8, in)
		for o := lo; o < hi; o++ {
			affine.UnpackRow(p.view.Row(o), bits, q)
			for gi := 0; gi < in/g; gi++ {
				s, b := p.view.Scale(o, gi), p.view.GroupBias(o, gi)
				for i := gi * g; i < (gi+1)*g; i++ {
					w[i] = s*float32(q[i]) + b
				}
			}
			for t := 0; t < req.Tokens; t++ {
				xt := xf[t*in : (t+1)*in]
				var acc float32
				for i, wi := range w {
					acc += xt[i] * wi
				}
				bf16.Set(y, t*out+o, acc+p.view.OutputBias(o))
			}
		}
	})
	return ctx.Err()
}
