package sdk

import (
	"context"

	"github.com/hashicorp/go-hclog"

	"github.com/kcand/kcand/sdk/device"
)

// NumericClass says how a candidate's results relate to its family's
// fallback.
type NumericClass string

// The numeric classes.
const (
	// NumericExact candidates produce bit-identical results to the fallback.
	NumericExact NumericClass = "exact"
	// NumericBounded candidates agree with the reference within the family's gate.
	NumericBounded NumericClass = "bounded"
)

// Stability says whether a candidate is admitted under the stable policy.
type Stability string

// The stabilities.
const (
	Stable       Stability = "stable"
	Experimental Stability = "experimental"
)

// CandidateInfo describes one candidate.
type CandidateInfo struct {
	// Name is unique across all plugins, e.g. "qmm" or "mxfp4/single-warp".
	Name string
	// Family is the family the candidate serves.
	Family Family
	// Fallback marks the family's default candidate: the numeric reference
	// and the baseline a winner must beat.
	Fallback bool
	// Numeric is the candidate's numeric class.
	Numeric NumericClass
	// Stability is the candidate's maturity.
	Stability Stability
	// Devices lists the device kinds the candidate runs on.
	Devices []device.Kind
}

// Admission is a candidate's answer for a request on some hardware,
// decided without running anything.
type Admission struct {
	Candidate string
	Admitted  bool
	Reason    string
}

// Buffers binds names (see the family contracts) to device buffers.
type Buffers map[string]device.Buffer

// Env is what the plugin runtime gives a candidate: the device that holds
// the buffers and a logger.
type Env struct {
	Device device.Device
	Logger hclog.Logger
}

// Candidate is one way to execute a family's requests. A plugin author
// implements it; sdk.Serve exposes it to the host.
type Candidate interface {
	// Info describes the candidate. It must not change.
	Info() CandidateInfo
	// Admit decides whether the candidate can serve req on hw.
	Admit(req Request, hw device.Profile) Admission
	// Prepare readies the candidate for req with its weight buffers.
	Prepare(ctx context.Context, env Env, req Request, weights Buffers) (Prepared, error)
}

// Prepared is a candidate bound to one request and its weights.
type Prepared interface {
	// WorkspaceBytes is the scratch memory Execute needs, bound as
	// BufferWorkspace when positive. Its contents do not last from one
	// call to the next: the host binds a workspace of its own to each
	// stream that runs an exported launch plan, so a call may see another
	// buffer than the call before.
	WorkspaceBytes() int64
	// Execute runs the operation on the bound input and output buffers. It
	// returns after the work is complete or ordered on the device.
	Execute(ctx context.Context, io Buffers) error
	// Release frees what Prepare made.
	Release() error
}

// BufferWorkspace is the binding name of a prepared candidate's scratch memory.
const BufferWorkspace = "workspace"
