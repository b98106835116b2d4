package host

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kcand/kcand/sdk"
	"github.com/kcand/kcand/sdk/device/cpu"
)

// phaseNames lists a decision's phases by name.
func phaseNames(d *Decision) []string {
	var names []string
	for _, p := range d.Phases {
		names = append(names, p.Name)
	}
	return names
}

func TestMeasurementsOfOneLayerAtOtherCountsKeepItsSampleWeights(t *testing.T) {
	h := openHost(t, "qmm", "gemv")
	ctx := context.Background()
	layer := func(tokens int) (r sdk.Request) {
		r = affineRequest(tokens, 512, 96, 4, 64)
		r.Bias = true
		return r
	}
	first, err := h.Measure(ctx, layer(1))
	require.NoError(t, err)
	assert.Contains(t, phaseNames(first), "samples")
	// Another count of the same layer: only the inputs are made and copied,
	// and the fallback passes its float64 check on the kept weights the
	// first time.
	again, err := h.Measure(ctx, layer(3))
	require.NoError(t, err)
	assert.Equal(t, []string{"allocate", "samples (weights kept)", "copy pattern", "check pattern", "copy random", "check random", "timing"}, phaseNames(again))
	for _, m := range again.Measurements[:2] {
		assert.Contains(t, []Verdict{VerdictChosen, VerdictKept, VerdictSlower, VerdictTooClose}, m.Verdict, "%s: %s", m.Candidate, m.Reason)
	}
	fresh, err := h.Measure(ctx, affineRequest(3, 1024, 96, 4, 64))
	require.NoError(t, err)
	assert.Contains(t, phaseNames(fresh), "samples", "another layer's weights are made anew")
	back, err := h.Measure(ctx, layer(5))
	require.NoError(t, err)
	assert.Contains(t, phaseNames(back), "samples", "one layer is kept: the last")
}

func TestKeptSampleWeightsSpoiledByACandidateAreCopiedAgain(t *testing.T) {
	h := openHost(t, "qmm", "scribble")
	ctx := context.Background()
	_, err := h.Measure(ctx, affineRequest(1, 512, 96, 4, 64))
	require.NoError(t, err)
	// scribble zeroed the scales of both kept samples. The fallback fails
	// on them against the float64 reference; the measurement copies the
	// weights again and goes on.
	d, err := h.Measure(ctx, affineRequest(3, 512, 96, 4, 64))
	require.NoError(t, err, "a candidate that writes into its weights must not spoil the next measurement")
	assert.Equal(t, []string{"allocate", "samples (weights kept)", "copy pattern", "check on kept weights (the fallback failed)", "samples"}, phaseNames(d)[:5])
	for _, m := range d.Measurements {
		assert.NotEqual(t, VerdictRejected, m.Verdict, "%s: %s", m.Candidate, m.Reason)
	}
}

func TestKeptWeightsCopyASampleOnlyWhenItsSetHoldsAnother(t *testing.T) {
	dev := cpu.New()
	defer dev.Close()
	sizes := map[string]int64{"w": 4}
	set, err := allocate(dev, sizes)
	require.NoError(t, err)
	// Two samples taking turns in one set, as where a second copy did not fit.
	k := &keptWeights{host: [2]map[string][]byte{{"w": {1, 1, 1, 1}}, {"w": {2, 2, 2, 2}}}, dev: [2]*bufferSet{set, set}, holds: map[*bufferSet]int{}}
	defer k.free()
	for _, step := range []struct {
		sample int
		copies bool
	}{{0, true}, {0, false}, {1, true}, {1, false}, {0, true}} {
		copied, err := k.load(step.sample)
		require.NoError(t, err)
		assert.Equal(t, step.copies, copied, "sample %d", step.sample)
		got, err := set.read()
		require.NoError(t, err)
		assert.Equal(t, k.host[step.sample]["w"], got["w"], "the set holds sample %d", step.sample)
	}
}
