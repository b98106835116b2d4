package host

import (
	"math"
	"sort"
)

// Timing summarises per-iteration device times in microseconds.
type Timing struct {
	// Mean is the average after dropping the slowest tenth of the samples
	// (preemptions and clock hiccups, not the kernel).
	Mean float64
	// Spread is the standard deviation of the kept samples.
	Spread float64
	// Min is the fastest sample.
	Min float64
	// Iterations counts all samples, dropped ones included.
	Iterations int
}

// summarize computes a Timing from samples.
func summarize(samples []float64) Timing {
	if len(samples) == 0 {
		return Timing{}
	}
	sorted := append([]float64(nil), samples...)
	sort.Float64s(sorted)
	kept := sorted[:len(sorted)-len(sorted)/10]
	var sum float64
	for _, v := range kept {
		sum += v
	}
	mean := sum / float64(len(kept))
	var sq float64
	for _, v := range kept {
		sq += (v - mean) * (v - mean)
	}
	spread := 0.0
	if len(kept) > 1 {
		spread = math.Sqrt(sq / float64(len(kept)-1))
	}
	return Timing{Mean: mean, Spread: spread, Min: sorted[0], Iterations: len(samples)}
}

// improvementBps is how much faster candidate is than fallback, in basis
// points of the fallback's time.
func improvementBps(fallback, candidate Timing) float64 {
	if fallback.Mean <= 0 {
		return 0
	}
	return (fallback.Mean - candidate.Mean) / fallback.Mean * 1e4
}
