package sdk

import (
	"context"

	"github.com/kcand/kcand/sdk/device"
)

// Description is what a plugin says about itself.
type Description struct {
	Name            string
	Version         string
	Families        []Family
	Candidates      []CandidateInfo
	ProtocolVersion int
}

// PrepareRequest asks a plugin to prepare one candidate.
type PrepareRequest struct {
	Candidate string
	Request   Request
	Hardware  device.Profile
	Weights   map[string]device.Handle
	// KnownModules are module hashes the host has loaded; the plugin omits
	// their images from the launch plan.
	KnownModules []string
}

// PreparedInfo is a plugin's answer to Prepare.
type PreparedInfo struct {
	ID             string
	WorkspaceBytes int64
	// Launch is set when the candidate exports its kernels.
	Launch *LaunchPlan
}

// ExecuteRequest runs a prepared candidate on bound buffers.
type ExecuteRequest struct {
	PreparedID string
	Buffers    map[string]device.Handle
}

// BenchmarkRequest times a prepared candidate inside the plugin.
type BenchmarkRequest struct {
	PreparedID string
	Buffers    map[string]device.Handle
	Warmup     int
	Iterations int
}

// BenchmarkResult holds the device time of each timed iteration and the
// wall-clock time of the whole benchmark, both in microseconds.
type BenchmarkResult struct {
	IterationMicros []float64
	WallMicros      float64
}

// Plugin is the protocol between the host and a plugin process. The gRPC
// client implements it, so does the in-process runtime that serves
// candidates; the host cannot tell them apart.
type Plugin interface {
	Describe(ctx context.Context) (Description, error)
	Admit(ctx context.Context, req Request, hw device.Profile) ([]Admission, error)
	Prepare(ctx context.Context, req PrepareRequest) (PreparedInfo, error)
	Execute(ctx context.Context, req ExecuteRequest) (deviceMicros float64, err error)
	Benchmark(ctx context.Context, req BenchmarkRequest) (BenchmarkResult, error)
	// Release drops a prepared candidate (when id is not empty) and the
	// mappings of the listed allocations.
	Release(ctx context.Context, id string, forget []device.Handle) error
	// OpenChannel starts serving executes over a shared-memory doorbell.
	OpenChannel(ctx context.Context, req ChannelRequest) error
}

// ChannelRequest opens the fast remote path: Page is host shared memory
// (a CPU handle of doorbell.PageBytes); on a GPU, ReadyEvent and DoneEvent
// are interprocess event handles that order the plugin's stream against the
// host's without either side synchronising.
type ChannelRequest struct {
	Page       device.Handle
	ReadyEvent []byte
	DoneEvent  []byte
	EventOwner int
}

// Hardware is the profile a plugin decides admission against.
type Hardware = device.Profile
