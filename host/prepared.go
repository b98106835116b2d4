package host

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
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

// execEnv is what preparing and running candidates needs from the host.
type execEnv struct {
	dev device.Device
	hw  sdk.Hardware
	// launcher loads exported launch plans; nil on devices without kernels.
	launcher launcher
	// health counts candidates' failures toward quarantine.
	health *quarantine
	// channels opens doorbell channels to plugins; nil disables them.
	channels *channelFactory
	// forceRemote makes Bind ignore exported launch plans.
	forceRemote bool
	// lent records the engine's buffers handed to plugins by remote runs.
	lent *lentBuffers
	// channelCalls and rpcCalls count remote executions by transport.
	channelCalls, rpcCalls atomic.Int64
}

// prepared is the host's side of a prepared candidate. It remembers what
// it was prepared from, so when the plugin restarts (and loses its state)
// the candidate is prepared again transparently.
type prepared struct {
	env     *execEnv
	entry   Entry
	req     sdk.Request
	weights map[string]device.Handle
	// ioSizes feeds launch-plan validation: the input and output binding
	// sizes of the request.
	ioSizes map[string]int64

	mu        sync.Mutex
	id        string
	workspace *bufferSet
	launch    *sdk.LaunchPlan
	// channel is the doorbell to the plugin process holding id; noChannel
	// records that the plugin cannot serve one.
	channel   *remoteChannel
	noChannel bool
}

func prepare(ctx context.Context, env *execEnv, e Entry, req sdk.Request, weights map[string]device.Handle) (*prepared, error) {
	c, err := family.Lookup(req.Family)
	if err != nil {
		return nil, err
	}
	p := &prepared{env: env, entry: e, req: req, weights: weights, ioSizes: mergeSizes(c.InputSizes(req), c.OutputSizes(req))}
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
	req := sdk.PrepareRequest{Candidate: p.entry.Info.Name, Request: p.req, Hardware: p.env.hw, Weights: p.weights}
	var known func(string) bool
	if l := p.env.launcher; l != nil {
		req.KnownModules, known = l.knownModules(), l.known
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
		if err := sdk.ValidateLaunchPlan(info.Launch, known, p.bindingSizes(info.WorkspaceBytes), p.env.hw.Limits); err != nil {
			_ = p.entry.Client.Release(ctx, info.ID, nil)
			return fmt.Errorf("candidate %s dropped: %w", p.entry.Info.Name, err)
		}
	}
	p.mu.Lock()
	var old *bufferSet
	defer func() {
		p.mu.Unlock()
		if old != nil { // a process may have mapped it: an earlier one, or this one before it lost the state
			_ = forgetThenFree(ctx, []*Plugin{p.entry.Plugin}, old)
		}
	}()
	p.id, p.launch = info.ID, info.Launch
	if info.WorkspaceBytes > 0 && (p.workspace == nil || p.workspace.bufs[sdk.BufferWorkspace].Size() < info.WorkspaceBytes) {
		old, p.workspace = p.workspace, nil
		ws, err := allocate(p.env.dev, map[string]int64{sdk.BufferWorkspace: info.WorkspaceBytes})
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

// execute runs the candidate on io after the work enqueued on stream (the
// device's stream when nil): over the doorbell channel when the plugin
// serves one, else by RPC after waiting for the stream.
func (p *prepared) execute(ctx context.Context, stream device.Stream, io map[string]device.Handle) (us float64, err error) {
	err = p.retry(ctx, func(id string, bound map[string]device.Handle) (err error) {
		if ch := p.openChannel(ctx); ch != nil {
			us, err = ch.execute(ctx, stream, rawPreparedID(id), bound)
			if !errors.Is(err, errChannelDown) {
				p.env.channelCalls.Add(1)
				return err
			}
			p.dropChannel(ch)
		}
		if err := syncStream(p.env.dev, stream); err != nil {
			return err
		}
		p.env.rpcCalls.Add(1)
		us, err = p.entry.Client.Execute(ctx, sdk.ExecuteRequest{PreparedID: id, Buffers: bound})
		return err
	}, io)
	p.record(ctx, err)
	return us, err
}

// openChannel returns a doorbell channel to the live plugin process,
// opening one when there is none for it yet.
func (p *prepared) openChannel(ctx context.Context) *remoteChannel {
	if p.env.channels == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.noChannel {
		return nil
	}
	if p.channel != nil && p.channel.gen == p.entry.Plugin.Generation() {
		return p.channel
	}
	if p.channel != nil {
		p.channel.close()
		p.channel = nil
	}
	ch, err := p.env.channels.openChannel(ctx, p.entry)
	if err != nil {
		if errors.Is(err, errdefs.ErrUnsupported) {
			p.noChannel = true // an older plugin: the RPC path serves
		}
		p.env.channels.logger.Debug("no doorbell channel; using RPC", "candidate", p.entry.Info.Name, "error", err)
		return nil
	}
	p.channel = ch
	return ch
}

func (p *prepared) dropChannel(ch *remoteChannel) {
	p.mu.Lock()
	if p.channel == ch {
		p.channel = nil
	}
	p.mu.Unlock()
	ch.close()
}

// syncStream waits for the work on stream (or, when nil, the device).
func syncStream(dev device.Device, stream device.Stream) error {
	if stream != nil {
		return stream.Synchronize()
	}
	return dev.Synchronize()
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
		p.env.health.succeeded(p.entry.Info.Name)
	case ctx.Err() != nil, errors.Is(err, errdefs.ErrInvalidRequest) && !errors.Is(err, sdk.ErrBadLaunchPlan):
	default:
		p.env.health.failed(p.entry.Info.Name, p.entry.Info.Fallback, err)
	}
}

func (p *prepared) release(ctx context.Context) error {
	p.mu.Lock()
	id, ws, ch := p.id, p.workspace, p.channel
	p.workspace, p.channel = nil, nil
	p.mu.Unlock()
	if ch != nil {
		ch.close()
	}
	// The process that holds the prepared state is the one that mapped the
	// workspace (if it ran remotely): it forgets both in one call.
	forget, _ := handleList(ws) // a workspace without a handle was never handed out
	err := p.entry.Client.Release(ctx, id, forget)
	if ws != nil {
		err = errors.Join(err, ws.free())
	}
	return err
}
