package host

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kcand/kcand/cuda"
	"github.com/kcand/kcand/sdk"
	"github.com/kcand/kcand/sdk/bf16"
	"github.com/kcand/kcand/sdk/device"
	"github.com/kcand/kcand/sdk/family/affine"
)

// openGPUHost opens a host on the GPU or skips the test saying why.
func openGPUHost(t *testing.T, cfg *hostConfig) *Host {
	t.Helper()
	if _, err := cuda.DeviceCount(); err != nil {
		t.Skipf("no CUDA driver: %v", err)
	}
	policy := cfg.policy
	h, err := Open(context.Background(), Options{PluginDir: cfg.dir, Device: "cuda", CachePath: cfg.cache, Policy: &policy, QuarantineAfter: 3, ForceRemote: cfg.forceRemote})
	if err != nil {
		t.Skipf("no CUDA device: %v", err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// TestGPUFaultingKernelIsContained runs a plugin whose kernel makes an
// illegal memory access on the remote path: the host's context and buffers
// stay valid, the plugin is restarted, the candidate is quarantined, and
// the request is served correctly by the fallback.
func TestGPUFaultingKernelIsContained(t *testing.T) {
	cfg := newHostConfig(t, "qmm", pluginGPUFault)
	h := openGPUHost(t, cfg)
	ctx := context.Background()
	dev := h.Device()

	// A host buffer with known contents, to check after the faults.
	canary, err := dev.Alloc(1 << 20)
	require.NoError(t, err)
	defer dev.Free(canary)
	require.NoError(t, dev.Fill(canary, 0x5a))

	req := affineRequest(1, 1024, 256, 4, 64)
	fault, _ := h.Manager().Lookup("gpufault")
	for i := 0; i < 3; i++ {
		d, err := h.Measure(ctx, req)
		require.NoError(t, err, "measurement %d", i)
		assert.Equal(t, "qmm", d.Choice)
		assert.Equal(t, VerdictFailed, d.Measurements[1].Verdict, "round %d: %s", i, d.Measurements[1].Reason)
		t.Logf("round %d: gpufault %s: %s", i, d.Measurements[1].Verdict, d.Measurements[1].Reason)
		waitFor(t, 20*time.Second, "gpufault restarted", func() bool { return fault.Health().Running })
	}
	d, err := h.Measure(ctx, req)
	require.NoError(t, err)
	assert.Equal(t, VerdictRefused, d.Measurements[1].Verdict)
	assert.Contains(t, d.Measurements[1].Reason, "quarantined")
	assert.GreaterOrEqual(t, fault.Health().Restarts, 1, "the faulting plugin was restarted")
	t.Logf("after 3 faults: %s; restarts %d", d.Measurements[1].Reason, fault.Health().Restarts)

	got := make([]byte, canary.Size())
	require.NoError(t, dev.Read(got, canary, 0))
	for i, b := range got {
		if b != 0x5a {
			t.Fatalf("host buffer byte %d changed to %#x", i, b)
		}
	}
	// The host's context still launches: run the exported fallback.
	exe, sample := bindSample(t, h, req, 9)
	io := ioBuffers(t, h, req, sample)
	require.NoError(t, exe.Run(ctx, nil, io))
	require.NoError(t, dev.Synchronize())
	require.NoError(t, affine.Check(readY(t, h, io), affine.Reference(req, sample.Weights, sample.Inputs[affine.X])))
	t.Logf("host context intact: exported %s ran correctly (remote: %v)", exe.Plan().Candidate, exe.Remote())
}

// TestGPUEngineBuffersFreedThroughTheHostsDeviceLeaveNoMemoryInThePlugin is
// an engine on the remote path that frees its input through Host.Device
// between runs. A CUDA mapping keeps the memory behind it: while a plugin
// still maps a freed allocation, the device does not get it back (on the
// H200 with driver 580, scripts/ipc_mappings.py: 4 GiB stayed in use after
// the owner's free until the importer unmapped it). The device tells the
// host of each free and the host has the plugin forget first, so after every
// free the device's free memory is back where it was. Each x lives in an
// allocation of 1 GiB so that a leak is far above what the runs themselves
// allocate.
func TestGPUEngineBuffersFreedThroughTheHostsDeviceLeaveNoMemoryInThePlugin(t *testing.T) {
	cfg := newHostConfig(t, "qmm", "gemv")
	cfg.forceRemote = true
	cfg.policy.Force = map[string]string{"affine": "gemv"}
	h := openGPUHost(t, cfg)
	ctx := context.Background()
	dev := h.Device()
	cd, ok := dev.(*cuda.Device)
	require.True(t, ok, "a CUDA host's device is a *cuda.Device")
	req := affineRequest(1, 1024, 256, 4, 64)
	exe, sample := bindSample(t, h, req, 12)
	require.True(t, exe.Remote(), "ForceRemote runs %s in its plugin", exe.Plan().Candidate)
	want := affine.Reference(req, sample.Weights, sample.Inputs[affine.X])
	io := ioBuffers(t, h, req, sample)
	require.NoError(t, exe.Run(ctx, nil, io), "the first run, which maps what every run shares")
	freeMemory := func() int64 {
		require.NoError(t, dev.Synchronize())
		free, _, err := cd.Context().MemoryInfo()
		require.NoError(t, err)
		return free
	}
	const big, slack = 1 << 30, 256 << 20
	before := freeMemory()
	for i := 0; i < 3; i++ {
		whole, err := dev.Alloc(big)
		require.NoError(t, err)
		x, err := cuda.Slice(whole, 0, io[affine.X].Size())
		require.NoError(t, err)
		require.NoError(t, dev.Write(x, 0, sample.Inputs[affine.X]))
		require.NoError(t, dev.Fill(io[affine.Y], 0xff))
		run := map[string]device.Buffer{affine.X: x, affine.Y: io[affine.Y]}
		require.NoError(t, exe.Run(ctx, nil, run), "run %d", i)
		require.NoError(t, dev.Synchronize())
		require.NoError(t, affine.Check(readY(t, h, run), want), "run %d", i)
		require.Equal(t, "gemv", exe.Plan().Candidate, "run %d went through the forced candidate", i)
		require.NoError(t, dev.Free(whole), "run %d", i)
		after := freeMemory()
		require.GreaterOrEqual(t, after, before-slack, "run %d: %d MiB of the device still in use after x's 1 GiB was freed", i, (before-after)>>20)
		t.Logf("run %d: free memory %d MiB before x, %d MiB after its free", i, before>>20, after>>20)
	}
}

// TestGPUTuningOncePerKeyAndCached is issue 4's CI check on real kernels:
// 64 goroutines planning 8 decode keys tune each once, and a second host
// serves all 8 from the cache with no device work.
func TestGPUTuningOncePerKeyAndCached(t *testing.T) {
	cfg := newHostConfig(t, "qmm", "gemv")
	h := openGPUHost(t, cfg)
	keys := make([]sdk.Request, 8)
	for i := range keys {
		keys[i] = affineRequest(1, 4096, 4096+1024*i, 4, 64)
	}
	var wg sync.WaitGroup
	for g := 0; g < 64; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range keys {
				_, err := h.Plan(context.Background(), keys[(i+g)%len(keys)])
				assert.NoError(t, err)
			}
		}()
	}
	wg.Wait()
	assert.EqualValues(t, 8, h.Stats().Tunings)
	for _, req := range keys {
		p, err := h.Plan(context.Background(), req)
		require.NoError(t, err)
		require.Equal(t, SourceMeasured, p.Source, "%s: %s", req.Key(), p.Reason)
		for _, m := range p.Decision.Measurements {
			t.Logf("%s %-5s %8.1f µs ± %5.1f %s", req.Key(), m.Candidate, m.Timing.Mean, m.Timing.Spread, m.Verdict)
		}
		t.Logf("%s → %s; tuning cost %.1f ms (target ≤ 100 ms)", req.Key(), p.Candidate, float64(p.Decision.Cost.Microseconds())/1e3)
	}
	h.Close()
	second := openGPUHost(t, cfg)
	for _, req := range keys {
		p, err := second.Plan(context.Background(), req)
		require.NoError(t, err)
		assert.Equal(t, SourceCached, p.Source)
	}
	assert.EqualValues(t, 0, second.Stats().DeviceWork)
}

// TestGPUExportedRunRefusesShortBuffers: on the exported path a run binds
// the caller's buffers straight into the kernels' arguments, so an output
// one byte short is refused with an error naming it before anything
// launches (nothing is written past it), and the next run with the right
// buffer is correct.
func TestGPUExportedRunRefusesShortBuffers(t *testing.T) {
	cfg := newHostConfig(t, "qmm", "gemv")
	h := openGPUHost(t, cfg)
	ctx := context.Background()
	dev := h.Device()
	req := affineRequest(1, 1024, 256, 4, 64)
	exe, sample := bindSample(t, h, req, 11)
	require.False(t, exe.Remote(), "%s should run exported", exe.Plan().Candidate)

	io := ioBuffers(t, h, req, sample)
	need := io[affine.Y].Size()
	short, err := dev.Alloc(need + 256)
	require.NoError(t, err)
	defer dev.Free(short)
	require.NoError(t, dev.Fill(short, 0x5a))
	shortY, err := cuda.Slice(short, 0, need-1) // one byte short, canary bytes after it
	require.NoError(t, err)
	err = exe.Run(ctx, nil, map[string]device.Buffer{affine.X: io[affine.X], affine.Y: shortY})
	assertFieldError(t, err, "io."+affine.Y, need-1)
	require.NoError(t, dev.Synchronize())
	got := make([]byte, short.Size())
	require.NoError(t, dev.Read(got, short, 0))
	for i, b := range got {
		require.Equal(t, byte(0x5a), b, "byte %d written by a refused run", i)
	}

	require.NoError(t, exe.Run(ctx, nil, io))
	require.NoError(t, dev.Synchronize())
	require.NoError(t, affine.Check(readY(t, h, io), affine.Reference(req, sample.Weights, sample.Inputs[affine.X])))
}

// TestGPUEarlyStartReadsWhatTheKernelAheadWrote chains exported runs of the
// decode candidates that start early (programmatic dependent launch),
// enqueued back to back with no synchronisation between them:
//   - a chain through fresh buffers, each run reading what the run ahead
//     writes: a kernel that read x before waiting for the grid ahead would
//     read the poison (bf16 NaN) its input buffer was filled with;
//   - a ping-pong, where the second run writes the buffer the first reads:
//     a kernel that stored y before the grid ahead finished would change
//     the first run's input under it.
//
// 4 and 8 bits: gemv/bulk converts x to fp16 in every consumer warp at 4
// bits, and has its producer copy x at 8. Every link must be finite and
// match the float64 reference computed from the input it had. The check is
// relative to the link's whole output: values grow along the chain, and the
// gate's absolute floor (0.125) is meant for outputs of unit-scale inputs.
func TestGPUEarlyStartReadsWhatTheKernelAheadWrote(t *testing.T) {
	for _, candidate := range []string{"gemv/bulk", "gemv/tensor-core"} {
		for _, bits := range []int{4, 8} {
			t.Run(fmt.Sprintf("%s/q%d", candidate, bits), func(t *testing.T) {
				cfg := newHostConfig(t, "qmm", "gemv")
				cfg.policy.Force = map[string]string{"affine": candidate}
				h := openGPUHost(t, cfg)
				// Square, so that an output can be the next input; more row
				// tiles than SMs, where both kernels start early.
				req := affineRequest(1, 8192, 8192, bits, 64)
				exe, sample := bindSample(t, h, req, 29)
				require.Equal(t, candidate, exe.Plan().Candidate)
				require.False(t, exe.Remote(), "%s should run exported", candidate)
				checkChain(t, h, exe, req, sample, []int{0, 1, 2, 3, 4})
				checkChain(t, h, exe, req, sample, []int{0, 1, 0})
			})
		}
	}
}

// checkChain runs exe once per link of path (link i reads buffer path[i]
// and writes path[i+1]; buffer 0 starts as the sample's x, the others as
// bf16 NaN) without synchronising, then checks every link whose input and
// output are still known afterwards: its input is the sample (link 0) or
// the output of the link ahead, and a buffer holds a link's output unless
// a later link wrote it again.
func checkChain(t *testing.T, h *Host, exe *Executable, req sdk.Request, sample sdk.Sample, path []int) {
	t.Helper()
	ctx, dev := context.Background(), h.Device()
	bufs := make([]device.Buffer, slices.Max(path)+1)
	for i := range bufs {
		b, err := dev.Alloc(affine.InputSizes(req)[affine.X])
		require.NoError(t, err)
		t.Cleanup(func() { dev.Free(b) })
		require.NoError(t, dev.Fill(b, 0xff))
		bufs[i] = b
	}
	require.NoError(t, dev.Write(bufs[0], 0, sample.Inputs[affine.X]))
	links := len(path) - 1
	for i := range links {
		require.NoError(t, exe.Run(ctx, nil, map[string]device.Buffer{affine.X: bufs[path[i]], affine.Y: bufs[path[i+1]]}))
	}
	require.NoError(t, dev.Synchronize())
	final := make([][]byte, len(bufs))
	for i, b := range bufs {
		final[i] = make([]byte, b.Size())
		require.NoError(t, dev.Read(final[i], b, 0))
	}
	output := func(i int) []byte { // link i's output, or nil once overwritten
		if slices.Contains(path[i+2:], path[i+1]) {
			return nil
		}
		return final[path[i+1]]
	}
	for i := range links {
		in := sample.Inputs[affine.X]
		if i > 0 {
			in = output(i - 1)
		}
		out := output(i)
		if in == nil || out == nil {
			continue
		}
		want := affine.Reference(req, sample.Weights, in)
		for j := range want {
			got := float64(bf16.Get(out, j))
			require.False(t, math.IsNaN(got) || math.IsInf(got, 0), "path %v, link %d, element %d: %v", path, i+1, j, got)
		}
		rel := affine.RelativeError(out, want)
		t.Logf("path %v, link %d: relative error %.2e", path, i+1, rel)
		require.Less(t, rel, 1e-2, "path %v, link %d", path, i+1)
	}
}

// TestGPURunsOnTwoStreamsKeepTheirOwnWorkspace runs one executable whose
// kernels use its workspace (qmm/wgmma at 256 tokens prepares x there) on
// two streams at once, back to back without synchronising, each stream
// with its own input: every output must match its own input's reference.
// It then logs how many outputs go wrong when one workspace is bound on
// both streams, as evidence that the two streams' kernels did overlap.
func TestGPURunsOnTwoStreamsKeepTheirOwnWorkspace(t *testing.T) {
	cfg := newHostConfig(t, "qmm", "gemv")
	cfg.policy.Force = map[string]string{"affine": "qmm/wgmma"}
	h := openGPUHost(t, cfg)
	ctx := context.Background()
	req := affineRequest(256, 4096, 4096, 4, 64)
	req.Phase = sdk.PhasePrefill
	exe, sample := bindSample(t, h, req, 31)
	require.Equal(t, "qmm/wgmma", exe.Plan().Candidate)
	require.False(t, exe.Remote(), "qmm/wgmma should run exported")
	dev := h.Device().(*cuda.Device)

	streams := make([]*cuda.Stream, 2)
	xs := make([]device.Buffer, 2)
	wants := make([][]float64, 2)
	for i := range streams {
		s, err := dev.Context().NewStream(cuda.StreamNonBlocking)
		require.NoError(t, err)
		t.Cleanup(func() { s.Synchronize(); s.Destroy() })
		streams[i] = s
		x := affine.RandomSample(req, uint64(40+i)).Inputs[affine.X]
		xs[i], err = dev.Alloc(int64(len(x)))
		require.NoError(t, err)
		t.Cleanup(func() { dev.Free(xs[i]) })
		require.NoError(t, dev.Write(xs[i], 0, x))
		wants[i] = affine.Reference(req, sample.Weights, x)
	}
	const rounds = 16
	ys := make([]device.Buffer, 2*rounds)
	for i := range ys {
		y, err := dev.Alloc(affine.OutputSizes(req)[affine.Y])
		require.NoError(t, err)
		t.Cleanup(func() { dev.Free(y) })
		ys[i] = y
	}
	// wrongOutputs enqueues the rounds on both streams and counts the
	// outputs that fail the gate; shared, when not nil, is bound as the
	// workspace of every run.
	wrongOutputs := func(shared device.Buffer) int {
		for _, y := range ys {
			require.NoError(t, dev.Fill(y, 0xff))
		}
		for r := range rounds {
			for i, s := range streams {
				io := map[string]device.Buffer{affine.X: xs[i], affine.Y: ys[2*r+i]}
				if shared != nil {
					io[sdk.BufferWorkspace] = shared
				}
				require.NoError(t, exe.Run(ctx, s, io))
			}
		}
		for _, s := range streams {
			require.NoError(t, s.Synchronize())
		}
		wrong := 0
		for j, y := range ys {
			if affine.Check(readY(t, h, map[string]device.Buffer{affine.Y: y}), wants[j%2]) != nil {
				wrong++
			}
		}
		return wrong
	}
	assert.Zero(t, wrongOutputs(nil), "outputs wrong with a workspace per stream")
	shared := exe.prep.workspace.bufs[sdk.BufferWorkspace]
	t.Logf("with a workspace per stream: every one of %d outputs correct; with one workspace bound on both streams: %d wrong", len(ys), wrongOutputs(shared))
}
