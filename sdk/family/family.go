// Package family gives the host one view of every family contract: how to
// validate a request, size and fill its buffers, and judge a candidate's
// numbers. Each family's own package holds its layout, reference and gate.
package family

import (
	"github.com/kcand/kcand/sdk/errdefs"
	"github.com/kcand/kcand/sdk/spec"
)

// Contract is what the host needs of a family.
type Contract interface {
	// Validate checks a request completely.
	Validate(req spec.Request) error
	// WeightSizes, InputSizes and OutputSizes give each binding's byte size.
	WeightSizes(req spec.Request) map[string]int64
	InputSizes(req spec.Request) map[string]int64
	OutputSizes(req spec.Request) map[string]int64
	// RandomSample and PatternSample make inputs for tuning and tests.
	// A sample's weights depend on the request's weight shape (and the
	// seed) alone, never on its token count.
	RandomSample(req spec.Request, seed uint64) spec.Sample
	PatternSample(req spec.Request) spec.Sample
	// NonFiniteSamples are random samples whose inputs hold a NaN and an
	// infinity, for conformance tests: SpotCheck passes an output only
	// where it carries them as the float64 reference does (see the
	// family's contract). Tuning never uses them.
	NonFiniteSamples(req spec.Request, seed uint64) []spec.Sample
	// RandomInputs and PatternInputs make the same samples' inputs alone,
	// for a host that kept another token count's sample weights.
	RandomInputs(req spec.Request, seed uint64) map[string][]byte
	PatternInputs(req spec.Request) map[string][]byte
	// Compare applies the family's numeric gate to a candidate's outputs
	// against the fallback's, returning an error naming the worst element.
	Compare(req spec.Request, got, fallback map[string][]byte) error
	// SpotCheck checks outputs against the float64 reference at up to n
	// elements spread over the output (all of them when the output is small).
	SpotCheck(req spec.Request, sample spec.Sample, outputs map[string][]byte, n int) error
	// RelativeError is ‖out−ref‖₂/‖ref‖₂ against the float64 reference over
	// the whole output: the accuracy figure tests report.
	RelativeError(req spec.Request, sample spec.Sample, outputs map[string][]byte) float64
	// SampledRelativeError is RelativeError over up to n elements spread
	// over the output (all of them when there are at most n).
	SampledRelativeError(req spec.Request, sample spec.Sample, outputs map[string][]byte, n int) float64
}

// Lookup returns the contract of f, or an invalid-request error naming it.
func Lookup(f spec.Family) (Contract, error) {
	switch f {
	case spec.FamilyAffine:
		return affineContract{}, nil
	}
	return nil, errdefs.Invalid("family", f, "no contract for this family in this SDK (known: %s)", spec.FamilyAffine)
}
