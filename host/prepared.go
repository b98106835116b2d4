package host

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/kcand/kcand/sdk"
	"github.com/kcand/kcand/sdk/device"
	"github.com/kcand/kcand/sdk/errdefs"
	"github.com/kcand/kcand/sdk/family"
)

// maxWorkspaceBytes bounds the scratch memory a plugin may ask for (4 GiB).
const maxWorkspaceBytes = 4 << 30

// retriesAfterRestart is how often a call is retried when its plugin died
// under it: the host re-prepares in the new process and runs again.
const retriesAfterRestart = 6

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
	// health counts the candidate's failures toward quarantine.
	health *quarantine

	mu        sync.Mutex
	id        string
	workspace *bufferSet
	launch    *sdk.LaunchPlan
}

func prepare(ctx context.Context, dev device.Device, e Entry, req sdk.Request, hw sdk.Hardware, weights map[string]device.Handle, l launcher, health *quarantine) (*prepared, error) {
	c, err := family.Lookup(req.Family)
	if err != nil {
		return nil, err
	}
	p := &prepared{entry: e, req: req, hw: hw, weights: weights, dev: dev, known: l, ioSizes: mergeSizes(c.InputSizes(req), c.OutputSizes(req)), health: health}
	for attempt := 0; ; attempt++ {
		err := p.reprepare(ctx)
		if err == nil {
			return p, nil
		}
		if attempt >= retriesAfterRestart || !lostState(err) || ctx.Err() != nil {
			p.record(ctx, err)
			return nil, err
		}
		time.Sleep(time.Duration(attempt+1) * 20 * time.Millisecond)
	}
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
// again in the new process and retries. A death is noticed a moment after
// the call that saw it fails, so attempts are spaced out a little.
func (p *prepared) retry(ctx context.Context, fn func(id string, io map[string]device.Handle) error, io map[string]device.Handle) error {
	var err error
	for attempt := 0; attempt <= retriesAfterRestart; attempt++ {
		if attempt > 0 {
			select {
			case <-time.After(time.Duration(attempt) * 20 * time.Millisecond):
			case <-ctx.Done():
				return err
			}
			if perr := p.reprepare(ctx); perr != nil {
				if !lostState(perr) {
					return fmt.Errorf("%w (and preparing again failed: %w)", err, perr)
				}
				err = perr
				continue
			}
		}
		id, bound, berr := p.bindings(io)
		if berr != nil {
			return berr
		}
		if err = fn(id, bound); err == nil || !lostState(err) || ctx.Err() != nil {
			return err
		}
	}
	return err
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
	p.record(ctx, err)
	return us, err
}

func (p *prepared) benchmark(ctx context.Context, io map[string]device.Handle, warmup, iterations int) (res sdk.BenchmarkResult, err error) {
	err = p.retry(ctx, func(id string, bound map[string]device.Handle) (err error) {
		res, err = p.entry.Client.Benchmark(ctx, sdk.BenchmarkRequest{PreparedID: id, Buffers: bound, Warmup: warmup, Iterations: iterations})
		return err
	}, io)
	p.record(ctx, err)
	return res, err
}

// record counts a call's outcome toward the candidate's quarantine. The
// caller's own mistakes and cancellations are not the candidate's failures.
func (p *prepared) record(ctx context.Context, err error) {
	switch {
	case err == nil:
		p.health.succeeded(p.entry.Info.Name)
	case ctx.Err() != nil, errors.Is(err, errdefs.ErrInvalidRequest) && !errors.Is(err, sdk.ErrBadLaunchPlan):
	default:
		p.health.failed(p.entry.Info.Name, p.entry.Info.Fallback, err)
	}
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
