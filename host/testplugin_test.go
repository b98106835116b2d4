package host

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kcand/kcand/sdk"
	"github.com/kcand/kcand/sdk/bf16"
	"github.com/kcand/kcand/sdk/device"
	"github.com/kcand/kcand/sdk/family/affine"
)

// Test plugins are the test binary started under another name; the name
// says how it misbehaves.
const (
	pluginProto2  = "proto2"  // speaks protocol version 2
	pluginWrong   = "wrong"   // candidate "wrong" gets one element wrong
	pluginOracle  = "oracle"  // candidate "oracle": the float64 reference, correct
	pluginBadPlan = "badplan" // candidate "badplan" exports a launch plan naming an unknown buffer
)

// serveTestPlugin serves the behaviour named by the binary's file name.
func serveTestPlugin(name string) {
	opts := sdk.Options{Name: name, Version: "test"}
	switch name {
	case pluginProto2:
		opts.ProtocolVersion = 2
		sdk.Serve(opts, oracle{name: "proto2-oracle"})
	case pluginWrong:
		sdk.Serve(opts, oracle{name: "wrong", corrupt: true})
	case pluginOracle:
		sdk.Serve(opts, oracle{name: "oracle"})
	case pluginBadPlan:
		sdk.Serve(opts, oracle{name: "badplan", badPlan: true})
	default:
		os.Stderr.WriteString("unknown test plugin " + name + "\n")
		os.Exit(3)
	}
}

// oracle is an affine candidate computing the float64 reference on the CPU
// device; with corrupt set it gets one element wrong.
type oracle struct {
	name    string
	corrupt bool
	badPlan bool
}

func (o oracle) Info() sdk.CandidateInfo {
	return sdk.CandidateInfo{Name: o.name, Family: sdk.FamilyAffine, Numeric: sdk.NumericBounded, Stability: sdk.Stable, Devices: []device.Kind{device.CPU}}
}

func (o oracle) Admit(req sdk.Request, _ device.Profile) sdk.Admission {
	if err := affine.Validate(req); err != nil {
		return sdk.Admission{Reason: err.Error()}
	}
	return sdk.Admission{Admitted: true, Reason: "test candidate"}
}

func (o oracle) Prepare(_ context.Context, _ sdk.Env, req sdk.Request, weights sdk.Buffers) (sdk.Prepared, error) {
	view, err := affine.NewHostView(req, weights)
	if err != nil {
		return nil, err
	}
	if o.badPlan {
		return &badPlanPrepared{oraclePrepared{o: o, view: view}}, nil
	}
	return &oraclePrepared{o: o, view: view}, nil
}

// badPlanPrepared exports a plan whose kernel would read a buffer the host
// never bound: the host must refuse it before any launch.
type badPlanPrepared struct{ oraclePrepared }

func (p *badPlanPrepared) Export() (sdk.LaunchPlan, error) {
	m := sdk.NewModule(sdk.ModuleCubin, []byte("not really a cubin"))
	return sdk.LaunchPlan{Modules: []sdk.Module{m}, Launches: []sdk.Launch{{
		Module: m.Hash, Function: "steal", Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{32, 1, 1},
		Params: []sdk.Param{sdk.BufferParam("host_secrets"), sdk.BufferParam(affine.Y)},
	}}}, nil
}

type oraclePrepared struct {
	o    oracle
	view *affine.HostView
}

func (p *oraclePrepared) WorkspaceBytes() int64 { return 0 }
func (p *oraclePrepared) Release() error        { return nil }

func (p *oraclePrepared) Execute(_ context.Context, io sdk.Buffers) error {
	x, y, err := p.view.IO(io)
	if err != nil {
		return err
	}
	weights := map[string][]byte{affine.Weight: p.view.Weight, affine.Scales: p.view.Scales, affine.Biases: p.view.Biases, affine.Bias: p.view.Bias}
	ref := affine.Reference(p.view.Req, weights, x)
	for i, v := range ref {
		bf16.Set(y, i, float32(v))
	}
	if p.o.corrupt {
		bf16.Set(y, len(ref)/2, float32(ref[len(ref)/2])+10)
	}
	return nil
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
