// Command kcand lists kernel plugins and tunes requests through them.
//
//	kcand plugins [--plugin-dir DIR] [--device cpu|cuda|auto]
//	kcand tune    [--plugin-dir DIR] [--device cpu|cuda|auto] [--cache FILE] [--config FILE]
//	kcand cache   show|clear [--cache FILE]
//	kcand faults  [--runs N] [--markdown FILE]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/hashicorp/go-hclog"

	"github.com/kcand/kcand/host"
	"github.com/kcand/kcand/sdk"
)

const usage = `usage: kcand <command> [flags]

commands:
  plugins   list plugins: name, version, sha256, candidates, health
  tune      plan the built-in demo requests (measuring what is not cached)
  cache     show or clear the plan cache
  faults    run the fault-injection suite (writes docs/reliability.md with --markdown)

Run "kcand <command> -h" for the flags of a command.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "kcand:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("no command")
	}
	switch args[0] {
	case "plugins":
		return runPlugins(ctx, args[1:], stdout, stderr)
	case "tune":
		return runTune(ctx, args[1:], stdout, stderr)
	case "cache":
		return runCache(args[1:], stdout, stderr)
	case "faults":
		return runFaults(ctx, args[1:], stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q", args[0])
}

// commonFlags are the flags every command shares.
type commonFlags struct {
	pluginDir string
	device    string
	logLevel  string
	cache     string
	config    string
	// tuneAll widens the tuning policy to every request of every family.
	tuneAll bool
	// measure tunes measurement (tune's flags set it).
	measure host.MeasureOptions
}

func (c *commonFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.pluginDir, "plugin-dir", defaultPluginDir(), "directory of plugin binaries (env "+host.PluginDirEnv+")")
	fs.StringVar(&c.device, "device", "auto", "device: cpu, cuda or auto")
	fs.StringVar(&c.logLevel, "log-level", "warn", "log level on stderr: trace, debug, info, warn, error")
	fs.StringVar(&c.cache, "cache", host.DefaultCachePath(), "plan cache file; empty keeps plans in memory (env "+host.CacheFileEnv+")")
	fs.StringVar(&c.config, "config", "", "policy file (JSON); KCAND_* variables override it")
}

// defaultPluginDir is $KCAND_PLUGIN_DIR, else "plugins" beside the kcand binary.
func defaultPluginDir() string {
	if dir := os.Getenv(host.PluginDirEnv); dir != "" {
		return dir
	}
	exe, err := os.Executable()
	if err != nil {
		return "plugins"
	}
	return filepath.Join(filepath.Dir(exe), "plugins")
}

func (c *commonFlags) open(ctx context.Context, stderr io.Writer) (*host.Host, error) {
	logger := hclog.New(&hclog.LoggerOptions{Name: "kcand", Level: hclog.LevelFromString(c.logLevel), Output: stderr})
	policy, err := host.LoadPolicy(c.config)
	if err != nil {
		return nil, err
	}
	if c.tuneAll {
		policy.Tune = nil
		for _, f := range sdk.Families {
			policy.Tune = append(policy.Tune, host.TuneRule{Family: f})
		}
	}
	return host.Open(ctx, host.Options{PluginDir: c.pluginDir, Device: c.device, Logger: logger, Policy: &policy, CachePath: c.cache, Measure: c.measure})
}
