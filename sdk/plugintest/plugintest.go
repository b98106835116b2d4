// Package plugintest is the conformance suite for kcand plugins. A plugin's
// test calls Run with a command that starts the plugin binary; the suite
// starts it as a real process through the plugin protocol and checks the
// handshake, its description, admission, numbers against the family's
// float64 reference on fresh inputs, and its answers to bad input.
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
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"github.com/stretchr/testify/require"

	"github.com/kcand/kcand/sdk"
)

// IsPluginProcess reports whether this process was started by a kcand host
// (or this suite) as a plugin.
func IsPluginProcess() bool {
	return os.Getenv(sdk.Handshake.MagicCookieKey) == sdk.Handshake.MagicCookieValue
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

// Run starts the plugin and runs the whole suite against it.
func Run(t *testing.T, command func() *exec.Cmd) {
	p := Start(t, command)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	desc, err := p.Describe(ctx)
	require.NoError(t, err)
	t.Run("Describe", func(t *testing.T) { checkDescription(t, desc) })
	t.Run("Admission", func(t *testing.T) { checkAdmission(t, ctx, p, desc) })
	t.Run("Numerics", func(t *testing.T) { checkNumerics(t, ctx, p, desc) })
	t.Run("BadInput", func(t *testing.T) { checkBadInput(t, ctx, p, desc) })
}
