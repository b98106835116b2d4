package sdk

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/kcand/kcand/cuda"
	"github.com/kcand/kcand/sdk/device"
	"github.com/kcand/kcand/sdk/errdefs"
	"github.com/kcand/kcand/sdk/family"
)

// Limits on what a host may ask of a plugin in one call.
const (
	maxBenchmarkIterations = 100000
	maxBenchmarkWarmup     = 10000
)

// Runtime serves candidates as a Plugin: it validates requests, opens the
// host's buffers by handle, and tracks prepared candidates. sdk.Serve wraps
// it in a process; tests and the host may also use it in-process.
type Runtime struct {
	name, version string
	candidates    map[string]Candidate
	order         []string
	logger        hclog.Logger
	devices       *deviceSet

	mu       sync.Mutex
	prepared map[string]*preparedEntry
	nextID   atomic.Uint64
	// nonce makes prepared ids unique across processes: an id from a
	// process that died never names state in its successor.
	nonce string
	// closing ends the doorbell channels; channels counts those still
	// serving, which Close waits for before it closes the devices their
	// pages are mapped on.
	closing  atomic.Bool
	channels sync.WaitGroup
	// onContextLost runs when a CUDA call fails with a sticky error (see
	// ExitOnContextLoss).
	onContextLost func(error)
	// lost is set by the first sticky CUDA error.
	lost atomic.Bool
}

// ExitOnContextLoss makes the process exit shortly after a candidate's
// kernel faults on the GPU (an illegal address, say): the process's CUDA
// context is unusable from then on, and only a new process recovers, which
// the host starts. The failing call still gets its error first. Serve sets it.
func (r *Runtime) ExitOnContextLoss() {
	r.onContextLost = func(err error) {
		r.logger.Error("CUDA context lost; exiting so the host starts a fresh process", "error", err)
		go func() {
			time.Sleep(100 * time.Millisecond)
			os.Exit(4)
		}()
	}
}

// checkContext reacts to a sticky CUDA error in err: the first one marks
// the process's context lost (and runs onContextLost); the error is
// returned as errdefs.ErrDeviceLost so the host restarts the process.
func (r *Runtime) checkContext(err error) error {
	if err == nil || !cuda.IsContextLost(err) {
		return err
	}
	if r.lost.CompareAndSwap(false, true) && r.onContextLost != nil {
		r.onContextLost(err)
	}
	return fmt.Errorf("%w: %w", errdefs.ErrDeviceLost, err)
}

// deviceLost fails a call that would touch the device once the context is
// lost: the process is about to exit, and nothing it runs can succeed. The
// call did not run, so it is ErrUnavailable: the host retries it in the
// fresh process (ErrDeviceLost is for the call that hit the fault).
func (r *Runtime) deviceLost() error {
	if r.lost.Load() {
		return fmt.Errorf("%w: plugin %s lost its CUDA context and is exiting", ErrUnavailable, r.name)
	}
	return nil
}

type preparedEntry struct {
	candidate Candidate
	request   Request
	prepared  Prepared
	dev       device.Device
}

var _ Plugin = (*Runtime)(nil)

// NewRuntime returns a Runtime serving candidates under the plugin's name
// and version. Candidate names must be unique.
func NewRuntime(name, version string, logger hclog.Logger, candidates ...Candidate) (*Runtime, error) {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	r := &Runtime{
		name:       name,
		version:    version,
		candidates: map[string]Candidate{},
		logger:     logger,
		devices:    newDeviceSet(),
		prepared:   map[string]*preparedEntry{},
		nonce:      randomNonce(),
	}
	for _, c := range candidates {
		info := c.Info()
		if info.Name == "" {
			return nil, errdefs.Invalid("candidate.name", "", "empty")
		}
		if _, dup := r.candidates[info.Name]; dup {
			return nil, errdefs.Invalid("candidate.name", info.Name, "duplicate")
		}
		r.candidates[info.Name] = c
		r.order = append(r.order, info.Name)
	}
	return r, nil
}

// WarmDevice opens the device of kind in the background when one of the
// runtime's candidates runs on it (a plugin without such candidates never
// starts that device); Serve calls it with the host's EnvWarmDevice. The
// channel closes when the attempt is over; it is nil when none started.
func (r *Runtime) WarmDevice(kind device.Kind) <-chan struct{} {
	for _, name := range r.order {
		if runsOn(r.candidates[name].Info(), kind) {
			return r.devices.warm(kind, r.logger)
		}
	}
	return nil
}

// Describe implements Plugin.
func (r *Runtime) Describe(context.Context) (Description, error) {
	d := Description{Name: r.name, Version: r.version, ProtocolVersion: ProtocolVersion}
	families := map[Family]bool{}
	for _, name := range r.order {
		info := r.candidates[name].Info()
		d.Candidates = append(d.Candidates, info)
		if !families[info.Family] {
			families[info.Family] = true
			d.Families = append(d.Families, info.Family)
		}
	}
	sort.Slice(d.Families, func(i, j int) bool { return d.Families[i] < d.Families[j] })
	return d, nil
}

// Admit implements Plugin.
func (r *Runtime) Admit(_ context.Context, req Request, hw device.Profile) (out []Admission, err error) {
	defer r.recoverInto("admit", &err)
	if err := validate(req); err != nil {
		return nil, err
	}
	for _, name := range r.order {
		out = append(out, r.admit(r.candidates[name], req, hw))
	}
	return out, nil
}

func (r *Runtime) admit(c Candidate, req Request, hw device.Profile) Admission {
	info := c.Info()
	switch {
	case info.Family != req.Family:
		return Admission{Candidate: info.Name, Reason: fmt.Sprintf("serves family %s, not %s", info.Family, req.Family)}
	case !runsOn(info, hw.Kind):
		return Admission{Candidate: info.Name, Reason: fmt.Sprintf("does not run on %s devices", hw.Kind)}
	}
	a := c.Admit(req, hw)
	a.Candidate = info.Name
	if !a.Admitted && a.Reason == "" {
		a.Reason = "refused without a reason"
	}
	return a
}

// validate checks req generically and, when the SDK has its family's
// contract, completely: a malformed request is an invalid request, never
// merely unsupported.
func validate(req Request) error {
	if err := req.Validate(); err != nil {
		return err
	}
	if c, err := family.Lookup(req.Family); err == nil {
		return c.Validate(req)
	}
	return nil
}

func runsOn(info CandidateInfo, kind device.Kind) bool {
	for _, k := range info.Devices {
		if k == kind {
			return true
		}
	}
	return false
}

// Prepare implements Plugin.
func (r *Runtime) Prepare(ctx context.Context, req PrepareRequest) (info PreparedInfo, err error) {
	defer r.recoverInto("prepare", &err)
	if err := r.deviceLost(); err != nil {
		return PreparedInfo{}, err
	}
	c, ok := r.candidates[req.Candidate]
	if !ok {
		return PreparedInfo{}, fmt.Errorf("%w: candidate %q in plugin %s", errdefs.ErrNotFound, req.Candidate, r.name)
	}
	if err := validate(req.Request); err != nil {
		return PreparedInfo{}, err
	}
	if a := r.admit(c, req.Request, req.Hardware); !a.Admitted {
		return PreparedInfo{}, errdefs.Unsupported("%s refuses %s: %s", req.Candidate, req.Request.Key(), a.Reason)
	}
	dev, weights, err := r.devices.openAll(req.Hardware.Kind, req.Weights)
	if err != nil {
		return PreparedInfo{}, r.checkContext(err)
	}
	p, err := c.Prepare(ctx, Env{Device: dev, Logger: r.logger.Named(req.Candidate)}, req.Request, weights)
	if err != nil {
		return PreparedInfo{}, r.checkContext(err)
	}
	info = PreparedInfo{WorkspaceBytes: p.WorkspaceBytes()}
	if exp, ok := p.(Exporter); ok {
		plan, err := exp.Export()
		if err != nil {
			_ = p.Release()
			return PreparedInfo{}, r.checkContext(err)
		}
		info.Launch = withoutKnownImages(plan, req.KnownModules)
	}
	info.ID = fmt.Sprintf("%s#%s-%d", req.Candidate, r.nonce, r.nextID.Add(1))
	r.mu.Lock()
	r.prepared[info.ID] = &preparedEntry{candidate: c, request: req.Request, prepared: p, dev: dev}
	r.mu.Unlock()
	return info, nil
}

func (r *Runtime) lookup(id string) (*preparedEntry, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.prepared[id]
	if !ok {
		return nil, fmt.Errorf("%w: prepared id %q", errdefs.ErrNotFound, id)
	}
	return e, nil
}

// withoutKnownImages names every module by its hash and drops the images
// the host already has.
func withoutKnownImages(plan LaunchPlan, known []string) *LaunchPlan {
	have := map[string]bool{}
	for _, h := range known {
		have[h] = true
	}
	out := &LaunchPlan{Launches: plan.Launches}
	for _, m := range plan.Modules {
		if m.Hash == "" {
			m = NewModule(m.Kind, m.Image)
		}
		if have[m.Hash] {
			m.Image = nil
		}
		out.Modules = append(out.Modules, m)
	}
	return out
}

// Execute implements Plugin.
func (r *Runtime) Execute(ctx context.Context, req ExecuteRequest) (us float64, err error) {
	defer r.recoverInto("execute", &err)
	if err := r.deviceLost(); err != nil {
		return 0, err
	}
	e, err := r.lookup(req.PreparedID)
	if err != nil {
		return 0, err
	}
	io, err := r.devices.open(e.dev, req.Buffers)
	if err != nil {
		return 0, r.checkContext(err)
	}
	start := time.Now()
	if err := e.prepared.Execute(ctx, io); err != nil {
		return 0, r.checkContext(err)
	}
	if err := e.dev.Synchronize(); err != nil {
		return 0, r.checkContext(err)
	}
	return micros(time.Since(start)), nil
}

// Benchmark implements Plugin. It times each iteration with the device's
// timer when it has one, else with the wall clock around a synchronised run.
func (r *Runtime) Benchmark(ctx context.Context, req BenchmarkRequest) (res BenchmarkResult, err error) {
	defer r.recoverInto("benchmark", &err)
	if req.Iterations <= 0 || req.Iterations > maxBenchmarkIterations {
		return res, errdefs.Invalid("iterations", req.Iterations, "must be between 1 and %d", maxBenchmarkIterations)
	}
	if req.Warmup < 0 || req.Warmup > maxBenchmarkWarmup {
		return res, errdefs.Invalid("warmup", req.Warmup, "must be between 0 and %d", maxBenchmarkWarmup)
	}
	if err := r.deviceLost(); err != nil {
		return res, err
	}
	e, err := r.lookup(req.PreparedID)
	if err != nil {
		return res, err
	}
	io, err := r.devices.open(e.dev, req.Buffers)
	if err != nil {
		return res, r.checkContext(err)
	}
	start := time.Now()
	for i := 0; i < req.Warmup; i++ {
		if err := e.prepared.Execute(ctx, io); err != nil {
			return res, r.checkContext(err)
		}
	}
	timer := device.NewTimer(e.dev)
	res.IterationMicros = make([]float64, 0, req.Iterations)
	for i := 0; i < req.Iterations; i++ {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		us, err := timer.Time(func() error { return e.prepared.Execute(ctx, io) })
		if err != nil {
			return res, r.checkContext(err)
		}
		res.IterationMicros = append(res.IterationMicros, us)
	}
	res.WallMicros = micros(time.Since(start))
	return res, nil
}

// Release implements Plugin. The mappings in forget are dropped even when
// id is unknown or its release fails: the host frees those buffers next.
func (r *Runtime) Release(_ context.Context, id string, forget []device.Handle) (err error) {
	defer r.recoverInto("release", &err)
	var released error
	if id != "" {
		r.mu.Lock()
		e, ok := r.prepared[id]
		delete(r.prepared, id)
		r.mu.Unlock()
		if ok {
			released = e.prepared.Release()
		} else {
			released = fmt.Errorf("%w: prepared id %q", errdefs.ErrNotFound, id)
		}
	}
	return errors.Join(released, r.devices.forget(forget))
}

// channelDrain bounds how long Close waits for the doorbell channels to end.
const channelDrain = time.Second

// Close ends the doorbell channels, releases every prepared candidate and
// closes the devices.
func (r *Runtime) Close() error {
	r.mu.Lock()
	r.closing.Store(true)
	r.mu.Unlock()
	// A channel notices within a few milliseconds; one busy with a call
	// ends after it, and Close waits at most channelDrain for that.
	drained := make(chan struct{})
	go func() {
		r.channels.Wait()
		close(drained)
	}()
	select {
	case <-drained:
	case <-time.After(channelDrain):
		r.logger.Warn("doorbell channels still serving at close", "waited", channelDrain)
	}
	r.mu.Lock()
	entries := r.prepared
	r.prepared = map[string]*preparedEntry{}
	r.mu.Unlock()
	for _, e := range entries {
		_ = e.prepared.Release()
	}
	return r.devices.close()
}

// recoverInto turns a panic in candidate code into an internal error, so a
// bug in one candidate answers one call with an error instead of killing
// the plugin and every prepared state in it.
func (r *Runtime) recoverInto(op string, err *error) {
	if p := recover(); p != nil {
		r.logger.Error("candidate panicked", "op", op, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
		*err = errdefs.Internal("%s panicked: %v", op, p)
	}
}

func randomNonce() string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		return fmt.Sprintf("%x", time.Now().UnixNano())
	}
	return hex.EncodeToString(b[:])
}

func micros(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
