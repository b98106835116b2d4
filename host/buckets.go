package host

import (
	"context"
	"fmt"
	"math/bits"
	"time"

	"github.com/kcand/kcand/sdk"
)

// BucketScheme says how a tune rule groups token counts. A request's key
// names its token count, and an engine's prefill calls bring a new count
// with almost every prompt; measuring each would make tuning unbounded. A
// bucket is measured once, at its largest count (its representative), and
// every count in it takes that plan when the chosen candidate admits it
// and passes the numeric gate at that count (an untimed check).
type BucketScheme string

// The bucket schemes.
const (
	// BucketExact measures every token count on its own (the zero value).
	BucketExact BucketScheme = ""
	// BucketPow2 groups the counts (2^(k-1), 2^k]: 1, 2, 3–4, 5–8, 9–16, …
	// The edges fall where the affine kernels change tiles (8 tokens for
	// the decode kernels, 16 for one mma token tile, 32 for two).
	BucketPow2 BucketScheme = "pow2"
)

// valid reports whether s is a known scheme.
func (s BucketScheme) valid() bool { return s == BucketExact || s == BucketPow2 }

// bucket returns the token counts, within the rule, that share tokens'
// plan. It assumes the rule matches tokens.
func (r TuneRule) bucket(tokens int) (lo, hi int) {
	if r.Buckets != BucketPow2 || tokens > 1<<40 {
		return tokens, tokens
	}
	hi = 1 << bits.Len(uint(tokens-1))
	lo = max(hi/2+1, r.MinTokens)
	if r.MaxTokens > 0 {
		hi = min(hi, r.MaxTokens)
	}
	return lo, hi
}

// representative returns the request whose measurement req shares, and the
// bucket's token counts; ok is false when req is measured on its own.
func (p Policy) representative(req sdk.Request) (rep sdk.Request, lo, hi int, ok bool) {
	for _, r := range p.Tune {
		if !r.Matches(req) {
			continue
		}
		lo, hi = r.bucket(req.Tokens)
		if hi == req.Tokens {
			return req, lo, hi, false
		}
		rep = req
		rep.Tokens = hi
		return rep, lo, hi, validateAny(rep) == nil
	}
	return req, req.Tokens, req.Tokens, false
}

// planFromBucket plans req from its bucket's representative rep: the
// representative is planned like any request (cache, claim, measurement),
// and req takes its candidate when that candidate admits req and passes
// the numeric gate at req's own count (verify; not timed). The check is
// recorded in the cache under req's key, so a later run does no device
// work for it. A candidate that refuses or fails the count leaves req to
// be measured on its own.
func (pl *planner) planFromBucket(ctx context.Context, req, rep sdk.Request, lo, hi int) (*Plan, error) {
	rp, err := pl.plan(ctx, rep)
	if err != nil {
		return nil, err
	}
	pl.mu.Lock()
	settled := pl.plans[rep.Key()] == rp
	pl.mu.Unlock()
	shares := fmt.Sprintf("tokens %d–%d share the plan of tokens=%d", lo, hi, hi)
	if !settled { // another caller is measuring it; this one was told to go on
		p, err := pl.fallback(ctx, req, shares+", which is being tuned; using the fallback meanwhile")
		if err == nil {
			p.transient = true
		}
		return p, err
	}
	if rp.Source == SourceFallback {
		return pl.fallback(ctx, req, fmt.Sprintf("%s: %s", shares, rp.Reason))
	}
	if a := pl.admission(ctx, req, rp.entry); !a.Admitted {
		return pl.alone(ctx, req, fmt.Sprintf("%s refuses tokens=%d: %s", rp.Candidate, req.Tokens, a.Reason))
	}
	p := &Plan{Request: req, Candidate: rp.Candidate, Plugin: rp.Plugin, Source: SourceBucket, Representative: rp, entry: rp.entry,
		Reason: fmt.Sprintf("%s (%s, %.1f µs there): %s", shares, rp.Source, rp.AverageMicros, rp.Reason)}
	if !rp.entry.Info.Fallback { // the fallback is the family's reference at every count
		if why := pl.budgetLeft(req.Phase); why != "" {
			return pl.fallback(ctx, req, why)
		}
		start := time.Now()
		d, err := pl.measurer.verify(ctx, req, rp.Candidate, time.Duration(pl.policy.KeyBudget))
		pl.charge(req.Phase, time.Since(start))
		if err != nil {
			return pl.abandoned(ctx, req, err)
		}
		if d.Choice != rp.Candidate {
			return pl.alone(ctx, req, d.Reason)
		}
		p.Decision = d
		p.Reason += fmt.Sprintf("; checked at tokens=%d", req.Tokens)
		e := pl.entryFor(d)
		e.Reason = p.Reason
		if err := pl.cache.Record(req.Key(), e); err != nil {
			pl.logger.Warn("plan cache not written; keeping the plan in memory", "path", pl.cache.Path(), "error", err)
		}
	}
	pl.shares.Add(1)
	return p, nil
}

// alone measures req on its own because its bucket's plan does not serve
// it (why).
func (pl *planner) alone(ctx context.Context, req sdk.Request, why string) (*Plan, error) {
	pl.logger.Info("token bucket's plan does not serve this count; measuring it on its own", "request", req.Key(), "why", why)
	if why := pl.budgetLeft(req.Phase); why != "" {
		return pl.fallback(ctx, req, why)
	}
	return pl.tune(ctx, req)
}
