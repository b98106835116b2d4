package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/kcand/kcand/sdk"
	"github.com/kcand/kcand/sdk/device"
	"github.com/kcand/kcand/sdk/plugintest"
)

// gemv/bulk says why it refuses a request: the device, the token count,
// the bits, and groups that do not split into stages.
func TestBulkAdmission(t *testing.T) {
	a := plugintest.AffineRequest
	h200 := device.Profile{Kind: device.CUDA, ComputeCapability: "9.0", Multiprocessors: 132}
	a100 := device.Profile{Kind: device.CUDA, ComputeCapability: "8.0", Multiprocessors: 108}
	tests := []struct {
		name string
		req  sdk.Request
		hw   device.Profile
		why  string // empty: admitted
	}{
		{"decode on the H200", a(1, 4096, 4096, 4, 64, false), h200, ""},
		{"8 bits with a bias", a(1, 4096, 14336, 8, 128, true), h200, ""},
		{"before Hopper", a(1, 4096, 4096, 4, 64, false), a100, "compute capability 9.0"},
		{"on the CPU", a(1, 4096, 4096, 4, 64, false), device.Profile{Kind: device.CPU}, "CUDA device"},
		{"four tokens", a(4, 4096, 4096, 4, 64, false), h200, ""},
		{"eight tokens at 8 bits", a(8, 4096, 14336, 8, 64, true), h200, ""},
		{"nine tokens", a(9, 4096, 4096, 4, 64, false), h200, "serves 1 to 8 tokens, not 9"},
		{"3 bits", a(1, 4096, 4096, 3, 64, false), h200, "4 and 8 bits, not 3"},
		{"groups that do not split", a(1, 2880, 2880, 4, 32, false), h200, "90 groups"},
		{"rows not a multiple of 8", a(1, 4096, 4100, 4, 64, false), h200, "multiple of 8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			adm := gemvBulk{}.Admit(tt.req, tt.hw)
			if tt.why == "" {
				assert.True(t, adm.Admitted, adm.Reason)
				return
			}
			assert.False(t, adm.Admitted)
			assert.True(t, strings.Contains(adm.Reason, tt.why), "reason %q, want it to mention %q", adm.Reason, tt.why)
		})
	}
}
