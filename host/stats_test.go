package host

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/kcand/kcand/sdk"
)

func TestSummarizeDropsTheSlowestTenth(t *testing.T) {
	samples := []float64{10, 10, 10, 10, 10, 10, 10, 10, 10, 1000}
	s := summarize(samples)
	assert.Equal(t, 10.0, s.Mean)
	assert.Equal(t, 0.0, s.Spread)
	assert.Equal(t, 10, s.Iterations)
	assert.Equal(t, Timing{}, summarize(nil))
}

// decideOn runs the decision rule on synthetic timings, fallback first.
func decideOn(timings ...Timing) *Decision {
	ms := &measurer{opts: MeasureOptions{}, policy: DefaultPolicy()}
	ms.opts.defaults()
	d := &Decision{Measurements: make([]Measurement, len(timings))}
	var runs []*run
	for i, tm := range timings {
		d.Measurements[i] = Measurement{Candidate: string(rune('a' + i)), Fallback: i == 0, Timing: tm}
		runs = append(runs, &run{entry: Entry{}, m: &d.Measurements[i]})
		runs[i].entry.Info.Name = d.Measurements[i].Candidate
		runs[i].entry.Info.Fallback = i == 0
	}
	ms.decide(d, runs)
	return d
}

func TestDecisionRule(t *testing.T) {
	cases := []struct {
		name    string
		timings []Timing
		choice  string
		verdict []Verdict
	}{
		{"clear winner", []Timing{{Mean: 100, Spread: 1}, {Mean: 50, Spread: 1}}, "b", []Verdict{VerdictSlower, VerdictChosen}},
		{"1% faster keeps the fallback", []Timing{{Mean: 100, Spread: 0.1}, {Mean: 99, Spread: 0.1}}, "a", []Verdict{VerdictKept, VerdictTooClose}},
		{"within spread keeps the fallback", []Timing{{Mean: 100, Spread: 20}, {Mean: 90, Spread: 1}}, "a", []Verdict{VerdictKept, VerdictTooClose}},
		{"fallback fastest", []Timing{{Mean: 50, Spread: 1}, {Mean: 100, Spread: 1}}, "a", []Verdict{VerdictChosen, VerdictSlower}},
		{"best of three", []Timing{{Mean: 100, Spread: 1}, {Mean: 80, Spread: 1}, {Mean: 60, Spread: 1}}, "c", []Verdict{VerdictSlower, VerdictSlower, VerdictChosen}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := decideOn(tc.timings...)
			assert.Equal(t, tc.choice, d.Choice)
			for i, v := range tc.verdict {
				assert.Equal(t, v, d.Measurements[i].Verdict, "candidate %d", i)
			}
			assert.NotEmpty(t, d.Reason)
		})
	}
}

func TestCheckBenchmarkRefusesImpossibleTimes(t *testing.T) {
	assert.NoError(t, checkBenchmark(sdk.BenchmarkResult{IterationMicros: []float64{10, 11}, WallMicros: 30}, 2))
	assert.Error(t, checkBenchmark(sdk.BenchmarkResult{IterationMicros: []float64{10}, WallMicros: 30}, 2), "too few samples")
	assert.Error(t, checkBenchmark(sdk.BenchmarkResult{IterationMicros: []float64{10, 0}, WallMicros: 30}, 2), "zero time")
	assert.Error(t, checkBenchmark(sdk.BenchmarkResult{IterationMicros: []float64{10, 0.001}, WallMicros: 30}, 2), "absurdly small")
	assert.Error(t, checkBenchmark(sdk.BenchmarkResult{IterationMicros: []float64{100, 100}, WallMicros: 30}, 2), "more device time than wall time")
}

func TestPlausibility(t *testing.T) {
	assert.NoError(t, checkPlausible(Timing{Mean: 10}, 30<<20), "3 TB/s is possible")
	assert.Error(t, checkPlausible(Timing{Mean: 0.1}, 30<<20), "300 TB/s is not")
}
