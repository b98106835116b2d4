package host

import (
	"context"
	"errors"
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

// ioBuffers allocates x (filled from sample) and y (poisoned) on h's device.
func ioBuffers(t *testing.T, h *Host, req sdk.Request, sample sdk.Sample) map[string]device.Buffer {
	t.Helper()
	io := allocIO(t, h, req, sample)
	t.Cleanup(func() { h.Device().Free(io[affine.X]); h.Device().Free(io[affine.Y]) })
	return io
}

// allocIO is ioBuffers without the cleanup: the caller frees them.
func allocIO(t *testing.T, h *Host, req sdk.Request, sample sdk.Sample) map[string]device.Buffer {
	t.Helper()
	x, err := h.Device().Alloc(affine.InputSizes(req)[affine.X])
	require.NoError(t, err)
	require.NoError(t, h.Device().Write(x, 0, sample.Inputs[affine.X]))
	y, err := h.Device().Alloc(affine.OutputSizes(req)[affine.Y])
	require.NoError(t, err)
	require.NoError(t, h.Device().Fill(y, 0xff))
	return map[string]device.Buffer{affine.X: x, affine.Y: y}
}

// bindSample plans req on h, registers the weights of a random sample and
// binds them; the executable and the weights are closed when the test ends.
func bindSample(t *testing.T, h *Host, req sdk.Request, seed uint64) (*Executable, sdk.Sample) {
	t.Helper()
	ctx := context.Background()
	plan, err := h.Plan(ctx, req)
	require.NoError(t, err)
	sample := affine.RandomSample(req, seed)
	w, err := h.RegisterWeights(req, sample.Weights)
	require.NoError(t, err)
	t.Cleanup(func() { w.Close() })
	exe, err := plan.Bind(ctx, w)
	require.NoError(t, err)
	t.Cleanup(func() { exe.Close() })
	return exe, sample
}

func readY(t *testing.T, h *Host, io map[string]device.Buffer) []byte {
	out := make([]byte, io[affine.Y].Size())
	require.NoError(t, h.Device().Read(out, io[affine.Y], 0))
	return out
}

func TestEngineAPIEndToEnd(t *testing.T) {
	h := newHostConfig(t, "qmm", "gemv").open(t)
	ctx := context.Background()
	req := affineRequest(1, 512, 96, 4, 64)
	req.Bias = true
	exe, sample := bindSample(t, h, req, uint64(time.Now().UnixNano()))
	assert.True(t, exe.Remote(), "the CPU device runs candidates in the plugin")
	io := ioBuffers(t, h, req, sample)
	want := affine.Reference(req, sample.Weights, sample.Inputs[affine.X])
	for i := 0; i < 3; i++ {
		require.NoError(t, h.Device().Fill(io[affine.Y], 0xff))
		require.NoError(t, exe.Run(ctx, nil, io))
		require.NoError(t, affine.Check(readY(t, h, io), want), "run %d", i)
	}
	// The plugin dies between runs: the next run prepares again and succeeds.
	p, _ := h.Manager().Lookup(exe.Plan().Plugin)
	require.NoError(t, syscall.Kill(p.Health().PID, syscall.SIGKILL))
	waitFor(t, 10*time.Second, "restart", func() bool { return p.Health().Restarts == 1 && p.Health().Running })
	require.NoError(t, h.Device().Fill(io[affine.Y], 0xff))
	require.NoError(t, exe.Run(ctx, nil, io))
	require.NoError(t, affine.Check(readY(t, h, io), want), "after the plugin restarted")
}

func TestEngineAPIBadInput(t *testing.T) {
	h := newHostConfig(t, "qmm", "gemv").open(t)
	ctx := context.Background()
	req := affineRequest(1, 256, 64, 4, 64)
	sample := affine.RandomSample(req, 1)

	missing := map[string][]byte{affine.Weight: sample.Weights[affine.Weight], affine.Scales: sample.Weights[affine.Scales]}
	_, err := h.RegisterWeights(req, missing)
	assertFieldError(t, err, "weights.biases", 0)
	extra := map[string][]byte{"lora": {1}}
	for k, v := range sample.Weights {
		extra[k] = v
	}
	_, err = h.RegisterWeights(req, extra)
	assertFieldError(t, err, "weights.lora", 1)
	short := map[string][]byte{}
	for k, v := range sample.Weights {
		short[k] = v
	}
	short[affine.Weight] = short[affine.Weight][:10]
	_, err = h.RegisterWeights(req, short)
	assertFieldError(t, err, "weights.weight", 10)

	w, err := h.RegisterWeights(req, sample.Weights)
	require.NoError(t, err)
	defer w.Close()
	other := affineRequest(1, 256, 72, 4, 64)
	plan, err := h.Plan(ctx, other)
	require.NoError(t, err)
	_, err = plan.Bind(ctx, w)
	assertFieldError(t, err, "weights.request", req.Key())

	plan, err = h.Plan(ctx, req)
	require.NoError(t, err)
	exe, err := plan.Bind(ctx, w)
	require.NoError(t, err)
	defer exe.Close()
	io := ioBuffers(t, h, req, sample)
	small, err := h.Device().Alloc(16)
	require.NoError(t, err)
	defer h.Device().Free(small)
	err = exe.Run(ctx, nil, map[string]device.Buffer{affine.X: io[affine.X], affine.Y: small})
	assertFieldError(t, err, "io.y", 16)
	err = exe.Run(ctx, nil, map[string]device.Buffer{affine.Y: io[affine.Y]})
	assertFieldError(t, err, "io.x", "missing")

	dense, err := h.Plan(ctx, sdk.Request{Family: sdk.FamilyDense, Phase: sdk.PhaseDecode, Tokens: 1, InFeatures: 64, OutFeatures: 64, Activation: sdk.BF16, Weight: sdk.Format{Kind: "bf16"}})
	require.NoError(t, err)
	_, err = dense.Bind(ctx, w)
	assert.ErrorIs(t, err, ErrAdvisory)
}

func TestMalformedLaunchPlanDropsTheCandidate(t *testing.T) {
	cfg := newHostConfig(t, "qmm", pluginBadPlan)
	h := cfg.open(t)
	d, err := h.Measure(context.Background(), affineRequest(1, 256, 64, 4, 64))
	require.NoError(t, err)
	assert.Equal(t, "qmm", d.Choice)
	bad := d.Measurements[1]
	assert.Equal(t, "badplan", bad.Candidate)
	assert.Equal(t, VerdictFailed, bad.Verdict)
	assert.Contains(t, bad.Reason, "params[0].buffer=host_secrets")

	cfg.policy.Force = map[string]string{"affine": "badplan"}
	forced := cfg.open(t)
	req := affineRequest(1, 256, 64, 4, 64)
	plan, err := forced.Plan(context.Background(), req)
	require.NoError(t, err)
	require.Equal(t, SourcePolicy, plan.Source)
	w, err := forced.RegisterWeights(req, affine.RandomSample(req, 2).Weights)
	require.NoError(t, err)
	defer w.Close()
	_, err = plan.Bind(context.Background(), w)
	require.Error(t, err)
	assert.ErrorIs(t, err, sdk.ErrBadLaunchPlan)
	var le *sdk.LaunchPlanError
	require.True(t, errors.As(err, &le))
	assert.Equal(t, "launches[0].params[0].buffer", le.Field)
	assert.False(t, errors.Is(err, errdefs.ErrInvalidRequest), "a bad plan is the plugin's fault, not the caller's")
}

// TestRemoteRunsUseTheDoorbell checks which transport carries remote runs:
// the doorbell channel by default, gRPC when channels are off.
func TestRemoteRunsUseTheDoorbell(t *testing.T) {
	for _, channels := range []bool{true, false} {
		t.Run(map[bool]string{true: "channel", false: "rpc"}[channels], func(t *testing.T) {
			cfg := newHostConfig(t, "qmm")
			h, err := Open(context.Background(), Options{PluginDir: cfg.dir, Device: "cpu", NoChannels: !channels, Policy: &cfg.policy})
			require.NoError(t, err)
			defer h.Close()
			req := affineRequest(2, 256, 64, 4, 64)
			sample := affine.RandomSample(req, 5)
			plan, err := h.Plan(context.Background(), req)
			require.NoError(t, err)
			w, err := h.RegisterWeights(req, sample.Weights)
			require.NoError(t, err)
			defer w.Close()
			exe, err := plan.Bind(context.Background(), w)
			require.NoError(t, err)
			defer exe.Close()
			io := ioBuffers(t, h, req, sample)
			before := h.Stats()
			for i := 0; i < 20; i++ {
				require.NoError(t, exe.Run(context.Background(), nil, io))
			}
			require.NoError(t, affine.Check(readY(t, h, io), affine.Reference(req, sample.Weights, sample.Inputs[affine.X])))
			after := h.Stats()
			if channels {
				assert.EqualValues(t, 20, after.ChannelCalls-before.ChannelCalls)
				assert.EqualValues(t, 0, after.RPCCalls-before.RPCCalls)
			} else {
				assert.EqualValues(t, 0, after.ChannelCalls-before.ChannelCalls)
				assert.EqualValues(t, 20, after.RPCCalls-before.RPCCalls)
			}
		})
	}
}

// TestPluginsSeeOnlyTheirCallsBuffers runs a candidate that fails whenever
// a call hands it a buffer the call does not need, through tuning and the
// engine API on both transports.
func TestPluginsSeeOnlyTheirCallsBuffers(t *testing.T) {
	cfg := newHostConfig(t, "qmm", pluginSpy)
	cfg.policy.Force = nil
	h := cfg.open(t)
	req := affineRequest(1, 256, 64, 4, 64)
	d, err := h.Measure(context.Background(), req)
	require.NoError(t, err)
	for _, m := range d.Measurements {
		assert.NotEqual(t, VerdictFailed, m.Verdict, "%s: %s", m.Candidate, m.Reason)
	}
	cfg.policy.Force = map[string]string{"affine": "spy"}
	forced := cfg.open(t)
	plan, err := forced.Plan(context.Background(), req)
	require.NoError(t, err)
	sample := affine.RandomSample(req, 4)
	w, err := forced.RegisterWeights(req, sample.Weights)
	require.NoError(t, err)
	defer w.Close()
	exe, err := plan.Bind(context.Background(), w)
	require.NoError(t, err)
	defer exe.Close()
	io := ioBuffers(t, forced, req, sample)
	require.NoError(t, exe.Run(context.Background(), nil, io))
	require.NoError(t, affine.Check(readY(t, forced, io), affine.Reference(req, sample.Weights, sample.Inputs[affine.X])))
	assert.Equal(t, "spy", exe.Plan().Candidate, "the spy served the run, so it saw no foreign buffer")
}

// TestRunAfterCloseIsAnError: a closed executable refuses to run, naming
// itself, rather than launching on freed memory.
func TestRunAfterCloseIsAnError(t *testing.T) {
	h := newHostConfig(t, "qmm", "gemv").open(t)
	req := affineRequest(1, 512, 96, 4, 64)
	exe, sample := bindSample(t, h, req, 7)
	io := ioBuffers(t, h, req, sample)
	require.NoError(t, exe.Run(context.Background(), nil, io))
	require.NoError(t, exe.Close())
	err := exe.Run(context.Background(), nil, io)
	assertFieldError(t, err, "executable", exe.Plan().Candidate)
	assert.Contains(t, err.Error(), "closed")
}

// forcedRemote opens a host on the CPU with qmm and the test plugin
// named, whose candidate of the same name every affine request is forced
// to, and binds a random sample of a 512→96 layer at one token there. It
// returns the executable (remote) with the request, the sample and the
// float64 reference of its output.
func forcedRemote(t *testing.T, plugin string, seed uint64) (*Host, *Executable, sdk.Request, sdk.Sample, []float64) {
	t.Helper()
	cfg := newHostConfig(t, "qmm", plugin)
	cfg.policy.Force = map[string]string{"affine": plugin}
	h := cfg.open(t)
	req := affineRequest(1, 512, 96, 4, 64)
	exe, sample := bindSample(t, h, req, seed)
	require.True(t, exe.Remote())
	return h, exe, req, sample, affine.Reference(req, sample.Weights, sample.Inputs[affine.X])
}

func TestEngineBuffersForgottenBeforeTheyAreFreedDoNotPileUpInThePlugin(t *testing.T) {
	// An engine frees and allocates activation buffers between runs. The
	// plugin keeps every buffer it was handed mapped until the host says
	// otherwise (on a GPU the next buffer at the same memory would then
	// fail to open there); mapcount fails once more than 9 are mapped.
	h, exe, req, sample, want := forcedRemote(t, pluginMapCount, 7)
	ctx := context.Background()
	for i := 0; i < 6; i++ {
		io := ioBuffers(t, h, req, sample)
		require.NoError(t, exe.Run(ctx, nil, io), "run %d", i)
		require.NoError(t, affine.Check(readY(t, h, io), want), "run %d", i)
		require.NoError(t, h.Forget(ctx, io[affine.X], io[affine.Y]))
	}
	// A failed remote run would have been re-planned to the fallback.
	assert.Equal(t, "mapcount", exe.Plan().Candidate, "every run went through mapcount")
	x, err := h.Device().Alloc(16)
	require.NoError(t, err)
	require.NoError(t, h.Device().Free(x))
	err = h.Forget(ctx, x)
	assert.ErrorIs(t, err, errdefs.ErrInvalidRequest, "a freed buffer has no handle")
	assert.Contains(t, err.Error(), "buffers[0]")
}

func TestEngineBuffersFreedThroughTheHostsDeviceAreForgottenInThePlugin(t *testing.T) {
	// The same engine, without Host.Forget: it frees its buffers through
	// Host.Device, which tells the host, and the host has the plugin drop
	// its mappings before the memory goes. Without that, mapcount would
	// fail by the third run and the executable would re-plan to the
	// fallback.
	h, exe, req, sample, want := forcedRemote(t, pluginMapCount, 9)
	ctx := context.Background()
	dev := h.Device()
	for i := 0; i < 6; i++ {
		io := allocIO(t, h, req, sample)
		require.NoError(t, exe.Run(ctx, nil, io), "run %d", i)
		require.NoError(t, affine.Check(readY(t, h, io), want), "run %d", i)
		require.NoError(t, dev.Free(io[affine.X]), "run %d", i)
		require.NoError(t, dev.Free(io[affine.Y]), "run %d", i)
	}
	assert.Equal(t, "mapcount", exe.Plan().Candidate, "every run went through mapcount")
	assert.Empty(t, h.env.lent.lent, "every lent buffer was forgotten when it was freed")
}

func TestAWorkspaceReplacedOnPreparingAgainIsForgottenInThePlugin(t *testing.T) {
	// growws loses its prepared state after each execution and asks for a
	// larger workspace at each prepare, so every run after the first
	// prepares it again in the same process and replaces a workspace that
	// process has mapped. It fails once more than 9 allocations are
	// mapped: replaced workspaces left mapped would reach that in a few
	// runs.
	h, exe, req, sample, want := forcedRemote(t, pluginGrowWS, 8)
	ctx := context.Background()
	io := ioBuffers(t, h, req, sample)
	for i := 0; i < 8; i++ {
		require.NoError(t, h.Device().Fill(io[affine.Y], 0xff))
		require.NoError(t, exe.Run(ctx, nil, io), "run %d", i)
		require.NoError(t, affine.Check(readY(t, h, io), want), "run %d", i)
		// A run the plugin refused would have been re-planned to the fallback.
		require.Equal(t, "growws", exe.Plan().Candidate, "run %d went through growws", i)
	}
}

func TestAPluginThatDoesNotAnswerAForgetIsRestartedNotWaitedFor(t *testing.T) {
	saved := forgetTimeout
	forgetTimeout = 200 * time.Millisecond
	t.Cleanup(func() { forgetTimeout = saved })
	h := newHostConfig(t, "qmm", pluginHang).open(t)
	p, ok := h.Manager().Lookup(pluginHang)
	require.True(t, ok)
	b, err := h.Device().Alloc(64)
	require.NoError(t, err)
	defer h.Device().Free(b)
	start := time.Now()
	require.NoError(t, h.Forget(context.Background(), b), "a killed process holds no mapping")
	assert.Less(t, time.Since(start), 5*time.Second, "bounded by the forget's timeout, not the call deadline")
	waitFor(t, 10*time.Second, "restart", func() bool { return p.Health().Restarts == 1 && p.Health().Running })
}
