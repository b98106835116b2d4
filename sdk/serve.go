package sdk

import (
	"fmt"
	"os"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"

	"github.com/kcand/kcand/sdk/device"
)

// Options configure Serve.
type Options struct {
	// Name and Version identify the plugin in the host's listings and cache
	// validators.
	Name    string
	Version string
	// ProtocolVersion overrides the protocol this plugin claims to speak. Zero
	// means ProtocolVersion; anything else exists to test the host's refusal.
	ProtocolVersion int
	// ParentPollInterval is how often the plugin checks that the host is
	// alive; zero means 200 ms.
	ParentPollInterval time.Duration
}

// Serve runs a plugin process serving candidates until the host stops it or
// dies. A plugin's main calls it and nothing else: it logs as hclog JSON on
// stderr (which the host forwards under the plugin's name), writes nothing
// on stdout but the go-plugin handshake, and exits when its parent exits so
// that no plugin outlives its host.
func Serve(opts Options, candidates ...Candidate) {
	logger := PluginLogger(opts.Name)
	rt, err := NewRuntime(opts.Name, opts.Version, logger, candidates...)
	if err != nil {
		logger.Error("cannot serve", "error", err)
		fmt.Fprintf(os.Stderr, "%s: %v\n", opts.Name, err)
		os.Exit(1)
	}
	defer rt.Close()
	rt.ExitOnContextLoss()
	if kind := os.Getenv(EnvWarmDevice); kind != "" {
		rt.WarmDevice(device.Kind(kind))
	}
	ServePlugin(opts, logger, rt)
}

// PluginLogger is the logger Serve uses: hclog JSON on stderr, which the
// host parses and forwards under the plugin's name.
func PluginLogger(name string) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{
		Name:       name,
		Level:      hclog.LevelFromString(envOr("KCAND_PLUGIN_LOG_LEVEL", "info")),
		Output:     os.Stderr,
		JSONFormat: true,
	})
}

// ServePlugin serves an implementation of the protocol itself, for plugins
// that need more control than Candidate gives (most should use Serve). It
// watches the parent like Serve and returns when the host stops it.
func ServePlugin(opts Options, logger hclog.Logger, impl Plugin) {
	go watchParent(logger, opts.ParentPollInterval)

	version := opts.ProtocolVersion
	if version == 0 {
		version = ProtocolVersion
	}
	handshake := Handshake
	handshake.ProtocolVersion = uint(version)
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: handshake,
		VersionedPlugins: map[int]plugin.PluginSet{
			version: {PluginName: &GRPCPlugin{Impl: impl}},
		},
		GRPCServer: plugin.DefaultGRPCServer,
		Logger:     logger,
	})
}

// watchParent exits the process once its parent is gone. Linux re-parents an
// orphan to init or a subreaper, so a changed parent pid means the host died
// (even by SIGKILL, when it could not stop us itself).
func watchParent(logger hclog.Logger, every time.Duration) {
	if every <= 0 {
		every = 200 * time.Millisecond
	}
	parent := os.Getppid()
	for {
		if ppid := os.Getppid(); ppid != parent || ppid == 1 {
			logger.Warn("host process is gone; exiting", "parent", parent, "now", ppid)
			os.Exit(2)
		}
		time.Sleep(every)
	}
}

func envOr(key, fallback string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return fallback
}
