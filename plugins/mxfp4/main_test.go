package main

import (
	"testing"

	"github.com/kcand/kcand/sdk/plugintest"
)

// TestMain lets the test binary serve as the plugin when the suite starts it.
func TestMain(m *testing.M) { plugintest.Main(m, main) }

// TestConformance runs the SDK's conformance suite against this plugin,
// started as a real process.
func TestConformance(t *testing.T) {
	plugintest.Run(t, plugintest.Self())
}
