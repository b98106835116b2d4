package main

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/kcand/kcand/sdk"
	"github.com/kcand/kcand/sdk/device"
	"github.com/kcand/kcand/sdk/plugintest"
)

// TestMain lets the test binary serve as the plugin when the suite starts it.
func TestMain(m *testing.M) { plugintest.Main(m, main) }

// TestConformance runs the SDK's conformance suite against the example,
// started as a real process: what every plugin should pass before it ships.
func TestConformance(t *testing.T) {
	plugintest.Run(t, plugintest.Self())
}

// The example refuses, with a reason, what it does not serve.
func TestAdmissionSaysWhy(t *testing.T) {
	cpu := device.Profile{Kind: device.CPU}
	req := plugintest.AffineRequest(1, 512, 256, 4, 64, false)
	assert.True(t, dot{}.Admit(req, cpu).Admitted)

	req.Tokens = 5
	assert.Contains(t, dot{}.Admit(req, cpu).Reason, "serves 1 to 4 tokens, not 5")
	req.Tokens = 1
	assert.Contains(t, dot{}.Admit(req, device.Profile{Kind: device.CUDA}).Reason, "runs on the CPU device")
	req.InFeatures = 500
	assert.False(t, dot{}.Admit(req, cpu).Admitted, "in_features not a multiple of the group")
	assert.Equal(t, sdk.FamilyAffine, dot{}.Info().Family)
}
