package main

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/kcand/kcand/internal/affinegpu"
	"github.com/kcand/kcand/sdk"
	"github.com/kcand/kcand/sdk/device"
	"github.com/kcand/kcand/sdk/plugintest"
)

func TestBulkCandidateServesSmallBatchesInSlices(t *testing.T) {
	adm := qmmBulk{}.Admit(int4Request(16, 8192, 28672), hopper())
	assert.True(t, adm.Admitted, adm.Reason)
	assert.Contains(t, adm.Reason, "4 K slices")

	for _, c := range []struct {
		name string
		req  sdk.Request
		hw   device.Profile
		want string
	}{
		{"cpu", int4Request(16, 4096, 4096), device.Profile{Kind: device.CPU}, "needs a CUDA device"},
		{"before Hopper", int4Request(16, 4096, 4096), device.Profile{Kind: device.CUDA, ComputeCapability: "8.0", Multiprocessors: 108}, "compute capability 9.0"},
		{"decode", int4Request(8, 4096, 4096), hopper(), "serves 9 to 16 tokens, not 8 (decode is the gemv plugin's)"},
		{"17 tokens", int4Request(17, 4096, 4096), hopper(), "serves 9 to 16 tokens, not 17"},
		{"8 bits", plugintest.AffineRequest(16, 4096, 4096, 8, 64, false), hopper(), "need 4 bits, not 8"},
		{"no slices", plugintest.AffineRequest(16, 2880, 2880, 4, 32, false), hopper(), "in_features=2880 does not split"},
	} {
		t.Run(c.name, func(t *testing.T) {
			adm := qmmBulk{}.Admit(c.req, c.hw)
			assert.False(t, adm.Admitted)
			assert.Contains(t, adm.Reason, c.want)
		})
	}
	assert.NotContains(t, qmmBulk{}.Admit(int4Request(256, 4096, 4096), hopper()).Reason, "decode", "256 tokens are not decode")
}

// TestBulkVariantsCompile compiles the bulk variant qmm/bulk runs for every
// GPU test shape it serves (NVRTC 12 or newer: tensor copies are PTX ISA
// 8.0).
func TestBulkVariantsCompile(t *testing.T) {
	plugintest.CompileVariants(t, affinegpu.BulkSource, func(req sdk.Request, sms int) plugintest.Choice {
		hw := hopper()
		hw.Multiprocessors = sms
		cfg, why := bulkAdmit(req, hw)
		if why != "" {
			return plugintest.Choice{}
		}
		grid, block, shared := cfg.Launch(req, sms)
		return plugintest.Choice{OK: true, Source: &affinegpu.BulkSource, Variant: cfg.Variant(),
			Grid: grid, Block: block, SharedBytes: shared, MinNVRTC: 12}
	})
}
