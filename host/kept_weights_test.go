package host

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kcand/kcand/sdk"
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

// sampleWork says how a measurement got its samples' weights: "made" on
// the host or "kept" on the device. Either way every candidate must pass.
func sampleWork(t *testing.T, h *Host, req sdk.Request) string {
	t.Helper()
	d, err := h.Measure(context.Background(), req)
	require.NoError(t, err)
	for _, m := range d.Measurements {
		assert.NotContains(t, []Verdict{VerdictRejected, VerdictFailed}, m.Verdict, "%s at %s: %s", m.Candidate, req.Key(), m.Reason)
	}
	names := phaseNames(d)
	require.GreaterOrEqual(t, len(names), 2, "phases %v", names)
	switch names[1] {
	case "samples":
		return "made"
	case "samples (weights kept)":
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

func TestKeptSampleWeightsStayWithinTheirLimitLeastRecentlyUsedFirst(t *testing.T) {
	// Room for two layers of 96 outputs (each kept twice: both samples).
	h := openKeeping(t, 4*layerBytes(t, 96), "qmm")
	assert.Equal(t, "made", sampleWork(t, h, layer(1, 96)))
	assert.Equal(t, "made", sampleWork(t, h, layer(1, 88)))
	assert.Equal(t, "kept", sampleWork(t, h, layer(2, 96)), "96 is now the most recently used")
	assert.Equal(t, "made", sampleWork(t, h, layer(1, 80)), "room is made by freeing 88, the least recently used")
	assert.Equal(t, "kept", sampleWork(t, h, layer(3, 96)))
	assert.Equal(t, "made", sampleWork(t, h, layer(3, 88)))
	// A layer larger than the limit alone is not kept.
	assert.Equal(t, "made", sampleWork(t, h, layer(1, 256)))
	assert.Equal(t, "made", sampleWork(t, h, layer(2, 256)))
	// Negative: nothing is kept.
	none := openKeeping(t, -1, "qmm")
	assert.Equal(t, "made", sampleWork(t, none, layer(1, 96)))
	assert.Equal(t, "made", sampleWork(t, none, layer(2, 96)))
}

func TestACandidateThatWritesIntoItsWeightsSpoilsNoKeptSample(t *testing.T) {
	// scribble zeroes the scales it was handed after each call. The kept
	// copies are never handed out: the next measurement's fallback passes
	// its float64 check on copies of them.
	h := openKeeping(t, 0, "qmm", "scribble")
	assert.Equal(t, "made", sampleWork(t, h, layer(1, 96)))
	assert.Equal(t, "kept", sampleWork(t, h, layer(3, 96)))
	assert.Equal(t, "kept", sampleWork(t, h, layer(5, 96)))
}

func TestPluginsForgetAMeasurementsBuffersWhenItEnds(t *testing.T) {
	// A plugin keeps what it mapped until the host says otherwise; on a GPU
	// the host's next allocation at the same memory would then fail to
	// open there (CUDA_ERROR_ALREADY_MAPPED). mapcount fails once its
	// device holds more than one measurement's buffers.
	h := openKeeping(t, -1, "qmm", "mapcount")
	for i := 0; i < 4; i++ {
		d, err := h.Measure(context.Background(), layer(1+i, 64+8*i))
		require.NoError(t, err)
		for _, m := range d.Measurements {
			assert.NotEqual(t, VerdictFailed, m.Verdict, "measurement %d, %s: %s", i, m.Candidate, m.Reason)
		}
	}
}
