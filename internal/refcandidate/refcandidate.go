// Package refcandidate is an affine candidate for the CPU device that
// computes the float64 reference: the well-behaved core of the test and
// fault-injection plugins, which then misbehave in chosen ways.
package refcandidate

import (
	"context"

	"github.com/kcand/kcand/sdk"
	"github.com/kcand/kcand/sdk/bf16"
	"github.com/kcand/kcand/sdk/device"
	"github.com/kcand/kcand/sdk/family/affine"
)

// Candidate serves the affine family with reference numbers. Hooks, when
// set, run at the start of Prepare and Execute; Corrupt damages one output
// element; Export, when set, makes prepared candidates export that plan.
type Candidate struct {
	Name    string
	Corrupt bool
	// BeforePrepare and BeforeExecute may return an error, block, or kill
	// the process: that is their purpose.
	BeforePrepare func() error
	BeforeExecute func() error
	Export        func() (sdk.LaunchPlan, error)
}

// Info implements sdk.Candidate.
func (c Candidate) Info() sdk.CandidateInfo {
	return sdk.CandidateInfo{Name: c.Name, Family: sdk.FamilyAffine, Numeric: sdk.NumericBounded, Stability: sdk.Stable, Devices: []device.Kind{device.CPU}}
}

// Admit implements sdk.Candidate.
func (c Candidate) Admit(req sdk.Request, _ device.Profile) sdk.Admission {
	if err := affine.Validate(req); err != nil {
		return sdk.Admission{Reason: err.Error()}
	}
	return sdk.Admission{Admitted: true, Reason: "reference candidate"}
}

// Prepare implements sdk.Candidate.
func (c Candidate) Prepare(_ context.Context, _ sdk.Env, req sdk.Request, weights sdk.Buffers) (sdk.Prepared, error) {
	if c.BeforePrepare != nil {
		if err := c.BeforePrepare(); err != nil {
			return nil, err
		}
	}
	view, err := affine.NewHostView(req, weights)
	if err != nil {
		return nil, err
	}
	p := &prepared{c: c, view: view}
	if c.Export != nil {
		return &exporting{p}, nil
	}
	return p, nil
}

type prepared struct {
	c    Candidate
	view *affine.HostView
}

func (p *prepared) WorkspaceBytes() int64 { return 0 }
func (p *prepared) Release() error        { return nil }

func (p *prepared) Execute(_ context.Context, io sdk.Buffers) error {
	if p.c.BeforeExecute != nil {
		if err := p.c.BeforeExecute(); err != nil {
			return err
		}
	}
	x, y, err := p.view.IO(io)
	if err != nil {
		return err
	}
	weights := map[string][]byte{affine.Weight: p.view.Weight, affine.Scales: p.view.Scales, affine.Biases: p.view.Biases, affine.Bias: p.view.Bias}
	ref := affine.Reference(p.view.Req, weights, x)
	for i, v := range ref {
		bf16.Set(y, i, float32(v))
	}
	if p.c.Corrupt {
		bf16.Set(y, len(ref)/2, float32(ref[len(ref)/2])+10)
	}
	return nil
}

type exporting struct{ *prepared }

func (e *exporting) Export() (sdk.LaunchPlan, error) { return e.c.Export() }
