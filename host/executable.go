package host

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/kcand/kcand/sdk"
	"github.com/kcand/kcand/sdk/device"
	"github.com/kcand/kcand/sdk/errdefs"
	"github.com/kcand/kcand/sdk/family"
)

// Executable is a plan bound to one layer's weights, ready to run. When
// the candidate exports its kernels and the host can launch them, Run
// launches on the caller's stream with no RPC and, after a stream's first
// run, no allocation; otherwise Run asks the plugin to execute (the remote
// path).
type Executable struct {
	plan     *Plan
	weights  *Weights
	prep     *prepared
	exported exported
	ioSizes  map[string]int64

	mu     sync.Mutex
	closed bool
}

// exported is a launch plan loaded into the host's context.
type exported interface {
	// run launches the plan on stream with io bound by name.
	run(stream device.Stream, io map[string]device.Buffer) error
	// close frees what the loaded plan allocated itself (the workspaces
	// of further streams) once their work is done.
	close() error
}

// ErrAdvisory says a plan names an execution style for the engine's own
// kernels (dense plans) and has nothing to run.
var ErrAdvisory = errors.New("plan is advisory: run it with your own kernels")

// Bind prepares the plan's candidate with w. The weights must have been
// registered for the same request.
func (p *Plan) Bind(ctx context.Context, w *Weights) (*Executable, error) {
	if p.entry.Client == nil {
		return nil, fmt.Errorf("%w (%s for %s)", ErrAdvisory, p.Candidate, p.Request.Key())
	}
	if w.req.Key() != p.Request.Key() {
		return nil, errdefs.Invalid("weights.request", w.req.Key(), "the plan is for %s", p.Request.Key())
	}
	h := p.host
	prep, err := prepare(ctx, h.env, p.entry, p.Request, w.handles)
	if err != nil {
		return nil, err
	}
	c, _ := family.Lookup(p.Request.Family)
	e := &Executable{plan: p, weights: w, prep: prep, ioSizes: mergeSizes(c.InputSizes(p.Request), c.OutputSizes(p.Request))}
	if launch := prep.launchPlan(); launch != nil && h.launcher != nil {
		if e.exported, err = h.launcher.load(launch, prep.bindingsWithWeights(w.bufs), e.ioSizes); err != nil {
			prep.release(ctx)
			return nil, fmt.Errorf("candidate %s: %w", p.Candidate, err)
		}
	}
	return e, nil
}

// Remote reports whether Run goes through the plugin process.
func (e *Executable) Remote() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.exported == nil
}

// Plan is the plan the executable runs (the fallback's after a re-plan).
func (e *Executable) Plan() *Plan {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.plan
}

// Run executes on io (input and output bindings by name). On the exported
// path the work is enqueued on stream and Run returns at once; on the
// remote path Run waits for stream, has the plugin execute, and returns
// when the outputs are written. An input or output binding that is missing
// or smaller than the request needs is an error naming it (io.NAME) before
// any work is enqueued; on the exported path that holds for the bindings
// the candidate's kernels use (for the affine family, x and y), and one
// that is not GPU memory is refused too.
//
// On the exported path each stream gets its own copy of the candidate's
// scratch workspace (when it has one) at its first run, kept until Close,
// so runs on different streams may overlap. One executable runs on up to 8
// streams; a ninth is refused with an error naming it, so use long-lived
// streams rather than a stream per call. A stream's first run allocates:
// make it before capturing the stream into a graph, or capture in
// cuda.CaptureRelaxed mode (the strict modes forbid allocation). A graph
// captured from a stream uses that stream's workspace: replay it in order
// with the stream's other runs of the executable. The remote path runs the
// plugin's work in order. A run after Close is an error.
//
// When a candidate fails on the remote path (after its plugin was
// restarted and the call retried), the request is re-planned to the
// family's fallback, the executable rebinds to it, and the run is repeated:
// the caller gets a correct result or an error, never a wrong output.
func (e *Executable) Run(ctx context.Context, stream device.Stream, io map[string]device.Buffer) error {
	e.mu.Lock()
	ex, prep, plan, closed := e.exported, e.prep, e.plan, e.closed
	e.mu.Unlock()
	if closed {
		return errdefs.Invalid("executable", plan.Candidate, "closed")
	}
	if ex != nil {
		return ex.run(stream, io)
	}
	if err := checkSizes("io", e.ioSizes, io); err != nil {
		return err
	}
	err := runRemote(ctx, prep, stream, io)
	if err == nil || plan.entry.Info.Fallback || ctx.Err() != nil || errors.Is(err, errdefs.ErrInvalidRequest) && !errors.Is(err, sdk.ErrBadLaunchPlan) {
		return err
	}
	if err := e.replan(ctx, plan, err); err != nil {
		return err
	}
	return e.Run(ctx, stream, io)
}

// replan switches the executable from a failed candidate to the fallback.
func (e *Executable) replan(ctx context.Context, failed *Plan, cause error) error {
	h := failed.host
	next, err := h.planner.demote(ctx, failed.Request, failed.Candidate, cause)
	if err != nil {
		return fmt.Errorf("%w (re-planning failed: %w)", cause, err)
	}
	bound, err := next.Bind(ctx, e.weights)
	if err != nil {
		return fmt.Errorf("%w (binding the fallback failed: %w)", cause, err)
	}
	e.mu.Lock()
	old, oldExported := e.prep, e.exported
	e.plan, e.prep, e.exported = bound.plan, bound.prep, bound.exported
	e.mu.Unlock()
	if oldExported != nil {
		_ = oldExported.close()
	}
	_ = old.release(ctx)
	return nil
}

// runRemote has the plugin execute on io after stream's work: ordered on
// the GPU through the doorbell channel's events, or after waiting for the
// stream on the RPC path.
func runRemote(ctx context.Context, prep *prepared, stream device.Stream, io map[string]device.Buffer) error {
	handles := make(map[string]device.Handle, len(io))
	for name, b := range io {
		hd, err := b.Handle()
		if err != nil {
			return fmt.Errorf("io.%s: %w", name, err)
		}
		handles[name] = hd
	}
	prep.env.lent.lend(prep.entry.Plugin, handles)
	_, err := prep.execute(ctx, stream, handles)
	return err
}

// Close releases the prepared candidate and frees the workspaces of the
// streams it ran on, after waiting for each stream's work; runs still
// being enqueued on other goroutines finish enqueueing first.
func (e *Executable) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil
	}
	e.closed = true
	var err error
	if e.exported != nil {
		err = e.exported.close()
	}
	return errors.Join(err, e.prep.release(context.Background()))
}

// mergeSizes returns the union of size maps.
func mergeSizes(maps ...map[string]int64) map[string]int64 {
	out := map[string]int64{}
	for _, m := range maps {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

// launcher loads launch plans into the host's device context.
type launcher interface {
	// known reports whether a module hash is loaded already.
	known(hash string) bool
	// knownModules lists the loaded module hashes.
	knownModules() []string
	// load validates plan against the device, loads its modules and binds
	// the buffers that never change (weights, workspace); a run's own
	// buffers must hold ioSizes[name] bytes.
	load(plan *sdk.LaunchPlan, fixed map[string]device.Buffer, ioSizes map[string]int64) (exported, error)
}
