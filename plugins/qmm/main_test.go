package main

import (
	"os"
	"testing"

	"github.com/kcand/kcand/sdk/plugintest"
)

// TestMain lets the test binary serve as the plugin when the suite starts it.
func TestMain(m *testing.M) {
	if plugintest.IsPluginProcess() {
		main()
		return
	}
	os.Exit(m.Run())
}

// TestConformance runs the SDK's conformance suite against this plugin,
// started as a real process.
func TestConformance(t *testing.T) {
	plugintest.Run(t, plugintest.Self())
}
