package affine

import (
	"fmt"
	"math"

	"github.com/kcand/kcand/sdk/bf16"
)

// Gate tolerances: a result passes when |got−ref| ≤ max(AbsoluteTolerance,
// RelativeTolerance·|ref|) at every element and every element is finite.
// Against the float64 reference (Check) an element whose reference is not
// finite, from a NaN or an infinity in the inputs, passes when it is NaN,
// or, for an infinite reference, that infinity: a kernel may turn an
// infinity into NaN (0·∞ and ∞−∞ are NaN) but not into a number or the
// other infinity.
const (
	AbsoluteTolerance = 0.125
	RelativeTolerance = 0.01
)

// Mismatch describes the worst element of a comparison.
type Mismatch struct {
	Index     int
	Got, Want float64
	// Excess is |got−want| over the element's tolerance; above 1 fails.
	Excess float64
}

// String implements fmt.Stringer.
func (m Mismatch) String() string {
	return fmt.Sprintf("element %d: got %g want %g (%.2f× tolerance)", m.Index, m.Got, m.Want, m.Excess)
}

// GateError says a result failed the gate, naming its worst element.
type GateError struct {
	Worst Mismatch
	// Failed counts the elements over tolerance.
	Failed int
	Total  int
}

// Error implements error.
func (e *GateError) Error() string {
	return fmt.Sprintf("affine gate: %d of %d elements out of tolerance; worst %s", e.Failed, e.Total, e.Worst)
}

// Check compares a bf16 output against float64 reference values and
// returns nil when it passes the gate, or a *GateError naming the worst
// element. Where a reference value is NaN or infinite the output must be
// NaN or that infinity (see the tolerances).
func Check(got []byte, want []float64) error {
	if len(got) != 2*len(want) {
		return &GateError{Worst: Mismatch{Index: -1, Excess: math.Inf(1)}, Failed: len(want), Total: len(want)}
	}
	return gate(len(want), func(i int) float64 { return want[i] }, got, true)
}

// CheckAgainst compares two bf16 outputs, treating ref as the reference.
// Every element must be finite, ref's too: the tuner compares outputs of
// finite samples, where a non-finite fallback is a fault, not a reference.
func CheckAgainst(got, ref []byte) error {
	if len(got) != 2*(len(ref)/2) {
		return &GateError{Worst: Mismatch{Index: -1, Excess: math.Inf(1)}, Failed: len(ref) / 2, Total: len(ref) / 2}
	}
	return gate(len(ref)/2, func(i int) float64 { return float64(bf16.Get(ref, i)) }, got, false)
}

// gateChunk is how many elements one goroutine of gate compares.
const gateChunk = 1 << 16

// gate checks got's n bf16 elements against want(i), in parallel chunks
// (a prefill output has millions of elements, and the tuner gates every
// candidate on two samples). The worst element is the first of the
// largest excess, as a scan in order would find it. With nonFinite, a
// non-finite want(i) asks for NaN or that same infinity (see the
// tolerances); without, it fails like a non-finite result.
func gate(n int, want func(i int) float64, got []byte, nonFinite bool) error {
	chunks := (n + gateChunk - 1) / gateChunk
	worst := make([]Mismatch, chunks)
	failed := make([]int, chunks)
	parallel(chunks, func(c int) {
		for i := c * gateChunk; i < min(n, (c+1)*gateChunk); i++ {
			w := want(i)
			g := float64(bf16.Get(got, i))
			excess := math.Abs(g-w) / math.Max(AbsoluteTolerance, RelativeTolerance*math.Abs(w))
			switch {
			case nonFinite && (math.IsNaN(w) || math.IsInf(w, 0)):
				excess = 0
				if !math.IsNaN(g) && g != w {
					excess = math.Inf(1)
				}
			case math.IsNaN(g) || math.IsInf(g, 0) || math.IsNaN(excess):
				excess = math.Inf(1)
			}
			if excess > 1 {
				failed[c]++
			}
			if excess > worst[c].Excess || i == c*gateChunk {
				worst[c] = Mismatch{Index: i, Got: g, Want: w, Excess: excess}
			}
		}
	})
	total := 0
	var w Mismatch
	for c := range chunks {
		total += failed[c]
		if worst[c].Excess > w.Excess || c == 0 {
			w = worst[c]
		}
	}
	if total > 0 {
		return &GateError{Worst: w, Failed: total, Total: n}
	}
	return nil
}

// RelativeError is ‖got−want‖₂ / ‖want‖₂, the accuracy figure tests report.
func RelativeError(got []byte, want []float64) float64 {
	var num, den float64
	for i, w := range want {
		d := float64(bf16.Get(got, i)) - w
		num += d * d
		den += w * w
	}
	if den == 0 {
		return math.Sqrt(num)
	}
	return math.Sqrt(num / den)
}
