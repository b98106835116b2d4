// Command kcand lists kernel plugins and tunes requests through them.
//
//	kcand plugins [--plugin-dir DIR]
//	kcand tune    [--plugin-dir DIR] [--device cpu|cuda|auto]
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
)

const usage = `usage: kcand <command> [flags]

commands:
  plugins   list plugins: name, version, sha256, candidates, health
  tune      tune the built-in demo requests and print each decision

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
}

func (c *commonFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.pluginDir, "plugin-dir", defaultPluginDir(), "directory of plugin binaries (env "+host.PluginDirEnv+")")
	fs.StringVar(&c.device, "device", "auto", "device: cpu, cuda or auto")
	fs.StringVar(&c.logLevel, "log-level", "warn", "log level on stderr: trace, debug, info, warn, error")
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
	return host.Open(ctx, host.Options{PluginDir: c.pluginDir, Device: c.device, Logger: logger})
}
