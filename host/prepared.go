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

// maxWorkspaceBytes bounds the scratch memory a plugin may ask for (4 GiB).
const maxWorkspaceBytes = 4 << 30

// retriesAfterRestart is how often a call is retried when its plugin died
// under it: the host re-prepares in the new process and runs again.
const retriesAfterRestart = 2

// prepared is the host's side of a prepared candidate. It remembers what
// it was prepared from, so when the plugin restarts (and loses its state)
// the candidate is prepared again transparently.
type prepared struct {
	entry   Entry
	req     sdk.Request
	hw      sdk.Hardware
	weights map[string]device.Handle
	dev     device.Device

	// known and ioSizes feed launch-plan validation: the module hashes the
	// host has, and the input and output binding sizes of the request.
	known   launcher
	ioSizes map[string]int64

	mu        sync.Mutex
	id        string
	workspace *bufferSet
	launch    *sdk.LaunchPlan
}

func prepare(ctx context.Context, dev device.Device, e Entry, req sdk.Request, hw sdk.Hardware, weights map[string]device.Handle, l launcher) (*prepared, error) {
	c, err := family.Lookup(req.Family)
	if err != nil {
		return nil, err
	}
	p := &prepared{entry: e, req: req, hw: hw, weights: weights, dev: dev, known: l, ioSizes: mergeSizes(c.InputSizes(req), c.OutputSizes(req))}
	if err := p.reprepare(ctx); err != nil {
		return nil, err
	}
	return p, nil
}

// reprepare (re)creates the plugin-side state and the workspace.
func (p *prepared) reprepare(ctx context.Context) error {
	req := sdk.PrepareRequest{Candidate: p.entry.Info.Name, Request: p.req, Hardware: p.hw, Weights: p.weights}
	var known func(string) bool
	if p.known != nil {
		req.KnownModules, known = p.known.knownModules(), p.known.known
	}
	info, err := p.entry.Client.Prepare(ctx, req)
	if err != nil {
		return err
	}
	if info.WorkspaceBytes < 0 || info.WorkspaceBytes > maxWorkspaceBytes {
		_ = p.entry.Client.Release(ctx, info.ID, nil)
		return errdefs.Internal("candidate %s asked for a workspace of %d bytes (limit %d)", p.entry.Info.Name, info.WorkspaceBytes, int64(maxWorkspaceBytes))
	}
	if info.Launch != nil {
		if err := sdk.ValidateLaunchPlan(info.Launch, known, p.bindingSizes(info.WorkspaceBytes), p.hw.Limits); err != nil {
			_ = p.entry.Client.Release(ctx, info.ID, nil)
			return fmt.Errorf("candidate %s dropped: %w", p.entry.Info.Name, err)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.id, p.launch = info.ID, info.Launch
	if info.WorkspaceBytes > 0 && (p.workspace == nil || p.workspace.bufs[sdk.BufferWorkspace].Size() < info.WorkspaceBytes) {
		if p.workspace != nil {
			p.workspace.free()
		}
		ws, err := allocate(p.dev, map[string]int64{sdk.BufferWorkspace: info.WorkspaceBytes})
		if err != nil {
			return err
		}
		p.workspace = ws
	}
	return nil
}

// bindingSizes names every buffer a launch plan may point into, with its size.
func (p *prepared) bindingSizes(workspace int64) map[string]int64 {
	sizes := mergeSizes(p.ioSizes)
	for name, h := range p.weights {
		sizes[name] = h.Size
	}
	if workspace > 0 {
		sizes[sdk.BufferWorkspace] = workspace
	}
	return sizes
}

// launchPlan is the candidate's exported launch plan, or nil.
func (p *prepared) launchPlan() *sdk.LaunchPlan {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.launch
}

// bindingsWithWeights returns the buffers fixed for the prepared candidate's
// life: the weights and the workspace.
func (p *prepared) bindingsWithWeights(weights map[string]device.Buffer) map[string]device.Buffer {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]device.Buffer{}
	for k, v := range weights {
		out[k] = v
	}
	if p.workspace != nil {
		out[sdk.BufferWorkspace] = p.workspace.bufs[sdk.BufferWorkspace]
	}
	return out
}

// bindings adds the workspace to io.
func (p *prepared) bindings(io map[string]device.Handle) (string, map[string]device.Handle, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.workspace == nil {
		return p.id, io, nil
	}
	ws, err := p.workspace.handles()
	if err != nil {
		return "", nil, err
	}
	return p.id, merge(io, ws), nil
}

// retry runs fn, and when the plugin died or restarted under it, prepares
// again and retries.
func (p *prepared) retry(ctx context.Context, fn func(id string, io map[string]device.Handle) error, io map[string]device.Handle) error {
	for attempt := 0; ; attempt++ {
		id, bound, err := p.bindings(io)
		if err != nil {
			return err
		}
		err = fn(id, bound)
		if err == nil || attempt >= retriesAfterRestart || !lostState(err) || ctx.Err() != nil {
			return err
		}
		if perr := p.reprepare(ctx); perr != nil {
			return fmt.Errorf("%w (and preparing again failed: %w)", err, perr)
		}
	}
}

// lostState says an error means the plugin process lost the prepared state.
func lostState(err error) bool {
	return errors.Is(err, ErrStale) || errors.Is(err, sdk.ErrUnavailable) || errors.Is(err, errdefs.ErrNotFound)
}

func (p *prepared) execute(ctx context.Context, io map[string]device.Handle) (us float64, err error) {
	err = p.retry(ctx, func(id string, bound map[string]device.Handle) (err error) {
		us, err = p.entry.Client.Execute(ctx, sdk.ExecuteRequest{PreparedID: id, Buffers: bound})
		return err
	}, io)
	return us, err
}

func (p *prepared) benchmark(ctx context.Context, io map[string]device.Handle, warmup, iterations int) (res sdk.BenchmarkResult, err error) {
	err = p.retry(ctx, func(id string, bound map[string]device.Handle) (err error) {
		res, err = p.entry.Client.Benchmark(ctx, sdk.BenchmarkRequest{PreparedID: id, Buffers: bound, Warmup: warmup, Iterations: iterations})
		return err
	}, io)
	return res, err
}

func (p *prepared) release(ctx context.Context) error {
	p.mu.Lock()
	id, ws := p.id, p.workspace
	p.workspace = nil
	p.mu.Unlock()
	err := p.entry.Client.Release(ctx, id, nil)
	if ws != nil {
		err = errors.Join(err, ws.free())
	}
	return err
}
