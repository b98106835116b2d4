package host

import (
	"fmt"

	"github.com/kcand/kcand/sdk"
	"github.com/kcand/kcand/sdk/errdefs"
)

// Dense execution styles the dense planner chooses between. They are
// advice for the engine's own bf16 kernels, not plugin candidates, unless a
// plugin offers candidates of these names.
const (
	DenseMatrix = "dense/matrix"
	DenseVector = "dense/vector"
)

// denseVectorTokens is the token count up to which a bf16 projection is
// memory-bound on any current GPU: a vector kernel that streams the weights
// once beats a matrix kernel that pads tokens to a tile.
const denseVectorTokens = 4

// validateDense checks a dense request.
func validateDense(req sdk.Request) error {
	if err := req.Validate(); err != nil {
		return err
	}
	if req.Weight.Kind != "bf16" {
		return errdefs.Invalid("weight.kind", req.Weight.Kind, "dense projections take %q weights", "bf16")
	}
	if req.Activation != sdk.BF16 {
		return errdefs.Invalid("activation", req.Activation, "dense projections take %q activations", sdk.BF16)
	}
	return nil
}

// densePlan chooses matrix or vector execution for a bf16 projection by
// role and shape.
func densePlan(req sdk.Request) (string, PlanSource, string) {
	weightBytes := int64(req.InFeatures) * int64(req.OutFeatures) * 2
	switch {
	case req.InFeatures%8 != 0 || req.OutFeatures%8 != 0:
		return DenseMatrix, SourceFallback, fmt.Sprintf("%dx%d is not a multiple of 8; only the matrix path takes any shape", req.InFeatures, req.OutFeatures)
	case req.Tokens <= denseVectorTokens:
		return DenseVector, SourceHeuristic, fmt.Sprintf("tokens=%d ≤ %d is memory-bound: a vector kernel reads the %.1f MB of weights once", req.Tokens, denseVectorTokens, float64(weightBytes)/1e6)
	case req.Role == sdk.RoleRouter && req.OutFeatures <= 256 && req.Tokens <= 64:
		return DenseVector, SourceHeuristic, fmt.Sprintf("router with %d outputs is too narrow to fill matrix tiles at tokens=%d", req.OutFeatures, req.Tokens)
	case req.Role == sdk.RoleOutputHead:
		return DenseMatrix, SourceHeuristic, fmt.Sprintf("output head (%d outputs) at tokens=%d is large enough for tensor-core tiles", req.OutFeatures, req.Tokens)
	default:
		return DenseMatrix, SourceHeuristic, fmt.Sprintf("tokens=%d > %d fills tensor-core tiles", req.Tokens, denseVectorTokens)
	}
}
