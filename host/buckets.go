package host

import (
	"context"
	"fmt"

	"github.com/kcand/kcand/sdk"
)

// BucketScheme says how a tune rule groups token counts. A request's key
// names its token count, and an engine's prefill calls bring a new count
// with almost every prompt; measuring each would make tuning unbounded. A
// bucket is measured once, at its largest count (its representative), and
// every count in it takes that plan when the chosen candidate admits it.
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
	if r.Buckets != BucketPow2 {
		return tokens, tokens
	}
	hi = 1
	for hi < tokens {
		hi *= 2
	}
	lo = hi/2 + 1
	if hi == 1 {
		lo = 1
	}
	lo = max(lo, r.MinTokens)
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

// shared plans req from its bucket's representative rep: the representative
// is planned like any request (cache, claim, measurement), and req takes its
// candidate when that candidate admits req. If it does not, req is measured
// on its own.
func (pl *planner) shared(ctx context.Context, req, rep sdk.Request, lo, hi int) (*Plan, error) {
	rp, err := pl.plan(ctx, rep)
	if err != nil {
		return nil, err
	}
	pl.mu.Lock()
	settled := pl.plans[rep.Key()] == rp
	pl.mu.Unlock()
	bucket := fmt.Sprintf("tokens %d–%d", lo, hi)
	if !settled { // another caller is measuring it; this one was told to go on
		p, err := pl.fallback(ctx, req, fmt.Sprintf("%s share the plan of tokens=%d, which is being tuned; using the fallback meanwhile", bucket, hi))
		if err == nil {
			p.transient = true
		}
		return p, err
	}
	if rp.Source == SourceFallback {
		return pl.fallback(ctx, req, fmt.Sprintf("%s share the plan of tokens=%d: %s", bucket, hi, rp.Reason))
	}
	if a := pl.admission(ctx, req, rp.entry); !a.Admitted {
		pl.logger.Debug("bucket's candidate refuses this token count; tuning it on its own",
			"request", req.Key(), "candidate", rp.Candidate, "reason", a.Reason)
		if why := pl.budgetLeft(); why != "" {
			return pl.fallback(ctx, req, why)
		}
		return pl.tune(ctx, req)
	}
	pl.shares.Add(1)
	return &Plan{Request: req, Candidate: rp.Candidate, Plugin: rp.Plugin, Source: SourceBucket, Representative: rp, entry: rp.entry,
		Reason: fmt.Sprintf("%s share the plan of tokens=%d (%s, %.1f µs there): %s", bucket, hi, rp.Source, rp.AverageMicros, rp.Reason)}, nil
}
