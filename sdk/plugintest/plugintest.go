// Package plugintest is the conformance suite for kcand plugins. A plugin's
// test calls Run with a command that starts the plugin binary; the suite
// starts it as a real process through the plugin protocol and checks the
// handshake, its description, admission, numbers against the family's
// float64 reference on fresh inputs (and on inputs that hold a NaN and an
// infinity), and its answers to bad input. RunShapes checks numbers on
// shapes of the plugin's choosing, and RunReproducible that a candidate
// gives the same bits on every run.
//
// The usual pattern re-executes the test binary as the plugin:
//
//	func TestMain(m *testing.M) {
//		if plugintest.IsPluginProcess() {
//			main()
//			return
//		}
//		os.Exit(m.Run())
//	}
//
//	func TestConformance(t *testing.T) {
//		plugintest.Run(t, plugintest.Self())
//	}
package plugintest

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"github.com/stretchr/testify/require"

	"github.com/kcand/kcand/cuda"
	"github.com/kcand/kcand/sdk"
	"github.com/kcand/kcand/sdk/device"
	"github.com/kcand/kcand/sdk/device/cpu"
	"github.com/kcand/kcand/sdk/family"
)

// IsPluginProcess reports whether this process was started by a kcand host
// (or this suite) as a plugin.
func IsPluginProcess() bool {
	return os.Getenv(sdk.Handshake.MagicCookieKey) == sdk.Handshake.MagicCookieValue
}

// Main is a plugin test binary's TestMain: when the suite (Run with Self)
// starts the binary as the plugin, it serves by calling serve, the
// plugin's main; otherwise it runs the tests and exits with their status.
//
//	func TestMain(m *testing.M) { plugintest.Main(m, main) }
func Main(m *testing.M, serve func()) {
	if IsPluginProcess() {
		serve()
		return
	}
	os.Exit(m.Run())
}

// Self returns a command that re-executes the running test binary.
func Self() func() *exec.Cmd {
	exe, err := os.Executable()
	if err != nil {
		exe = os.Args[0]
	}
	return func() *exec.Cmd { return exec.Command(exe, "-test.run=^$") }
}

// Start launches the plugin command through go-plugin (gRPC, AutoMTLS) and
// returns its protocol client; the process is killed when the test ends.
func Start(t testing.TB, command func() *exec.Cmd) sdk.Plugin {
	t.Helper()
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  sdk.Handshake,
		VersionedPlugins: sdk.PluginSets(nil),
		Cmd:              command(),
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		AutoMTLS:         true,
		StartTimeout:     20 * time.Second,
		Logger:           hclog.New(&hclog.LoggerOptions{Name: "plugin", Level: hclog.Warn, Output: os.Stderr}),
	})
	t.Cleanup(client.Kill)
	rpc, err := client.Client()
	require.NoError(t, err, "plugin handshake")
	raw, err := rpc.Dispense(sdk.PluginName)
	require.NoError(t, err, "dispense %q", sdk.PluginName)
	p, ok := raw.(sdk.Plugin)
	require.True(t, ok, "dispensed %T", raw)
	return p
}

// Run starts the plugin and runs the whole suite against it: on the CPU
// device always, and on the GPU when a CUDA driver and device are present
// (the GPU part skips, saying why, where there is none).
func Run(t *testing.T, command func() *exec.Cmd) {
	p := Start(t, command)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	desc, err := p.Describe(ctx)
	require.NoError(t, err)
	t.Run("Describe", func(t *testing.T) { checkDescription(t, desc) })
	t.Run("Admission", func(t *testing.T) { checkAdmission(t, ctx, p, desc) })
	t.Run("Numerics", func(t *testing.T) {
		dev := cpu.New()
		defer dev.Close()
		checkNumerics(t, ctx, p, desc, dev, Requests)
	})
	t.Run("NumericsGPU", func(t *testing.T) {
		dev := OpenGPU(t)
		checkNumerics(t, ctx, p, desc, dev, Requests)
	})
	t.Run("BadInput", func(t *testing.T) { checkBadInput(t, ctx, p, desc) })
}

// RunShapes starts the plugin and checks every admitted candidate on each
// of requests on dev against the float64 reference: for plugin tests that
// cover shapes beyond the conformance set (large or odd GPU shapes).
func RunShapes(t *testing.T, command func() *exec.Cmd, dev device.Device, requests []sdk.Request) {
	p := Start(t, command)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	desc, err := p.Describe(ctx)
	require.NoError(t, err)
	checkNumerics(t, ctx, p, desc, dev, func(f sdk.Family) []sdk.Request {
		var out []sdk.Request
		for _, r := range requests {
			if r.Family == f {
				out = append(out, r)
			}
		}
		return out
	})
}

// OpenGPU opens CUDA device 0 for a test, or skips the test saying why.
func OpenGPU(t *testing.T) device.Device {
	t.Helper()
	dev, err := cuda.OpenDevice(0)
	if err != nil {
		t.Skipf("no CUDA device: %v", err)
	}
	t.Cleanup(func() { dev.Close() })
	return dev
}

// Repeat names a candidate and the requests RunReproducible runs it on.
type Repeat struct {
	Candidate string
	Requests  []sdk.Request
}

// RunReproducible starts the plugin once and, for each case, runs its
// candidate runs times on one random sample of each of its requests on dev,
// each run into freshly poisoned outputs, and checks that every run gives
// the same bytes as the first and that the first passes the gate against
// the float64 reference: for candidates that promise bit-reproducible
// results. A request the candidate refuses on dev (another GPU
// generation) is skipped with its reason.
func RunReproducible(t *testing.T, command func() *exec.Cmd, dev device.Device, runs int, cases ...Repeat) {
	p := Start(t, command)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	seed := uint64(time.Now().UnixNano())
	t.Logf("random inputs drawn with seed %d on %s", seed, dev.Kind())
	for _, c := range cases {
		for i, req := range c.Requests {
			checkReproducible(t, ctx, p, dev, c.Candidate, req, seed+uint64(i), runs)
		}
	}
}

// checkReproducible is RunReproducible for one candidate and request.
func checkReproducible(t *testing.T, ctx context.Context, p sdk.Plugin, dev device.Device, candidate string, req sdk.Request, seed uint64, runs int) {
	t.Run(candidate+"/"+req.Key(), func(t *testing.T) {
		if ok, why := admission(t, ctx, p, req, dev.Profile(), candidate); !ok {
			t.Skipf("%s refuses %s on %s: %s", candidate, req.Key(), dev.Profile().Name, why)
		}
		contract, err := family.Lookup(req.Family)
		require.NoError(t, err)
		sample := contract.RandomSample(req, seed)
		first := runCandidate(t, ctx, p, dev, contract, req, candidate, sample, poisonNaN)
		require.NoError(t, contract.SpotCheck(req, sample, first, spotElements), "gate against the float64 reference")
		for r := 1; r < runs; r++ {
			again := runCandidate(t, ctx, p, dev, contract, req, candidate, sample, poisonNaN)
			for name, want := range first {
				require.True(t, bytes.Equal(want, again[name]), "run %d of %d: output %q differs from the first run's at %d of %d bytes",
					r+1, runs, name, differing(want, again[name]), len(want))
			}
		}
	})
}

// differing counts the bytes at which a and b differ (a length difference
// counts too).
func differing(a, b []byte) int {
	n := max(len(a), len(b)) - min(len(a), len(b))
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			n++
		}
	}
	return n
}
