package host

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/kcand/kcand/sdk"
	"github.com/kcand/kcand/sdk/device"
	"github.com/kcand/kcand/sdk/family"
)

// Verdict is what measurement concluded about one candidate.
type Verdict string

// The verdicts.
const (
	VerdictChosen   Verdict = "chosen"
	VerdictKept     Verdict = "kept"
	VerdictSlower   Verdict = "slower"
	VerdictTooClose Verdict = "not faster by enough"
	VerdictRejected Verdict = "rejected"
	VerdictRefused  Verdict = "refused"
	VerdictFailed   Verdict = "failed"
	// VerdictChecked: passed the numeric gate and was not timed (a token
	// count checked for the plan its bucket shares; see verify).
	VerdictChecked Verdict = "checked"
)

// Measurement is one candidate's result in a tuning run.
type Measurement struct {
	Candidate string
	Plugin    string
	Fallback  bool
	Verdict   Verdict
	// Reason explains the verdict (admission reason, gate failure, error).
	Reason string
	// Timing is what a call costs the host (used to decide); Device is the
	// plugin's own measurement of the device time, a cross-check.
	Timing Timing
	Device Timing
}

// Decision is the outcome of measuring every candidate of a request.
type Decision struct {
	Request      sdk.Request
	Choice       string
	Reason       string
	Measurements []Measurement
	// Timing is the chosen candidate's.
	Timing Timing
	// Cost is the wall-clock time the measurement took, and Phases how it
	// divides: samples (making and copying inputs), numbers (preparing and
	// checking every candidate on both samples), timing.
	Cost   time.Duration
	Phases []Phase
}

// Phase is one part of a measurement's cost.
type Phase struct {
	Name     string
	Duration time.Duration
}

// PhaseSummary renders the phases as "samples 12 ms, numbers 30 ms, ...".
func (d *Decision) PhaseSummary() string {
	parts := make([]string, 0, len(d.Phases))
	for _, p := range d.Phases {
		parts = append(parts, fmt.Sprintf("%s %.0f ms", p.Name, float64(p.Duration.Microseconds())/1e3))
	}
	return strings.Join(parts, ", ")
}

// MeasureOptions tune the measurement.
type MeasureOptions struct {
	// TargetMicros is the device time to spend timing each candidate (default 5 ms).
	TargetMicros float64
	// MinIterations and MaxIterations bound the timed iterations (defaults 5, 2000).
	MinIterations, MaxIterations int
	// Seed draws the random sample inputs.
	Seed uint64
	// SpotCheckElements bounds the fallback's float64 reference check
	// (default 256, spread over rows and tokens; every other candidate is
	// compared with the fallback on every element).
	SpotCheckElements int
	// KeepSampleBytes bounds the device memory in which sample weights are
	// kept from one measurement to the next, so that a layer measured at
	// another token count makes only its inputs (default
	// DefaultKeepSampleBytes; negative: keep none).
	KeepSampleBytes int64
}

func (o *MeasureOptions) defaults() {
	if o.TargetMicros <= 0 {
		o.TargetMicros = 5000
	}
	if o.MinIterations <= 0 {
		o.MinIterations = 5
	}
	if o.MaxIterations <= 0 {
		o.MaxIterations = 2000
	}
	if o.Seed == 0 {
		o.Seed = 0x5eed
	}
	if o.SpotCheckElements <= 0 {
		o.SpotCheckElements = 256
	}
	if o.KeepSampleBytes == 0 {
		o.KeepSampleBytes = DefaultKeepSampleBytes
	}
}

// measurer runs candidates on sample inputs through the real protocol.
type measurer struct {
	env      *execEnv
	dev      device.Device
	hw       sdk.Hardware
	registry *Registry
	logger   hclog.Logger
	opts     MeasureOptions
	policy   Policy
	launcher launcher
	health   *quarantine
	// work counts device operations issued (allocations, executions,
	// benchmarks): a cache hit must leave it unchanged.
	work atomic.Int64
	// busy serialises measurements on the device: two tunings timed at once
	// would time each other's kernels. It also guards kept.
	busy sync.Mutex
	// kept are the sample weights of the layers measured last, on the
	// device (with their bytes on the host).
	kept keptSamples
}

// run is one candidate's progress through a measurement.
type run struct {
	entry Entry
	m     *Measurement
	prep  *prepared
	// exp is the candidate's launch plan loaded into the host's context,
	// when it exports one and the device can launch it.
	exp exported
	// firstMicros is the host-observed time of its latest correct check
	// run (one per sample), from the call until the device has finished
	// it: the timing's iterations are sized from it.
	firstMicros float64
}

// sampleBuffers hold one request's weights, inputs and outputs.
type sampleBuffers struct {
	weights, inputs, outputs *bufferSet
}

// allocateSample makes a measurement's own weights, inputs and outputs
// (counted as device work).
func (ms *measurer) allocateSample(c family.Contract, req sdk.Request) (*sampleBuffers, error) {
	ms.work.Add(3)
	return allocateSample(ms.dev, c, req)
}

// allocateSample makes req's weights, inputs and outputs on dev; on failure
// it frees what it made.
func allocateSample(dev device.Device, c family.Contract, req sdk.Request) (*sampleBuffers, error) {
	var s sampleBuffers
	var err error
	if s.weights, err = allocate(dev, c.WeightSizes(req)); err != nil {
		return nil, err
	}
	if s.inputs, err = allocate(dev, c.InputSizes(req)); err != nil {
		s.free()
		return nil, err
	}
	if s.outputs, err = allocate(dev, c.OutputSizes(req)); err != nil {
		s.free()
		return nil, err
	}
	return &s, nil
}

// ioBuffers maps every input and output binding to its buffer.
func (s *sampleBuffers) ioBuffers() map[string]device.Buffer {
	out := map[string]device.Buffer{}
	for _, set := range []*bufferSet{s.inputs, s.outputs} {
		for k, v := range set.bufs {
			out[k] = v
		}
	}
	return out
}

// ioHandles exports the inputs and outputs.
func (s *sampleBuffers) ioHandles() (map[string]device.Handle, error) {
	in, err := s.inputs.handles()
	if err != nil {
		return nil, err
	}
	out, err := s.outputs.handles()
	if err != nil {
		return nil, err
	}
	return merge(in, out), nil
}

func (s *sampleBuffers) free() {
	for _, b := range []*bufferSet{s.weights, s.inputs, s.outputs} {
		if b != nil {
			b.free()
		}
	}
}

// measure checks every admitted candidate's numbers against the fallback
// on a pattern and a random sample, times the survivors, and decides.
//
// Measurements take turns on the device; budget (0: none) bounds the time
// from this measurement's turn, not the wait for it.
func (ms *measurer) measure(ctx context.Context, req sdk.Request, budget time.Duration) (*Decision, error) {
	return ms.examine(ctx, req, budget, "")
}

// verify runs the numeric gate, and no timing, on the fallback and one
// candidate at req. A token count that shares its bucket's plan must pass
// the gate at its own count before it is served: the count decides a
// kernel's partial tiles, which the bucket's largest count may never use.
// The decision's Choice is candidate when it passed, else the fallback.
func (ms *measurer) verify(ctx context.Context, req sdk.Request, candidate string, budget time.Duration) (*Decision, error) {
	return ms.examine(ctx, req, budget, candidate)
}

// examine measures req: every admitted candidate, checked then timed, or
// with only set, the fallback and that candidate, checked and not timed.
func (ms *measurer) examine(ctx context.Context, req sdk.Request, budget time.Duration, only string) (*Decision, error) {
	contract, err := family.Lookup(req.Family)
	if err != nil {
		return nil, err
	}
	if err := contract.Validate(req); err != nil {
		return nil, err
	}
	if _, err := ms.registry.Fallback(req.Family); err != nil {
		return nil, err
	}
	d, runs, err := ms.admit(ctx, req)
	if err != nil {
		return nil, err
	}
	if only != "" {
		d, runs = onlyWithFallback(d, runs, only)
	}
	ms.busy.Lock()
	defer ms.busy.Unlock()
	start := time.Now()
	if budget > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, budget)
		defer cancel()
	}
	mark := start
	phase := func(name string) {
		now := time.Now()
		d.Phases = append(d.Phases, Phase{name, now.Sub(mark)})
		mark = now
	}
	bufs, err := ms.allocateSample(contract, req)
	if err != nil {
		return nil, err
	}
	defer func() {
		cleanup := context.WithoutCancel(ctx) // a spent budget must leave no state or mapping behind
		for _, r := range runs {
			r.release(cleanup)
		}
		if err := forgetThenFree(cleanup, pluginsOf(runs), bufs.weights, bufs.inputs, bufs.outputs); err != nil {
			ms.logger.Warn("sample buffers not forgotten or freed", "request", req.Key(), "error", err)
		}
	}()
	phase("allocate")
	if err := ms.checkNumbers(ctx, contract, req, bufs, runs, phase); err != nil {
		return nil, err
	}
	if only != "" {
		checked(d, runs, only)
		d.Cost = time.Since(start)
		return d, nil
	}
	io, err := bufs.ioHandles()
	if err != nil {
		return nil, err
	}
	var minBytes int64
	for _, sizes := range []map[string]int64{contract.WeightSizes(req), contract.InputSizes(req), contract.OutputSizes(req)} {
		for _, n := range sizes {
			minBytes += n
		}
	}
	ms.time(ctx, bufs, io, runs, minBytes)
	phase("timing")
	ms.decide(d, runs)
	d.Cost = time.Since(start)
	return d, nil
}

// admit lists the family's candidates with their admission; the fallback
// comes first and must be admitted.
func (ms *measurer) admit(ctx context.Context, req sdk.Request) (*Decision, []*run, error) {
	admissions := ms.registry.Admissions(ctx, req, ms.hw)
	entries := ms.registry.Family(req.Family)
	d := &Decision{Request: req, Measurements: make([]Measurement, len(entries))}
	var runs []*run
	for i, e := range entries {
		a := admissions[e.Info.Name]
		if ok, why := ms.policy.admits(e.Info); a.Admitted && !ok {
			a.Admitted, a.Reason = false, why
		}
		if no, why := ms.health.refuses(e.Info.Name); a.Admitted && no {
			a.Admitted, a.Reason = false, why
		}
		d.Measurements[i] = Measurement{Candidate: e.Info.Name, Plugin: e.Plugin.Name(), Fallback: e.Info.Fallback, Reason: a.Reason}
		if !a.Admitted {
			if e.Info.Fallback {
				return nil, nil, fmt.Errorf("fallback %s refuses %s: %s", e.Info.Name, req.Key(), a.Reason)
			}
			d.Measurements[i].Verdict = VerdictRefused
			continue
		}
		runs = append(runs, &run{entry: e, m: &d.Measurements[i]})
	}
	return d, runs, nil
}

// checkNumbers runs every candidate on a pattern sample and then a random
// sample, poisoning the outputs before each run. The fallback must match
// the float64 reference; every other candidate must match the fallback
// within the family's gate. Survivors stay prepared on the random sample.
func (ms *measurer) checkNumbers(ctx context.Context, c family.Contract, req sdk.Request, bufs *sampleBuffers, runs []*run, phase func(string)) error {
	set, err := ms.samples(c, req)
	if err != nil {
		return err
	}
	defer set.end()
	if set.kept != nil {
		phase("samples (weights kept)")
	} else {
		phase("samples")
	}
	for i := range set.samples {
		name := sampleNames[i]
		if set.pending(i) {
			set.sample(i)
			phase("wait for the " + name + " sample")
		}
		sample := set.sample(i)
		if err := ms.load(set, i, bufs.weights); err != nil {
			return err
		}
		if err := bufs.inputs.write(sample.Inputs); err != nil {
			return err
		}
		set.startRandom() // made while this sample is checked
		weights, err := bufs.weights.handles()
		if err != nil {
			return err
		}
		io, err := bufs.ioHandles()
		if err != nil {
			return err
		}
		phase("copy " + name)
		var reference map[string][]byte
		for _, r := range runs {
			if r.m.Verdict != "" {
				continue
			}
			r.release(ctx) // weights changed: prepare again (plugins may repack them)
			got, us, err := ms.runOnce(ctx, r, req, bufs, weights, io)
			switch {
			case err != nil:
				r.m.Verdict, r.m.Reason = VerdictFailed, fmt.Sprintf("%s sample: %v", name, err)
			case r.entry.Info.Fallback:
				if err := c.SpotCheck(req, sample, got, ms.opts.SpotCheckElements); err != nil {
					r.m.Verdict, r.m.Reason = VerdictRejected, fmt.Sprintf("%s sample vs float64 reference: %v", name, err)
				}
				reference = got
			default:
				if err := c.Compare(req, got, reference); err != nil {
					r.m.Verdict, r.m.Reason = VerdictRejected, fmt.Sprintf("%s sample vs fallback: %v", name, err)
				}
			}
			if r.m.Verdict != "" {
				ms.logger.Warn("candidate rejected", "request", req.Key(), "candidate", r.entry.Info.Name, "verdict", r.m.Verdict, "reason", r.m.Reason)
				r.release(ctx)
				if r.entry.Info.Fallback {
					return fmt.Errorf("fallback %s of %s is unusable: %s", r.entry.Info.Name, req.Key(), r.m.Reason)
				}
				continue
			}
			r.firstMicros = us
		}
		phase("check " + name)
	}
	return nil
}

// runOnce prepares r if needed, poisons the outputs, executes once and
// reads the outputs back.
func (ms *measurer) runOnce(ctx context.Context, r *run, req sdk.Request, bufs *sampleBuffers, weights, io map[string]device.Handle) (map[string][]byte, float64, error) {
	if r.prep == nil {
		p, err := prepare(ctx, ms.env, r.entry, req, weights)
		if err != nil {
			return nil, 0, err
		}
		r.prep = p
		if launch := p.launchPlan(); launch != nil && ms.launcher != nil {
			if r.exp, err = ms.launcher.load(launch, p.bindingsWithWeights(bufs.weights.bufs), p.ioSizes); err != nil {
				return nil, 0, fmt.Errorf("candidate %s dropped: %w", r.entry.Info.Name, err)
			}
		}
	}
	outputs := bufs.outputs
	if err := outputs.fill(0xff); err != nil { // bf16/f32 NaN: unwritten elements fail the gate
		return nil, 0, err
	}
	ms.work.Add(1)
	start := time.Now()
	if r.exp != nil {
		if err := r.exp.run(nil, bufs.ioBuffers()); err != nil {
			return nil, 0, err
		}
	} else if _, err := r.prep.execute(ctx, nil, io); err != nil {
		return nil, 0, err
	}
	if err := ms.dev.Synchronize(); err != nil {
		return nil, 0, err
	}
	// Until the work has completed: an exported run returns once its
	// launches are queued, and timing sized from that alone spent more
	// than TargetMicros of device time on every kernel slower than the
	// launch itself.
	us := float64(time.Since(start).Nanoseconds()) / 1e3
	got, err := outputs.read()
	return got, us, err
}

// time measures every surviving candidate as the engine will pay for it:
// a remote candidate by the host's wall clock around each call (the round
// trip to the plugin included, never hidden), with the plugin's own device
// time taken as a cross-check. Iterations are sized from the first run so
// each candidate gets about TargetMicros (larger requests, with more
// tokens, run fewer). An impossible report fails the candidate.
func (ms *measurer) time(ctx context.Context, bufs *sampleBuffers, io map[string]device.Handle, runs []*run, minBytes int64) {
	var rotation *rotation
	for _, r := range runs {
		if r.m.Verdict != "" {
			continue
		}
		iterations := ms.opts.MaxIterations
		if r.firstMicros > 0 {
			iterations = int(ms.opts.TargetMicros / r.firstMicros)
		}
		iterations = min(max(iterations, ms.opts.MinIterations), ms.opts.MaxIterations)
		var host, device Timing
		var err error
		if r.exp != nil {
			if rotation == nil {
				rotation, err = ms.newRotation(bufs)
				if err != nil {
					r.m.Verdict, r.m.Reason = VerdictFailed, "timing: "+err.Error()
					continue
				}
				defer rotation.free()
			}
			host, err = ms.timeExported(r, rotation, iterations)
			device = host
		} else {
			host, device, err = ms.timeRemote(ctx, r, io, iterations)
		}
		if err == nil {
			err = checkPlausible(host, minBytes)
		}
		if err != nil {
			r.m.Verdict, r.m.Reason = VerdictFailed, "timing: "+err.Error()
			ms.logger.Warn("candidate failed timing", "candidate", r.entry.Info.Name, "error", err)
			continue
		}
		r.m.Timing, r.m.Device = host, device
	}
}

// crossCheckIterations is how many iterations the plugin's own benchmark runs.
const crossCheckIterations = 10

// timeRemote times calls through the plugin, then has the plugin time
// itself (checked for consistency by checkBenchmark).
func (ms *measurer) timeRemote(ctx context.Context, r *run, io map[string]device.Handle, iterations int) (Timing, Timing, error) {
	call := func() error {
		ms.work.Add(1)
		if _, err := r.prep.execute(ctx, nil, io); err != nil {
			return err
		}
		return ms.dev.Synchronize() // a GPU channel returns before the work completes
	}
	for i := 0; i < max(2, iterations/10); i++ {
		if err := call(); err != nil {
			return Timing{}, Timing{}, err
		}
	}
	samples := make([]float64, 0, iterations)
	for i := 0; i < iterations; i++ {
		start := time.Now()
		if err := call(); err != nil {
			return Timing{}, Timing{}, err
		}
		samples = append(samples, float64(time.Since(start).Nanoseconds())/1e3)
	}
	host := summarize(samples)
	n := min(iterations, crossCheckIterations)
	ms.work.Add(1)
	res, err := r.prep.benchmark(ctx, io, 1, n)
	if err != nil {
		return Timing{}, Timing{}, err
	}
	if err := checkBenchmark(res, n); err != nil {
		return Timing{}, Timing{}, err
	}
	// The plugin's own timing is reported beside the host's, not compared
	// with it: the two are taken at different moments on a shared machine.
	// Decisions use the host's.
	return host, summarize(res.IterationMicros), nil
}

// minPlausibleMicros is the least time any execution can take: no device
// launches, runs and completes work in less.
const minPlausibleMicros = 0.1

// checkBenchmark refuses results that cannot be true: the wrong number of
// samples, non-positive times, or more device time than wall-clock time.
func checkBenchmark(res sdk.BenchmarkResult, iterations int) error {
	if len(res.IterationMicros) != iterations {
		return fmt.Errorf("plugin returned %d samples for %d iterations", len(res.IterationMicros), iterations)
	}
	var total float64
	for _, us := range res.IterationMicros {
		if !(us >= minPlausibleMicros) || math.IsInf(us, 0) {
			return fmt.Errorf("plugin reported an iteration of %g µs, which is absurd", us)
		}
		total += us
	}
	if res.WallMicros > 0 && total > res.WallMicros*1.05 {
		return fmt.Errorf("plugin reported %.0f µs of device time within %.0f µs of wall-clock time", total, res.WallMicros)
	}
	return nil
}

// maxPlausibleBytesPerSecond bounds the bandwidth a timing may imply: no
// device moves 100 TB/s, so a faster claim is a lie or a broken timer.
const maxPlausibleBytesPerSecond = 100e12

// checkPlausible refuses a timing that would mean reading the request's
// weights and inputs faster than any device can.
func checkPlausible(t Timing, minBytes int64) error {
	if minBytes <= 0 || t.Mean <= 0 {
		return nil
	}
	if rate := float64(minBytes) / (t.Mean * 1e-6); rate > maxPlausibleBytesPerSecond {
		return fmt.Errorf("%.3f µs for %d bytes implies %.0f TB/s, which no device reaches", t.Mean, minBytes, rate/1e12)
	}
	return nil
}

// onlyWithFallback narrows a measurement to the fallback (runs[0]) and
// the named candidate.
func onlyWithFallback(d *Decision, runs []*run, name string) (*Decision, []*run) {
	kept := runs[:1]
	for _, r := range runs[1:] {
		if r.entry.Info.Name == name {
			kept = append(kept, r)
		}
	}
	narrow := &Decision{Request: d.Request, Measurements: make([]Measurement, 0, len(kept)+1)}
	for _, r := range kept {
		narrow.Measurements = append(narrow.Measurements, *r.m)
	}
	for i, r := range kept { // after the appends: the slice no longer moves
		r.m = &narrow.Measurements[i]
	}
	if len(kept) == 1 && name != runs[0].entry.Info.Name {
		narrow.Measurements = append(narrow.Measurements, Measurement{Candidate: name, Verdict: VerdictRefused, Reason: "not admitted for this request"})
	}
	return narrow, kept
}

// checked concludes a verify: the candidate when it passed the gate, else
// the fallback.
func checked(d *Decision, runs []*run, name string) {
	d.Choice, d.Reason = runs[0].entry.Info.Name, name+" was not admitted"
	for _, r := range runs {
		if r.m.Verdict == "" {
			r.m.Verdict = VerdictChecked
		}
		if r.entry.Info.Name == name {
			if r.m.Verdict == VerdictChecked {
				d.Choice, d.Reason = name, "passes the numeric gate at tokens="+fmt.Sprint(d.Request.Tokens)
			} else {
				d.Reason = fmt.Sprintf("%s %s: %s", name, r.m.Verdict, r.m.Reason)
			}
		}
	}
}

// decide picks the fastest survivor and keeps the fallback unless that
// survivor beats it by MinimumImprovementBps and by more than the spread
// of both timings.
func (ms *measurer) decide(d *Decision, runs []*run) {
	fb := runs[0]
	if fb.m.Verdict != "" {
		d.Choice, d.Reason = fb.entry.Info.Name, "fallback could not be timed: "+fb.m.Reason
		return
	}
	best := fb
	for _, r := range runs[1:] {
		if r.m.Verdict == "" && r.m.Timing.Mean < best.m.Timing.Mean {
			best = r
		}
	}
	for _, r := range runs[1:] {
		if r.m.Verdict == "" && r != best {
			r.m.Verdict = VerdictSlower
		}
	}
	gain := improvementBps(fb.m.Timing, best.m.Timing)
	margin := fb.m.Timing.Mean - best.m.Timing.Mean
	spread := max(fb.m.Timing.Spread, best.m.Timing.Spread)
	switch {
	case best == fb:
		fb.m.Verdict = VerdictChosen
		d.Reason = "fallback is the fastest"
	case gain < ms.policy.MinimumImprovementBps:
		best.m.Verdict, fb.m.Verdict = VerdictTooClose, VerdictKept
		d.Reason = fmt.Sprintf("%s is only %.0f bps faster (need %.0f)", best.entry.Info.Name, gain, ms.policy.MinimumImprovementBps)
		best = fb
	case margin <= spread:
		best.m.Verdict, fb.m.Verdict = VerdictTooClose, VerdictKept
		d.Reason = fmt.Sprintf("%s is %.1f µs faster, within the measured spread of %.1f µs", best.entry.Info.Name, margin, spread)
		best = fb
	default:
		best.m.Verdict, fb.m.Verdict = VerdictChosen, VerdictSlower
		d.Reason = fmt.Sprintf("%s is %.0f bps faster than fallback %s (%.1f vs %.1f µs, spread %.1f)", best.entry.Info.Name, gain, fb.entry.Info.Name, best.m.Timing.Mean, fb.m.Timing.Mean, spread)
	}
	d.Choice, d.Timing = best.entry.Info.Name, best.m.Timing
}

func (r *run) release(ctx context.Context) {
	if r.exp != nil {
		_ = r.exp.close()
		r.exp = nil
	}
	if r.prep != nil {
		if err := r.prep.release(ctx); err != nil { // a stale id is no error: its process took the state with it
			r.prep.entry.Plugin.logger.Debug("release failed", "error", err)
		}
		r.prep = nil
	}
}
