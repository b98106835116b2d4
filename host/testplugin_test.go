package host

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kcand/kcand/cuda"
	"github.com/kcand/kcand/internal/refcandidate"
	"github.com/kcand/kcand/sdk"
	"github.com/kcand/kcand/sdk/cpukernel"
	"github.com/kcand/kcand/sdk/device"
	"github.com/kcand/kcand/sdk/device/cpu"
	"github.com/kcand/kcand/sdk/errdefs"
	"github.com/kcand/kcand/sdk/family/affine"
)

// Test plugins are the test binary started under another name; the name
// says how it misbehaves.
const (
	pluginProto2   = "proto2"     // speaks the protocol version after the SDK's
	pluginWrong    = "wrong"      // candidate "wrong" gets one element wrong
	pluginOracle   = "oracle"     // candidate "oracle": the float64 reference, correct
	pluginBadPlan  = "badplan"    // candidate "badplan" exports a launch plan naming an unknown buffer
	pluginGPUFault = "gpufault"   // CUDA candidate "gpufault" whose kernel writes to an illegal address
	pluginSpy      = "spy"        // candidate "spy" fails when handed a buffer its call does not need
	pluginLostCtx  = "lostctx"    // candidate "lostctx" fails every execution with a sticky CUDA error (on the CPU)
	pluginEven     = "even"       // candidate "even": the reference, refusing odd token counts
	pluginOddTail  = "oddtail"    // candidate "oddtail": the reference, one element wrong at odd token counts
	pluginSlow     = "slow"       // candidate "slow": the reference, 100 ms a call
	pluginWarm     = "warm"       // candidate "warm": the reference; its CPU device, when opened, creates the file $KCAND_TEST_WARM_MARKER
	pluginScribble = "scribble"   // candidate "scribble": the reference, zeroing the scales it was handed after each call
	pluginHang     = "hangforget" // candidate "hangforget": the reference, in a plugin that never answers a forget
	pluginMapCount = "mapcount"   // candidate "mapcount": the reference with a workspace, failing to prepare or execute while its CPU device holds more than 9 of the host's allocations mapped
	pluginGrowWS   = "growws"     // candidate "growws": mapcount, with a workspace that grows at every prepare and a prepared state lost after each execution
)

// envWarmMarker names the file pluginWarm creates when it opens its device.
const envWarmMarker = "KCAND_TEST_WARM_MARKER"

// serveTestPlugin serves the behaviour named by the binary's file name.
func serveTestPlugin(name string) {
	opts := sdk.Options{Name: name, Version: "test"}
	switch name {
	case pluginProto2:
		opts.ProtocolVersion = sdk.ProtocolVersion + 1
		sdk.Serve(opts, refcandidate.Candidate{Name: "proto2-oracle"})
	case pluginWrong:
		sdk.Serve(opts, refcandidate.Candidate{Name: "wrong", Corrupt: true})
	case pluginOracle:
		sdk.Serve(opts, refcandidate.Candidate{Name: "oracle"})
	case pluginBadPlan:
		sdk.Serve(opts, refcandidate.Candidate{Name: "badplan", Export: badPlan})
	case pluginGPUFault:
		sdk.Serve(opts, gpuFault{})
	case pluginSpy:
		sdk.Serve(opts, spy{refcandidate.Candidate{Name: "spy"}})
	case pluginLostCtx:
		sdk.Serve(opts, refcandidate.Candidate{Name: "lostctx", BeforeExecute: func() error { return cuda.Result(700) }})
	case pluginEven:
		sdk.Serve(opts, evenTokens{refcandidate.Candidate{Name: "even"}})
	case pluginWarm:
		sdk.RegisterDevice(device.CPU, func() (device.Device, error) {
			if err := os.WriteFile(os.Getenv(envWarmMarker), nil, 0o644); err != nil {
				return nil, err
			}
			return cpu.New(), nil
		})
		sdk.Serve(opts, refcandidate.Candidate{Name: "warm"})
	case pluginSlow:
		sdk.Serve(opts, refcandidate.Candidate{Name: "slow", BeforeExecute: func() error { time.Sleep(100 * time.Millisecond); return nil }})
	case pluginOddTail:
		sdk.Serve(opts, oddTail{refcandidate.Candidate{Name: "oddtail"}})
	case pluginScribble:
		sdk.Serve(opts, scribble{refcandidate.Candidate{Name: "scribble"}})
	case pluginHang:
		logger := sdk.PluginLogger(name)
		rt, err := sdk.NewRuntime(name, "test", logger, refcandidate.Candidate{Name: "hangforget"})
		if err != nil {
			os.Exit(3)
		}
		sdk.ServePlugin(opts, logger, hangForget{rt})
	case pluginMapCount:
		sdk.Serve(opts, mapCount{refcandidate.Candidate{Name: "mapcount"}})
	case pluginGrowWS:
		sdk.Serve(opts, growWS{Candidate: refcandidate.Candidate{Name: "growws"}, prepares: new(atomic.Int64)})
	default:
		os.Stderr.WriteString("unknown test plugin " + name + "\n")
		os.Exit(3)
	}
}

// badPlan exports a plan whose kernel would read a buffer the host never
// bound: the host must refuse it before any launch.
func badPlan() (sdk.LaunchPlan, error) {
	m := sdk.NewModule(sdk.ModuleCubin, []byte("not really a cubin"))
	return sdk.LaunchPlan{Modules: []sdk.Module{m}, Launches: []sdk.Launch{{
		Module: m.Hash, Function: "steal", Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{32, 1, 1},
		Params: []sdk.Param{sdk.BufferParam("host_secrets"), sdk.BufferParam(affine.Y)},
	}}}, nil
}

// pluginDir makes a plugin directory holding the named real plugins
// (copied) and test plugins (links to this test binary).
func pluginDir(t *testing.T, names ...string) string {
	t.Helper()
	dir := t.TempDir()
	exe, err := os.Executable()
	require.NoError(t, err)
	for _, name := range names {
		if strings.Contains("qmm gemv mxfp4 fp8tc", name) {
			data, err := os.ReadFile(realPlugins + "/" + name)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(dir+"/"+name, data, 0o755))
			continue
		}
		require.NoError(t, os.Symlink(exe, dir+"/"+name))
	}
	return dir
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// evenTokens is the reference candidate, refusing odd token counts: a
// candidate whose admission changes within a token bucket.
type evenTokens struct{ refcandidate.Candidate }

func (e evenTokens) Admit(req sdk.Request, p device.Profile) sdk.Admission {
	if req.Tokens%2 != 0 {
		return sdk.Admission{Reason: fmt.Sprintf("tokens=%d: even counts only", req.Tokens)}
	}
	return e.Candidate.Admit(req, p)
}

// oddTail is the reference candidate with a bug in its partial tiles: one
// output element wrong at odd token counts, right at even ones.
type oddTail struct{ refcandidate.Candidate }

func (o oddTail) Prepare(ctx context.Context, env sdk.Env, req sdk.Request, weights sdk.Buffers) (sdk.Prepared, error) {
	c := o.Candidate
	c.Corrupt = req.Tokens%2 == 1
	return c.Prepare(ctx, env, req, weights)
}

// hangForget is a plugin whose Release never returns when it is asked to
// forget mappings.
type hangForget struct{ *sdk.Runtime }

func (h hangForget) Release(ctx context.Context, id string, forget []device.Handle) error {
	if len(forget) > 0 {
		select {} // hangs until the host kills the process
	}
	return h.Runtime.Release(ctx, id, forget)
}

// scribble is the reference candidate, except that after each call it
// zeroes the scales it was handed: its own outputs are right, and the
// weights it leaves behind are not.
type scribble struct{ refcandidate.Candidate }

func (s scribble) Prepare(ctx context.Context, env sdk.Env, req sdk.Request, weights sdk.Buffers) (sdk.Prepared, error) {
	p, err := s.Candidate.Prepare(ctx, env, req, weights)
	if err != nil {
		return nil, err
	}
	scales, err := cpukernel.Bytes(weights, affine.Scales)
	if err != nil {
		return nil, err
	}
	return scribbled{p, scales}, nil
}

type scribbled struct {
	sdk.Prepared
	scales []byte
}

func (p scribbled) Execute(ctx context.Context, io sdk.Buffers) error {
	if err := p.Prepared.Execute(ctx, io); err != nil {
		return err
	}
	clear(p.scales)
	return nil
}

// mapCount is the reference candidate with a small workspace, except that
// it fails to prepare or execute while its device holds more than 9 of the
// host's allocations mapped. A run holds at most 8 at a time (3 or 4
// weights, x, y, its workspace and its channel's page), and the page of
// the run before it another until the plugin has noticed that its channel
// ended; more are what a finished measurement, run or engine call left
// behind.
type mapCount struct{ refcandidate.Candidate }

func (m mapCount) Prepare(ctx context.Context, env sdk.Env, req sdk.Request, weights sdk.Buffers) (sdk.Prepared, error) {
	if err := mappedAtMost9(env.Device); err != nil {
		return nil, err
	}
	p, err := m.Candidate.Prepare(ctx, env, req, weights)
	if err != nil {
		return nil, err
	}
	return counted{p, env.Device}, nil
}

func mappedAtMost9(d device.Device) error {
	if c, ok := d.(*cpu.Device); ok && c.Opened() > 9 {
		return fmt.Errorf("mapcount: %d of the host's allocations still mapped", c.Opened())
	}
	return nil
}

type counted struct {
	sdk.Prepared
	dev device.Device
}

func (counted) WorkspaceBytes() int64 { return 64 }

func (c counted) Execute(ctx context.Context, io sdk.Buffers) error {
	if err := mappedAtMost9(c.dev); err != nil {
		return err
	}
	return c.Prepared.Execute(ctx, io)
}

// growWS is mapCount whose every prepare asks for a larger workspace
// than the last, and whose prepared state is gone after one execution
// (the next fails with not found, as after a restart), so the host
// prepares it again in the same process and replaces the workspace that
// process has mapped.
type growWS struct {
	refcandidate.Candidate
	prepares *atomic.Int64
}

func (g growWS) Prepare(ctx context.Context, env sdk.Env, req sdk.Request, weights sdk.Buffers) (sdk.Prepared, error) {
	p, err := mapCount{g.Candidate}.Prepare(ctx, env, req, weights)
	if err != nil {
		return nil, err
	}
	return &onceOnly{counted: p.(counted), workspace: 64 * g.prepares.Add(1)}, nil
}

// onceOnly is a prepared growWS candidate.
type onceOnly struct {
	counted
	workspace int64
	ran       atomic.Bool
}

func (o *onceOnly) WorkspaceBytes() int64 { return o.workspace }

func (o *onceOnly) Execute(ctx context.Context, io sdk.Buffers) error {
	if o.ran.Swap(true) {
		return fmt.Errorf("growws: prepared state gone: %w", errdefs.ErrNotFound)
	}
	return o.counted.Execute(ctx, io)
}

// spy is the reference candidate, except that it refuses a prepare that
// carries anything but the request's weights and an execute that carries
// anything but its inputs, outputs and workspace: plugins must see only
// the buffers of the call they serve.
type spy struct{ refcandidate.Candidate }

func (s spy) Prepare(ctx context.Context, env sdk.Env, req sdk.Request, weights sdk.Buffers) (sdk.Prepared, error) {
	if err := onlyBindings("weights", weights, affine.WeightSizes(req)); err != nil {
		return nil, err
	}
	p, err := s.Candidate.Prepare(ctx, env, req, weights)
	if err != nil {
		return nil, err
	}
	return spyPrepared{p, req}, nil
}

type spyPrepared struct {
	sdk.Prepared
	req sdk.Request
}

func (p spyPrepared) Execute(ctx context.Context, io sdk.Buffers) error {
	allowed := affine.InputSizes(p.req)
	for k, v := range affine.OutputSizes(p.req) {
		allowed[k] = v
	}
	allowed[sdk.BufferWorkspace] = 0
	if err := onlyBindings("io", io, allowed); err != nil {
		return err
	}
	return p.Prepared.Execute(ctx, io)
}

func onlyBindings(what string, got sdk.Buffers, allowed map[string]int64) error {
	for name := range got {
		if _, ok := allowed[name]; !ok {
			return fmt.Errorf("spy: %s carried buffer %q, which this call does not need", what, name)
		}
	}
	return nil
}
