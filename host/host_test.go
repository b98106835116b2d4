package host

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kcand/kcand/sdk"
	"github.com/kcand/kcand/sdk/device"
	"github.com/kcand/kcand/sdk/errdefs"
	"github.com/kcand/kcand/sdk/family/affine"
)

func openHost(t *testing.T, plugins ...string) *Host {
	t.Helper()
	h, err := Open(context.Background(), Options{PluginDir: pluginDir(t, plugins...), Device: "cpu"})
	require.NoError(t, err)
	t.Cleanup(func() { h.Close() })
	return h
}

func affineRequest(tokens, in, out, bits, group int) sdk.Request {
	return sdk.Request{
		Family: sdk.FamilyAffine, Phase: sdk.PhaseDecode, Tokens: tokens, InFeatures: in, OutFeatures: out,
		Weight: sdk.Format{Kind: "affine", Bits: bits, GroupSize: group}, Activation: sdk.BF16,
	}
}

func assertFieldError(t *testing.T, err error, field string, value any) {
	t.Helper()
	require.Error(t, err)
	assert.ErrorIs(t, err, errdefs.ErrInvalidRequest)
	var fe *errdefs.FieldError
	require.True(t, errors.As(err, &fe), "want a FieldError, got %T: %v", err, err)
	assert.Equal(t, field, fe.Field)
	assert.Equal(t, fmt.Sprint(value), fmt.Sprint(fe.Value))
}

// TestPluginExecutesOnSharedMemory runs each real affine plugin through the
// host's buffers and compares with the float64 reference.
func TestPluginExecutesOnSharedMemory(t *testing.T) {
	h := openHost(t, "qmm", "gemv")
	req := affineRequest(3, 512, 96, 4, 64)
	req.Bias = true
	sample := affine.RandomSample(req, uint64(time.Now().UnixNano()))
	want := affine.Reference(req, sample.Weights, sample.Inputs[affine.X])
	for _, name := range []string{"qmm", "gemv"} {
		t.Run(name, func(t *testing.T) {
			e, ok := h.Registry().Lookup(name)
			require.True(t, ok)
			bufs, err := allocateSample(h.Device(), familyContract(t, req), req)
			require.NoError(t, err)
			defer bufs.free()
			weights, io, err := bufs.load(sample)
			require.NoError(t, err)
			require.NoError(t, bufs.outputs.fill(0xff))
			p, err := prepare(context.Background(), h.env, e, req, weights)
			require.NoError(t, err)
			defer p.release(context.Background())
			_, err = p.execute(context.Background(), nil, io)
			require.NoError(t, err)
			out, err := bufs.outputs.read()
			require.NoError(t, err)
			require.NoError(t, affine.Check(out[affine.Y], want))
			assert.Less(t, affine.RelativeError(out[affine.Y], want), 1e-2)
		})
	}
}

func TestMeasureTimesBothCandidatesAndExplainsTheChoice(t *testing.T) {
	h := openHost(t, "qmm", "gemv", "mxfp4", "fp8tc")
	d, err := h.Measure(context.Background(), affineRequest(1, 1024, 512, 4, 64))
	require.NoError(t, err)
	// qmm and gemv are timed; gemv/tensor-core, gemv/bulk, qmm/stream,
	// qmm/bulk, qmm/wave and qmm/wgmma run on CUDA only and say so.
	require.Len(t, d.Measurements, 8)
	assert.Equal(t, "qmm", d.Measurements[0].Candidate, "fallback first")
	chosen := 0
	for _, m := range d.Measurements {
		if m.Candidate != "qmm" && m.Candidate != "gemv" {
			assert.Equal(t, VerdictRefused, m.Verdict, m.Candidate)
			assert.Contains(t, m.Reason, "cpu")
			continue
		}
		assert.Greater(t, m.Timing.Mean, 0.0, "%s timed (%s: %s)", m.Candidate, m.Verdict, m.Reason)
		assert.GreaterOrEqual(t, m.Timing.Iterations, 5)
		if m.Verdict == VerdictChosen {
			chosen++
			assert.Equal(t, d.Choice, m.Candidate)
		}
	}
	if d.Choice == "qmm" {
		assert.Contains(t, []Verdict{VerdictChosen, VerdictKept}, d.Measurements[0].Verdict)
	} else {
		assert.Equal(t, 1, chosen)
	}
	assert.NotEmpty(t, d.Reason)
}

func TestPrefillRefusesGEMVWithReason(t *testing.T) {
	h := openHost(t, "qmm", "gemv")
	req := affineRequest(64, 256, 64, 4, 64)
	req.Phase = sdk.PhasePrefill
	d, err := h.Measure(context.Background(), req)
	require.NoError(t, err)
	assert.Equal(t, "qmm", d.Choice)
	assert.Equal(t, VerdictRefused, d.Measurements[1].Verdict)
	assert.Contains(t, d.Measurements[1].Reason, "64")
}

func TestWrongNumbersAreRejected(t *testing.T) {
	h := openHost(t, "qmm", pluginWrong)
	d, err := h.Measure(context.Background(), affineRequest(1, 256, 64, 4, 64))
	require.NoError(t, err)
	assert.Equal(t, "qmm", d.Choice)
	var wrong Measurement
	for _, m := range d.Measurements {
		if m.Candidate == "wrong" {
			wrong = m
		}
	}
	assert.Equal(t, VerdictRejected, wrong.Verdict)
	assert.Contains(t, wrong.Reason, "element 32")
}

func TestBadRequestsNameFieldAndValue(t *testing.T) {
	h := openHost(t, "qmm", "gemv")
	cases := []struct {
		name  string
		edit  func(*sdk.Request)
		field string
		value any
	}{
		{"zero tokens", func(r *sdk.Request) { r.Tokens = 0 }, "tokens", 0},
		{"zero in_features", func(r *sdk.Request) { r.InFeatures = 0 }, "in_features", 0},
		{"unknown family", func(r *sdk.Request) { r.Family = "conv" }, "family", "conv"},
		{"group does not divide", func(r *sdk.Request) { r.InFeatures = 96 }, "weight.group_size", 64},
		{"unsupported bits", func(r *sdk.Request) { r.Weight.Bits = 7 }, "weight.bits", 7},
		{"unknown phase", func(r *sdk.Request) { r.Phase = "warmup" }, "phase", "warmup"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req := affineRequest(1, 256, 64, 4, 64)
			tc.edit(&req)
			_, err := h.Measure(context.Background(), req)
			assertFieldError(t, err, tc.field, tc.value)
		})
	}
}

func TestBufferTooSmallIsNamedAcrossTheWire(t *testing.T) {
	h := openHost(t, "qmm")
	req := affineRequest(1, 256, 64, 4, 64)
	small, err := h.Device().Alloc(8)
	require.NoError(t, err)
	defer h.Device().Free(small)
	handle, err := small.Handle()
	require.NoError(t, err)
	e, _ := h.Registry().Lookup("qmm")
	_, err = e.Client.Prepare(context.Background(), sdk.PrepareRequest{
		Candidate: "qmm", Request: req, Hardware: h.Hardware(),
		Weights: map[string]device.Handle{affine.Weight: handle, affine.Scales: handle, affine.Biases: handle},
	})
	assertFieldError(t, err, "buffers.biases", 8)
}

// TestSIGKILLDuringMeasureKeepsHostServing kills the plugins while a
// measurement runs: the host survives, the plugins come back, and the next
// measurement is complete and correct.
func TestSIGKILLDuringMeasureKeepsHostServing(t *testing.T) {
	h := openHost(t, "qmm", "gemv")
	req := affineRequest(1, 2048, 2048, 4, 64)
	done := make(chan error, 1)
	go func() {
		_, err := h.Measure(context.Background(), req)
		done <- err
	}()
	time.Sleep(150 * time.Millisecond)
	for _, name := range []string{"gemv", "qmm"} {
		p, _ := h.Manager().Lookup(name)
		require.NoError(t, syscall.Kill(p.Health().PID, syscall.SIGKILL))
	}
	select {
	case err := <-done:
		t.Logf("measurement during the kill: %v", err) // it may fail; the host must not
	case <-time.After(60 * time.Second):
		t.Fatal("measurement hung after its plugins were killed")
	}
	for _, name := range []string{"gemv", "qmm"} {
		p, _ := h.Manager().Lookup(name)
		waitFor(t, 10*time.Second, name+" restarted", func() bool { return p.Health().Running && p.Health().Restarts >= 1 })
	}
	d, err := h.Measure(context.Background(), affineRequest(1, 512, 128, 4, 64))
	require.NoError(t, err)
	for _, m := range d.Measurements {
		assert.NotEqual(t, VerdictFailed, m.Verdict, "%s: %s", m.Candidate, m.Reason)
		assert.NotEqual(t, VerdictRejected, m.Verdict, "%s: %s", m.Candidate, m.Reason)
	}
}

// load writes a sample and returns the weight and input/output handles (the
// measurer loads its samples itself: see measurer.load).
func (s *sampleBuffers) load(sample sdk.Sample) (weights, io map[string]device.Handle, err error) {
	if err := s.weights.write(sample.Weights); err != nil {
		return nil, nil, err
	}
	if err := s.inputs.write(sample.Inputs); err != nil {
		return nil, nil, err
	}
	if weights, err = s.weights.handles(); err != nil {
		return nil, nil, err
	}
	io, err = s.ioHandles()
	return weights, io, err
}
