package host

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/kcand/kcand/internal/testbuild"
	"github.com/kcand/kcand/sdk/plugintest"
)

// realPlugins holds the repository's plugin binaries, built once by TestMain.
var realPlugins string

// TestMain builds the real plugins, and lets the test binary act as a fault
// plugin (chosen by the name it was started under) or as a host process.
func TestMain(m *testing.M) {
	if plugintest.IsPluginProcess() {
		serveTestPlugin(filepath.Base(os.Args[0]))
		return
	}
	if os.Getenv(hostModeEnv) != "" {
		runHostMode()
		return
	}
	dir, err := testbuild.BuildPlugins()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	realPlugins = dir
	os.Setenv(PluginDirEnv, dir) // for the Example, which reads it as an engine would
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
