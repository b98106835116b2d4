package plugintest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kcand/kcand/sdk"
	"github.com/kcand/kcand/sdk/device"
	"github.com/kcand/kcand/sdk/device/cpu"
	"github.com/kcand/kcand/sdk/errdefs"
	"github.com/kcand/kcand/sdk/family"
)

func checkDescription(t *testing.T, d sdk.Description) {
	assert.NotEmpty(t, d.Name, "plugin name")
	assert.NotEmpty(t, d.Version, "plugin version")
	assert.Equal(t, sdk.ProtocolVersion, d.ProtocolVersion)
	fallbacks := map[sdk.Family]int{}
	names := map[string]bool{}
	for _, c := range d.Candidates {
		assert.NotEmpty(t, c.Name)
		assert.False(t, names[c.Name], "candidate %s listed twice", c.Name)
		names[c.Name] = true
		assert.Contains(t, sdk.Families, c.Family, "candidate %s family", c.Name)
		assert.Contains(t, []sdk.NumericClass{sdk.NumericExact, sdk.NumericBounded}, c.Numeric, "candidate %s numeric class", c.Name)
		assert.Contains(t, []sdk.Stability{sdk.Stable, sdk.Experimental}, c.Stability, "candidate %s stability", c.Name)
		assert.NotEmpty(t, c.Devices, "candidate %s runs on no device", c.Name)
		assert.Contains(t, d.Families, c.Family, "family %s of %s not in the plugin's family list", c.Family, c.Name)
		if c.Fallback {
			fallbacks[c.Family]++
		}
	}
	for f, n := range fallbacks {
		assert.Equal(t, 1, n, "family %s has %d fallbacks in one plugin", f, n)
	}
}

func checkAdmission(t *testing.T, ctx context.Context, p sdk.Plugin, d sdk.Description) {
	hw := cpu.New().Profile()
	for _, f := range familiesOf(d) {
		for _, req := range Requests(f) {
			got, err := p.Admit(ctx, req, hw)
			require.NoError(t, err, "admit %s", req.Key())
			require.Len(t, got, len(d.Candidates), "one answer per candidate")
			for _, a := range got {
				assert.NotEmpty(t, a.Reason, "admission of %s for %s gives no reason", a.Candidate, req.Key())
			}
		}
	}
	bad := Requests(sdk.FamilyAffine)[0]
	bad.Tokens = 0
	_, err := p.Admit(ctx, bad, hw)
	assertFieldError(t, err, "tokens")
}

// checkNumerics runs every admitted candidate on each of the family's test
// requests on dev, with a fixed pattern and fresh random inputs, poisoning
// the outputs first, and compares with the float64 reference; then once
// more with inputs that hold a NaN and an infinity (the family's
// NonFiniteSamples), which must come out as the reference has them.
func checkNumerics(t *testing.T, ctx context.Context, p sdk.Plugin, d sdk.Description, dev device.Device, requests func(sdk.Family) []sdk.Request) {
	if len(d.Candidates) == 0 {
		t.Skip("the plugin offers no candidates")
	}
	hw := dev.Profile()
	seed := uint64(time.Now().UnixNano())
	t.Logf("random inputs drawn with seed %d on %s (%s)", seed, dev.Kind(), hw.Name)
	ran := 0
	for _, c := range d.Candidates {
		if !runsOn(c, dev.Kind()) {
			continue
		}
		contract, err := family.Lookup(c.Family)
		require.NoError(t, err)
		for i, req := range requests(c.Family) {
			if !admitted(t, ctx, p, req, hw, c.Name) {
				continue
			}
			ran++
			t.Run(c.Name+"/"+req.Key(), func(t *testing.T) {
				for _, sample := range []sdk.Sample{contract.PatternSample(req), contract.RandomSample(req, seed+uint64(i))} {
					out := runCandidate(t, ctx, p, dev, contract, req, c.Name, sample, poisonNaN)
					require.NoError(t, contract.SpotCheck(req, sample, out, spotElements), "gate against the float64 reference")
					relErr := contract.SampledRelativeError(req, sample, out, spotElements)
					assert.LessOrEqual(t, relErr, 1e-2, "relative error against the float64 reference")
					t.Logf("%s %s: relative error %.2e", c.Name, req.Key(), relErr)
				}
				// NaN and infinities in the inputs come out as the float64
				// reference has them, and stay in their own tokens' outputs;
				// the outputs are poisoned with a finite value, so that one
				// never written cannot pass for NaN.
				t.Run("non-finite", func(t *testing.T) {
					for _, sample := range contract.NonFiniteSamples(req, seed+uint64(i)) {
						out := runCandidate(t, ctx, p, dev, contract, req, c.Name, sample, poisonFinite)
						require.NoError(t, contract.SpotCheck(req, sample, out, spotElements), "gate against the float64 reference, inputs with a NaN or an infinity")
					}
				})
			})
		}
	}
	if ran == 0 {
		t.Skipf("no candidate admits any test request on %s", dev.Kind())
	}
}

// spotElements bounds the output elements compared with the float64
// reference per run: all of them for the conformance shapes, an even spread
// over large ones.
const spotElements = 4096

func admitted(t *testing.T, ctx context.Context, p sdk.Plugin, req sdk.Request, hw sdk.Hardware, name string) bool {
	ok, _ := admission(t, ctx, p, req, hw, name)
	return ok
}

// admission is the plugin's answer for candidate name: admitted, or why not.
func admission(t *testing.T, ctx context.Context, p sdk.Plugin, req sdk.Request, hw sdk.Hardware, name string) (bool, string) {
	answers, err := p.Admit(ctx, req, hw)
	require.NoError(t, err)
	for _, a := range answers {
		if a.Candidate == name {
			return a.Admitted, a.Reason
		}
	}
	t.Fatalf("no admission answer for %s", name)
	return false, ""
}

// buffers allocates and fills one request's weights, inputs and (poisoned) outputs.
type buffers struct {
	dev                      device.Device
	weights, inputs, outputs map[string]device.Buffer
}

// Output poisons: every byte 0xff (a bf16 NaN, which no finite reference
// passes), or 0x7f (bf16 0x7F7F, a finite 3.4e38, for runs whose reference
// holds NaN).
const (
	poisonNaN    = 0xff
	poisonFinite = 0x7f
)

func newBuffers(t *testing.T, dev device.Device, c family.Contract, req sdk.Request, sample sdk.Sample, poison byte) *buffers {
	b := &buffers{dev: dev}
	b.weights = alloc(t, dev, c.WeightSizes(req), sample.Weights)
	b.inputs = alloc(t, dev, c.InputSizes(req), sample.Inputs)
	b.outputs = alloc(t, dev, c.OutputSizes(req), nil)
	for _, buf := range b.outputs {
		require.NoError(t, dev.Fill(buf, poison))
	}
	return b
}

func alloc(t *testing.T, dev device.Device, sizes map[string]int64, data map[string][]byte) map[string]device.Buffer {
	out := map[string]device.Buffer{}
	for name, size := range sizes {
		buf, err := dev.Alloc(size)
		require.NoError(t, err)
		t.Cleanup(func() { dev.Free(buf) })
		if d, ok := data[name]; ok {
			require.NoError(t, dev.Write(buf, 0, d))
		}
		out[name] = buf
	}
	return out
}

func handles(t *testing.T, sets ...map[string]device.Buffer) map[string]device.Handle {
	out := map[string]device.Handle{}
	for _, set := range sets {
		for name, b := range set {
			h, err := b.Handle()
			require.NoError(t, err)
			out[name] = h
		}
	}
	return out
}

func runCandidate(t *testing.T, ctx context.Context, p sdk.Plugin, dev device.Device, c family.Contract, req sdk.Request, name string, sample sdk.Sample, poison byte) map[string][]byte {
	b := newBuffers(t, dev, c, req, sample, poison)
	info, err := p.Prepare(ctx, sdk.PrepareRequest{Candidate: name, Request: req, Hardware: dev.Profile(), Weights: handles(t, b.weights)})
	require.NoError(t, err, "prepare")
	defer func() { assert.NoError(t, p.Release(ctx, info.ID, nil)) }()
	io := handles(t, b.inputs, b.outputs)
	if info.WorkspaceBytes > 0 {
		io[sdk.BufferWorkspace] = handles(t, alloc(t, dev, map[string]int64{sdk.BufferWorkspace: info.WorkspaceBytes}, nil))[sdk.BufferWorkspace]
	}
	_, err = p.Execute(ctx, sdk.ExecuteRequest{PreparedID: info.ID, Buffers: io})
	require.NoError(t, err, "execute")
	out := map[string][]byte{}
	for n, buf := range b.outputs {
		data := make([]byte, buf.Size())
		require.NoError(t, dev.Read(data, buf, 0))
		out[n] = data
	}
	return out
}

// checkBadInput sends malformed requests and checks each is refused with a
// typed error naming the field, and that the plugin still answers after.
func checkBadInput(t *testing.T, ctx context.Context, p sdk.Plugin, d sdk.Description) {
	dev := cpu.New()
	defer dev.Close()
	hw := dev.Profile()
	req := Requests(sdk.FamilyAffine)[0]
	contract, err := family.Lookup(req.Family)
	require.NoError(t, err)
	b := newBuffers(t, dev, contract, req, contract.PatternSample(req), poisonNaN)

	_, err = p.Prepare(ctx, sdk.PrepareRequest{Candidate: "no-such-candidate", Request: req, Hardware: hw, Weights: handles(t, b.weights)})
	assert.ErrorIs(t, err, errdefs.ErrNotFound, "unknown candidate")
	_, err = p.Execute(ctx, sdk.ExecuteRequest{PreparedID: "no-such-id"})
	assert.ErrorIs(t, err, errdefs.ErrNotFound, "unknown prepared id")
	assert.ErrorIs(t, p.Release(ctx, "no-such-id", nil), errdefs.ErrNotFound, "release of unknown id")

	c, ok := candidateOf(d, sdk.FamilyAffine)
	if !ok {
		return
	}
	cases := []struct {
		name  string
		field string
		edit  func(*sdk.PrepareRequest)
	}{
		{"zero tokens", "tokens", func(r *sdk.PrepareRequest) { r.Request.Tokens = 0 }},
		{"zero out_features", "out_features", func(r *sdk.PrepareRequest) { r.Request.OutFeatures = 0 }},
		{"unknown family", "family", func(r *sdk.PrepareRequest) { r.Request.Family = "no-such-family" }},
		{"group does not divide", "weight.group_size", func(r *sdk.PrepareRequest) { r.Request.InFeatures += 32 }},
		{"weights too small", "buffers.weight", func(r *sdk.PrepareRequest) {
			h := r.Weights["weight"]
			h.Size = 16
			r.Weights["weight"] = h
		}},
		{"handle beyond allocation", "handle.size", func(r *sdk.PrepareRequest) {
			h := r.Weights["weight"]
			h.Size = h.AllocationSize + 1
			r.Weights["weight"] = h
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pr := sdk.PrepareRequest{Candidate: c.Name, Request: req, Hardware: hw, Weights: handles(t, b.weights)}
			tc.edit(&pr)
			_, err := p.Prepare(ctx, pr)
			assertFieldError(t, err, tc.field)
		})
	}
	info, err := p.Prepare(ctx, sdk.PrepareRequest{Candidate: c.Name, Request: req, Hardware: hw, Weights: handles(t, b.weights)})
	require.NoError(t, err)
	defer p.Release(ctx, info.ID, nil)
	small := alloc(t, dev, map[string]int64{"x": 2}, nil)
	io := handles(t, b.outputs, small)
	_, err = p.Execute(ctx, sdk.ExecuteRequest{PreparedID: info.ID, Buffers: io})
	assertFieldError(t, err, "buffers.x")
	_, err = p.Benchmark(ctx, sdk.BenchmarkRequest{PreparedID: info.ID, Buffers: handles(t, b.inputs, b.outputs), Iterations: 0})
	assertFieldError(t, err, "iterations")
	res, err := p.Benchmark(ctx, sdk.BenchmarkRequest{PreparedID: info.ID, Buffers: handles(t, b.inputs, b.outputs), Warmup: 1, Iterations: 3})
	require.NoError(t, err, "the plugin still works after bad input")
	assert.Len(t, res.IterationMicros, 3)
}

func assertFieldError(t *testing.T, err error, field string) {
	t.Helper()
	require.Error(t, err)
	assert.ErrorIs(t, err, errdefs.ErrInvalidRequest)
	var fe *errdefs.FieldError
	if assert.True(t, errors.As(err, &fe), "want a FieldError naming %q, got %T: %v", field, err, err) {
		assert.Equal(t, field, fe.Field, "error: %v", err)
		assert.NotEmpty(t, fe.Value, "error names no value: %v", err)
	}
}

func familiesOf(d sdk.Description) []sdk.Family {
	if len(d.Families) == 0 {
		return []sdk.Family{sdk.FamilyAffine}
	}
	return d.Families
}

func candidateOf(d sdk.Description, f sdk.Family) (sdk.CandidateInfo, bool) {
	for _, c := range d.Candidates {
		if c.Family == f && runsOn(c, device.CPU) {
			return c, true
		}
	}
	return sdk.CandidateInfo{}, false
}

func runsOn(c sdk.CandidateInfo, kind device.Kind) bool {
	for _, k := range c.Devices {
		if k == kind {
			return true
		}
	}
	return false
}
