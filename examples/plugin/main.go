// Command plugin is the smallest complete kcand plugin, for vendors and
// researchers to start from: one candidate, "example/dot", for the affine
// family on the CPU device at decode (1 to 4 tokens). Its kernel dequantises
// each weight as it goes and accumulates in float64, so it is slow and close
// to exact. It declares itself experimental, so the host considers it only
// under the experimental admission policy (KCAND_ADMISSION=experimental);
// then it checks it against the family's fallback on fresh samples, times
// it, and picks it only if it is correct and faster. Build it into a
// plugin directory and the host finds it without being rebuilt
// (examples/README.md has the whole session):
//
//	go build -o /tmp/myplugins/example ./examples/plugin
//	go build -o /tmp/myplugins/qmm ./plugins/qmm   # the family's fallback
//	go run ./cmd/kcand plugins --plugin-dir /tmp/myplugins --device cpu
package main

import (
	"context"
	"fmt"

	"github.com/kcand/kcand/sdk"
	"github.com/kcand/kcand/sdk/bf16"
	"github.com/kcand/kcand/sdk/device"
	"github.com/kcand/kcand/sdk/family/affine"
)

// maxTokens is the largest token count the example serves.
const maxTokens = 4

// dot is the candidate: what it is (Info), what it serves (Admit), and how
// it binds to one request's weights (Prepare).
type dot struct{}

var _ sdk.Candidate = dot{}

// Info implements sdk.Candidate.
func (dot) Info() sdk.CandidateInfo {
	return sdk.CandidateInfo{
		Name:      "example/dot",
		Family:    sdk.FamilyAffine,
		Numeric:   sdk.NumericBounded,
		Stability: sdk.Experimental,
		Devices:   []device.Kind{device.CPU},
	}
}

// Admit implements sdk.Candidate. A refusal's reason is what users read in
// `kcand tune`, so it says why.
func (dot) Admit(req sdk.Request, hw device.Profile) sdk.Admission {
	if hw.Kind != device.CPU {
		return sdk.Admission{Reason: fmt.Sprintf("runs on the CPU device, not %s", hw.Kind)}
	}
	if err := affine.Validate(req); err != nil {
		return sdk.Admission{Reason: err.Error()}
	}
	if req.Tokens > maxTokens {
		return sdk.Admission{Reason: fmt.Sprintf("serves 1 to %d tokens, not %d", maxTokens, req.Tokens)}
	}
	return sdk.Admission{Admitted: true, Reason: fmt.Sprintf("decode, %d-bit groups of %d", req.Weight.Bits, req.Weight.GroupSize)}
}

// Prepare implements sdk.Candidate: it views the weights the host shares
// (they stay the host's; the view reads them in place).
func (dot) Prepare(_ context.Context, env sdk.Env, req sdk.Request, weights sdk.Buffers) (sdk.Prepared, error) {
	if env.Device.Kind() != device.CPU {
		return nil, fmt.Errorf("example/dot runs on the CPU device, not %s", env.Device.Kind())
	}
	view, err := affine.NewHostView(req, weights)
	if err != nil {
		return nil, err
	}
	return &prepared{view: view}, nil
}

// prepared is the candidate bound to one request's weights.
type prepared struct {
	view *affine.HostView
}

// WorkspaceBytes implements sdk.Prepared: no scratch memory.
func (p *prepared) WorkspaceBytes() int64 { return 0 }

// Release implements sdk.Prepared.
func (p *prepared) Release() error { return nil }

// Execute implements sdk.Prepared: y[t][o] = sum over i of
// x[t][i] * (scale * q + bias) of row o, plus the output bias.
func (p *prepared) Execute(ctx context.Context, io sdk.Buffers) error {
	x, y, err := p.view.IO(io)
	if err != nil {
		return err
	}
	req := p.view.Req
	in, out, group := req.InFeatures, req.OutFeatures, req.Weight.GroupSize
	xs := bf16.Decode(x[:2*req.Tokens*in])
	q := make([]uint8, in)
	acc := make([]float64, req.Tokens)
	for o := 0; o < out; o++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		affine.UnpackRow(p.view.Row(o), req.Weight.Bits, q)
		clear(acc)
		for i := range in {
			w := float64(p.view.Scale(o, i/group))*float64(q[i]) + float64(p.view.GroupBias(o, i/group))
			for t := range acc {
				acc[t] += float64(xs[t*in+i]) * w
			}
		}
		for t, a := range acc {
			bf16.Set(y, t*out+o, float32(a)+p.view.OutputBias(o))
		}
	}
	return nil
}

func main() {
	sdk.Serve(sdk.Options{Name: "example", Version: "0.1.0"}, dot{})
}
