package family

import (
	"github.com/kcand/kcand/sdk/family/affine"
	"github.com/kcand/kcand/sdk/spec"
)

type affineContract struct{}

func (affineContract) Validate(req spec.Request) error               { return affine.Validate(req) }
func (affineContract) WeightSizes(req spec.Request) map[string]int64 { return affine.WeightSizes(req) }
func (affineContract) InputSizes(req spec.Request) map[string]int64  { return affine.InputSizes(req) }
func (affineContract) OutputSizes(req spec.Request) map[string]int64 { return affine.OutputSizes(req) }
func (affineContract) PatternSample(req spec.Request) spec.Sample    { return affine.PatternSample(req) }

func (affineContract) RandomSample(req spec.Request, seed uint64) spec.Sample {
	return affine.RandomSample(req, seed)
}

func (affineContract) NonFiniteSamples(req spec.Request, seed uint64) []spec.Sample {
	return affine.NonFiniteSamples(req, seed)
}

func (affineContract) RandomInputs(req spec.Request, seed uint64) map[string][]byte {
	return affine.RandomInputs(req, seed)
}

func (affineContract) PatternInputs(req spec.Request) map[string][]byte {
	return affine.PatternInputs(req)
}

func (affineContract) Compare(_ spec.Request, got, fallback map[string][]byte) error {
	return affine.CheckAgainst(got[affine.Y], fallback[affine.Y])
}

func (affineContract) SpotCheck(req spec.Request, sample spec.Sample, outputs map[string][]byte, n int) error {
	return affine.SpotCheck(req, sample, outputs[affine.Y], n)
}

func (affineContract) RelativeError(req spec.Request, sample spec.Sample, outputs map[string][]byte) float64 {
	return affine.RelativeError(outputs[affine.Y], affine.Reference(req, sample.Weights, sample.Inputs[affine.X]))
}

func (affineContract) SampledRelativeError(req spec.Request, sample spec.Sample, outputs map[string][]byte, n int) float64 {
	got, want := affine.SampledReference(req, sample, outputs[affine.Y], n)
	return affine.RelativeError(got, want)
}
