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

// layer is a test layer of 512 inputs and out outputs at a token count.
func layer(tokens, out int) sdk.Request {
	r := affineRequest(tokens, 512, out, 4, 64)
	r.Bias = true
	return r
}

// layerBytes is a test layer's weights in bytes.
func layerBytes(t *testing.T, out int) int64 {
	var n int64
	for _, b := range familyContract(t, layer(1, out)).WeightSizes(layer(1, out)) {
		n += b
	}
	return n
}

// openKeeping opens a host on the CPU with the plugins given, keeping
// sample weights in keep bytes (0: the default).
func openKeeping(t *testing.T, keep int64, plugins ...string) *Host {
	t.Helper()
	h, err := Open(context.Background(), Options{PluginDir: pluginDir(t, plugins...), Device: "cpu", Measure: MeasureOptions{KeepSampleBytes: keep}})
	require.NoError(t, err)
	t.Cleanup(func() { h.Close() })
	return h
}

// sampleWork says how a measurement got its samples' weights: "made" or "kept".
func sampleWork(t *testing.T, h *Host, req sdk.Request) string {
	t.Helper()
	d, err := h.Measure(context.Background(), req)
	require.NoError(t, err)
	names := phaseNames(d)
	require.GreaterOrEqual(t, len(names), 2, "phases %v", names)
	switch names[1] {
	case "samples":
		return "made"
	case "samples (weights kept)":
		// The fallback passed its float64 check on the kept weights the
		// first time, and the survivors were timed.
		assert.Equal(t, []string{"allocate", "samples (weights kept)", "copy pattern", "check pattern", "copy random", "check random", "timing"}, names)
		for _, m := range d.Measurements[:2] {
			assert.Contains(t, []Verdict{VerdictChosen, VerdictKept, VerdictSlower, VerdictTooClose}, m.Verdict, "%s: %s", m.Candidate, m.Reason)
		}
		return "kept"
	}
	t.Fatalf("phases %v", names)
	return ""
}

func TestMeasurementsOfALayerAtOtherCountsKeepItsSampleWeights(t *testing.T) {
	h := openKeeping(t, 0, "qmm", "gemv")
	assert.Equal(t, "made", sampleWork(t, h, layer(1, 96)))
	assert.Equal(t, "kept", sampleWork(t, h, layer(3, 96)), "another count of the same layer makes only its inputs")
	assert.Equal(t, "made", sampleWork(t, h, layer(3, 64)), "another layer's weights are made")
	assert.Equal(t, "kept", sampleWork(t, h, layer(5, 96)), "both layers fit the default limit")
	assert.Equal(t, "kept", sampleWork(t, h, layer(2, 64)))
	req := layer(1, 96)
	req.Weight.GroupSize = 32
	assert.Equal(t, "made", sampleWork(t, h, req), "another format is another layer")
}

func TestKeptSampleWeightsStayWithinTheirLimit(t *testing.T) {
	// Room for one layer of 96 outputs' two samples: measuring another
	// layer frees the least recently used.
	h := openKeeping(t, 2*layerBytes(t, 96), "qmm", "gemv")
	assert.Equal(t, "made", sampleWork(t, h, layer(1, 96)))
	assert.Equal(t, "made", sampleWork(t, h, layer(1, 64)))
	assert.Equal(t, "kept", sampleWork(t, h, layer(2, 64)))
	assert.Equal(t, "made", sampleWork(t, h, layer(2, 96)), "freed to make room")
	// A layer larger than the limit alone is not kept.
	assert.Equal(t, "made", sampleWork(t, h, layer(1, 128)))
	assert.Equal(t, "made", sampleWork(t, h, layer(2, 128)))
	// Negative: nothing is kept.
	none := openKeeping(t, -1, "qmm")
	assert.Equal(t, "made", sampleWork(t, none, layer(1, 96)))
	assert.Equal(t, "made", sampleWork(t, none, layer(2, 96)))
}

func TestKeptSampleWeightsSpoiledByACandidateAreCopiedAgain(t *testing.T) {
	h := openHost(t, "qmm", "scribble")
	ctx := context.Background()
	_, err := h.Measure(ctx, layer(1, 96))
	require.NoError(t, err)
	// scribble zeroed the scales of both kept samples. The fallback fails
	// on them against the float64 reference; the measurement copies the
	// weights again and goes on.
	d, err := h.Measure(ctx, layer(3, 96))
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
