package host

import (
	"fmt"

	"github.com/kcand/kcand/sdk"
)

// PlanSource says where a plan came from.
type PlanSource string

// The plan sources.
const (
	// SourceCached plans were measured earlier and read from the cache.
	SourceCached PlanSource = "cached"
	// SourceMeasured plans were measured just now.
	SourceMeasured PlanSource = "measured"
	// SourcePolicy plans were forced by policy.
	SourcePolicy PlanSource = "policy"
	// SourceHeuristic plans follow a rule of thumb (dense projections).
	SourceHeuristic PlanSource = "heuristic"
	// SourceFallback plans use the family's fallback without measuring.
	SourceFallback PlanSource = "fallback"
	// SourceBucket plans take the candidate measured (or cached) for the
	// largest token count of their bucket (see BucketScheme), once it has
	// passed the numeric gate at their own count.
	SourceBucket PlanSource = "bucket"
)

// Plan is the chosen candidate for a request, with its provenance.
type Plan struct {
	Request   sdk.Request
	Candidate string
	// Plugin serves the candidate; empty for advisory (dense) plans.
	Plugin string
	Source PlanSource
	// AverageMicros and SpreadMicros are the measured time, when known.
	AverageMicros float64
	SpreadMicros  float64
	// Reason explains the choice.
	Reason string
	// Decision holds the measurement when Source is SourceMeasured, and
	// the numeric check at the plan's own count when Source is
	// SourceBucket (nil when the candidate is the fallback).
	Decision *Decision
	// Representative is, when Source is SourceBucket, the plan of the
	// bucket's largest token count that this plan shares.
	Representative *Plan

	entry Entry
	host  *Host
	// transient marks a stand-in served while another caller tunes: it is
	// not kept as the key's plan.
	transient bool
}

// String describes the plan in one line.
func (p *Plan) String() string {
	s := fmt.Sprintf("%s → %s (%s)", p.Request.Key(), p.Candidate, p.Source)
	if p.AverageMicros > 0 {
		s += fmt.Sprintf(" %.1f µs", p.AverageMicros)
	}
	return s
}
