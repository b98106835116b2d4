package main

import (
	"context"

	"github.com/kcand/kcand/sdk"
	"github.com/kcand/kcand/sdk/bf16"
	"github.com/kcand/kcand/sdk/cpukernel"
	"github.com/kcand/kcand/sdk/family/affine"
)

// cpuGEMV is GEMV on the CPU device. Per group it accumulates Σ x·q in
// integer-valued float32 and applies scale·Σx·q + bias·Σx, so the group bias
// costs one multiply per group instead of one per weight.
type cpuGEMV struct {
	view *affine.HostView
}

func (p *cpuGEMV) WorkspaceBytes() int64 { return 0 }
func (p *cpuGEMV) Release() error        { return nil }

func (p *cpuGEMV) Execute(ctx context.Context, io sdk.Buffers) error {
	x, y, err := p.view.IO(io)
	if err != nil {
		return err
	}
	req := p.view.Req
	in, out, g, bits, tokens := req.InFeatures, req.OutFeatures, req.Weight.GroupSize, req.Weight.Bits, req.Tokens
	groups := in / g
	xf := bf16.Decode(x[:2*tokens*in])
	groupSums := make([]float32, tokens*groups)
	for t := 0; t < tokens; t++ {
		for i := 0; i < in; i++ {
			groupSums[t*groups+i/g] += xf[t*in+i]
		}
	}
	cpukernel.ParallelFor(out, 64, func(lo, hi int) {
		packed := make([]uint8, in)
		acc := make([]float32, tokens)
		for o := lo; o < hi; o++ {
			affine.UnpackRow(p.view.Row(o), bits, packed)
			clear(acc)
			for gi := 0; gi < groups; gi++ {
				q := packed[gi*g : (gi+1)*g]
				s, b := p.view.Scale(o, gi), p.view.GroupBias(o, gi)
				for t := 0; t < tokens; t++ {
					xt := xf[t*in+gi*g : t*in+(gi+1)*g]
					var dot float32
					for j, qj := range q {
						dot += xt[j] * float32(qj)
					}
					acc[t] += s*dot + b*groupSums[t*groups+gi]
				}
			}
			for t := 0; t < tokens; t++ {
				bf16.Set(y, t*out+o, acc[t]+p.view.OutputBias(o))
			}
		}
	})
	return ctx.Err()
}
