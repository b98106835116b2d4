package host

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/kcand/kcand/sdk"
	"github.com/kcand/kcand/sdk/family"
)

// Stats count what the planner did.
type Stats struct {
	// Tunings counts requests measured.
	Tunings int64
	// CacheHits counts plans served from the cache file.
	CacheHits int64
	// DeviceWork counts device operations the tuner issued: buffer
	// allocations and candidate executions and benchmarks.
	DeviceWork int64
	// ChannelCalls and RPCCalls count remote executions (tuning and
	// engine runs) by transport: the doorbell channel or a gRPC call.
	ChannelCalls, RPCCalls int64
	// Shared counts plans that took the measurement of their token
	// bucket's representative instead of one of their own.
	Shared int64
}

// planner turns requests into plans: policy, then cache, then one
// measurement per key, recording the result or abandoning the key.
type planner struct {
	owner    *Host
	registry *Registry
	measurer *measurer
	cache    *Cache
	policy   Policy
	logger   hclog.Logger
	hw       sdk.Hardware

	tunings, cacheHits, shares atomic.Int64

	mu     sync.Mutex
	plans  map[string]*Plan
	claims map[string]*claim
	failed map[string]string
	// spent is the tuning time of each phase so far: RunBudget bounds each
	// on its own, so an engine's many prefill counts never starve decode.
	spent map[sdk.Phase]time.Duration
}

// claim marks a key being tuned; done closes when the plan is decided.
type claim struct {
	done chan struct{}
	plan *Plan
	err  error
}

func newPlanner(r *Registry, m *measurer, c *Cache, p Policy, hw sdk.Hardware, logger hclog.Logger) *planner {
	return &planner{registry: r, measurer: m, cache: c, policy: p, hw: hw, logger: logger,
		plans: map[string]*Plan{}, claims: map[string]*claim{}, failed: map[string]string{}, spent: map[sdk.Phase]time.Duration{}}
}

// plan decides req. Exactly one goroutine measures a key; the others get
// the fallback at once, or wait when the policy says so.
func (pl *planner) plan(ctx context.Context, req sdk.Request) (*Plan, error) {
	if err := validateAny(req); err != nil {
		return nil, err
	}
	key := req.Key()
	pl.mu.Lock()
	if p, ok := pl.plans[key]; ok {
		pl.mu.Unlock()
		return p, nil
	}
	if c, ok := pl.claims[key]; ok {
		pl.mu.Unlock()
		if !pl.policy.WaitForTuning {
			p, err := pl.fallback(ctx, req, "being tuned by another caller; using the fallback meanwhile")
			if err == nil {
				p.host = pl.owner
			}
			return p, err
		}
		select {
		case <-c.done:
			return c.plan, c.err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	c := &claim{done: make(chan struct{})}
	pl.claims[key] = c
	pl.mu.Unlock()

	c.plan, c.err = pl.decide(ctx, req)
	if c.err == nil {
		c.plan.host = pl.owner
	}
	pl.mu.Lock()
	delete(pl.claims, key)
	if c.err == nil && !c.plan.transient {
		pl.plans[key] = c.plan // every decision holds for the rest of the run
	}
	pl.mu.Unlock()
	close(c.done)
	if c.err == nil {
		pl.trace(c.plan)
	}
	return c.plan, c.err
}

// decide runs the selection for one claimed key.
func (pl *planner) decide(ctx context.Context, req sdk.Request) (*Plan, error) {
	if cand, ok := pl.policy.Forced(req); ok {
		return pl.forced(ctx, req, cand)
	}
	if req.Family == sdk.FamilyDense && len(pl.registry.Family(sdk.FamilyDense)) == 0 {
		cand, source, reason := densePlan(req)
		return &Plan{Request: req, Candidate: cand, Source: source, Reason: reason}, nil
	}
	if p, ok := pl.cached(ctx, req); ok {
		return p, nil
	}
	if !pl.policy.WorthTuning(req) {
		return pl.fallback(ctx, req, fmt.Sprintf("the tuning policy does not cover %s tokens=%d", req.Phase, req.Tokens))
	}
	if rep, lo, hi, ok := pl.policy.representative(req); ok {
		return pl.planFromBucket(ctx, req, rep, lo, hi)
	}
	if why := pl.budgetLeft(req.Phase); why != "" {
		return pl.fallback(ctx, req, why)
	}
	return pl.tune(ctx, req)
}

// tune measures req within the per-key budget and records the result, or
// abandons the key and serves the fallback.
func (pl *planner) tune(ctx context.Context, req sdk.Request) (*Plan, error) {
	key := req.Key()
	pl.tunings.Add(1)
	start := time.Now()
	d, err := pl.measurer.measure(ctx, req, time.Duration(pl.policy.KeyBudget))
	pl.charge(req.Phase, time.Since(start))
	if err != nil {
		return pl.abandoned(ctx, req, err)
	}
	e, _ := pl.registry.Lookup(d.Choice)
	p := &Plan{Request: req, Candidate: d.Choice, Plugin: e.Plugin.Name(), Source: SourceMeasured,
		AverageMicros: d.Timing.Mean, SpreadMicros: d.Timing.Spread, Reason: d.Reason, Decision: d, entry: e}
	if err := pl.cache.Record(key, pl.entryFor(d)); err != nil {
		pl.logger.Warn("plan cache not written; keeping the plan in memory", "path", pl.cache.Path(), "error", err)
	}
	return p, nil
}

// abandoned serves the fallback for a request whose tuning failed with
// err, unless the caller gave up.
func (pl *planner) abandoned(ctx context.Context, req sdk.Request, err error) (*Plan, error) {
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return nil, err
	}
	reason := fmt.Sprintf("tuning abandoned: %v", err)
	if errors.Is(err, context.DeadlineExceeded) {
		reason = fmt.Sprintf("tuning abandoned: over the %s budget per request", time.Duration(pl.policy.KeyBudget))
	}
	key := req.Key()
	pl.logger.Warn("tuning abandoned", "request", key, "error", err)
	pl.mu.Lock()
	pl.failed[key] = reason
	pl.mu.Unlock()
	return pl.fallback(ctx, req, reason)
}

// entryFor turns a decision into a cache entry stamped with the builds of
// every plugin that took part.
func (pl *planner) entryFor(d *Decision) CacheEntry {
	e := CacheEntry{
		Candidate: d.Choice, AverageMicros: d.Timing.Mean, SpreadMicros: d.Timing.Spread,
		Iterations: d.Timing.Iterations, TuningMillis: float64(d.Cost.Microseconds()) / 1e3,
		Reason: d.Reason, When: time.Now().UTC().Truncate(time.Second), Plugins: map[string]PluginStamp{},
	}
	for _, m := range d.Measurements {
		if entry, ok := pl.registry.Lookup(m.Candidate); ok {
			e.Plugins[entry.Plugin.Name()] = stampOf(entry.Plugin)
		}
		if m.Candidate == d.Choice {
			e.Plugin = m.Plugin
		}
		if m.Fallback {
			e.FallbackMicros = m.Timing.Mean
		}
	}
	return e
}

// cached serves a cache entry whose candidate is still offered and admitted.
func (pl *planner) cached(ctx context.Context, req sdk.Request) (*Plan, bool) {
	key := req.Key()
	ce, ok := pl.cache.Lookup(key)
	if !ok {
		return nil, false
	}
	e, ok := pl.registry.Lookup(ce.Candidate)
	if ok {
		if a := pl.admission(ctx, req, e); !a.Admitted {
			ok = false
		}
	}
	if !ok {
		pl.logger.Warn("cached candidate no longer offered or admitted; tuning again", "request", key, "candidate", ce.Candidate)
		if err := pl.cache.Forget(key); err != nil {
			pl.logger.Warn("plan cache not written", "error", err)
		}
		return nil, false
	}
	pl.cacheHits.Add(1)
	return &Plan{Request: req, Candidate: ce.Candidate, Plugin: e.Plugin.Name(), Source: SourceCached,
		AverageMicros: ce.AverageMicros, SpreadMicros: ce.SpreadMicros,
		Reason: fmt.Sprintf("measured %s: %s", ce.When.Format(time.RFC3339), ce.Reason), entry: e}, true
}

// forced serves the candidate the policy names, if it is offered and admitted.
func (pl *planner) forced(ctx context.Context, req sdk.Request, cand string) (*Plan, error) {
	if req.Family == sdk.FamilyDense && (cand == DenseMatrix || cand == DenseVector) {
		return &Plan{Request: req, Candidate: cand, Source: SourcePolicy, Reason: "forced by policy"}, nil
	}
	e, ok := pl.registry.Lookup(cand)
	if !ok || e.Info.Family != req.Family {
		return pl.fallback(ctx, req, fmt.Sprintf("policy forces %q, which no plugin offers for %s", cand, req.Family))
	}
	if a := pl.admission(ctx, req, e); !a.Admitted {
		return pl.fallback(ctx, req, fmt.Sprintf("policy forces %q, which refuses: %s", cand, a.Reason))
	}
	return &Plan{Request: req, Candidate: cand, Plugin: e.Plugin.Name(), Source: SourcePolicy, Reason: "forced by policy", entry: e}, nil
}

// fallback serves the family's fallback without measuring.
func (pl *planner) fallback(ctx context.Context, req sdk.Request, reason string) (*Plan, error) {
	if req.Family == sdk.FamilyDense && len(pl.registry.Family(sdk.FamilyDense)) == 0 {
		cand, _, why := densePlan(req)
		return &Plan{Request: req, Candidate: cand, Source: SourceFallback, Reason: reason + "; " + why}, nil
	}
	fb, err := pl.registry.Fallback(req.Family)
	if err != nil {
		return nil, err
	}
	if a := pl.admission(ctx, req, fb); !a.Admitted {
		return nil, fmt.Errorf("fallback %s refuses %s: %s", fb.Info.Name, req.Key(), a.Reason)
	}
	return &Plan{Request: req, Candidate: fb.Info.Name, Plugin: fb.Plugin.Name(), Source: SourceFallback, Reason: reason, entry: fb}, nil
}

// admission asks one candidate's plugin about req, applying the policy.
func (pl *planner) admission(ctx context.Context, req sdk.Request, e Entry) sdk.Admission {
	answers, err := e.Client.Admit(ctx, req, pl.hw)
	if err != nil {
		return sdk.Admission{Candidate: e.Info.Name, Reason: err.Error()}
	}
	for _, a := range answers {
		if a.Candidate == e.Info.Name {
			if ok, why := pl.policy.admits(e.Info); a.Admitted && !ok {
				a.Admitted, a.Reason = false, why
			}
			if no, why := pl.measurer.health.refuses(e.Info.Name); a.Admitted && no {
				a.Admitted, a.Reason = false, why
			}
			return a
		}
	}
	return sdk.Admission{Candidate: e.Info.Name, Reason: "plugin gave no answer for it"}
}

// budgetLeft says why no more tuning of phase may happen this run, or "".
func (pl *planner) budgetLeft(phase sdk.Phase) string {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if pl.spent[phase] >= time.Duration(pl.policy.RunBudget) {
		return fmt.Sprintf("the run's tuning budget of %s for %s is spent", time.Duration(pl.policy.RunBudget), phase)
	}
	return ""
}

// charge adds tuning time to phase's account.
func (pl *planner) charge(phase sdk.Phase, d time.Duration) {
	pl.mu.Lock()
	pl.spent[phase] += d
	pl.mu.Unlock()
}

// trace logs one line per decision: info for measured choices.
func (pl *planner) trace(p *Plan) {
	args := []any{"request", p.Request.Key(), "candidate", p.Candidate, "source", p.Source, "average_us", p.AverageMicros, "reason", p.Reason}
	if p.Source == SourceMeasured {
		pl.logger.Info("plan", args...)
	} else {
		pl.logger.Debug("plan", args...)
	}
}

func (pl *planner) stats() Stats {
	return Stats{Tunings: pl.tunings.Load(), CacheHits: pl.cacheHits.Load(), DeviceWork: pl.measurer.work.Load(),
		ChannelCalls: pl.measurer.env.channelCalls.Load(), RPCCalls: pl.measurer.env.rpcCalls.Load(), Shared: pl.shares.Load()}
}

// validateAny validates a request of any family.
func validateAny(req sdk.Request) error {
	if req.Family == sdk.FamilyDense {
		return validateDense(req)
	}
	if err := req.Validate(); err != nil {
		return err
	}
	c, err := family.Lookup(req.Family)
	if err != nil {
		return err
	}
	return c.Validate(req)
}

func stampOf(p *Plugin) PluginStamp {
	return PluginStamp{Version: p.Description().Version, SHA256: p.Digest()}
}

// demote replaces a request's plan when its candidate failed: the fallback
// serves it from now on (and the cache entry naming the candidate is
// dropped, so a later run measures again). It returns the new plan.
func (pl *planner) demote(ctx context.Context, req sdk.Request, candidate string, cause error) (*Plan, error) {
	key := req.Key()
	reason := fmt.Sprintf("%s failed (%v); re-planned to the fallback", candidate, cause)
	p, err := pl.fallback(ctx, req, reason)
	if err != nil {
		return nil, err
	}
	p.host = pl.owner
	pl.mu.Lock()
	if old, ok := pl.plans[key]; !ok || old.Candidate == candidate {
		pl.plans[key] = p
	}
	pl.mu.Unlock()
	if e, ok := pl.cache.Lookup(key); ok && e.Candidate == candidate {
		if err := pl.cache.Forget(key); err != nil {
			pl.logger.Warn("plan cache not written", "error", err)
		}
	}
	pl.logger.Warn("plan demoted", "request", key, "candidate", candidate, "now", p.Candidate, "error", cause)
	return p, nil
}
