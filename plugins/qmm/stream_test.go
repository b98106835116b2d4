package main

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/kcand/kcand/sdk"
	"github.com/kcand/kcand/sdk/device"
	"github.com/kcand/kcand/sdk/plugintest"
)

func TestStreamCandidateServesSmallBatchesOnly(t *testing.T) {
	adm := qmmStream{}.Admit(int4Request(16, 4096, 4096), hopper())
	assert.True(t, adm.Admitted, adm.Reason)
	assert.Contains(t, adm.Reason, "stream MT=")

	for _, c := range []struct {
		name string
		req  sdk.Request
		hw   device.Profile
		want string
	}{
		{"cpu", int4Request(16, 4096, 4096), device.Profile{Kind: device.CPU}, "needs a CUDA device"},
		{"decode", int4Request(8, 4096, 4096), hopper(), "serves 9 to 32 tokens, not 8"},
		{"prefill", int4Request(33, 4096, 4096), hopper(), "1 to 32 tokens, not 33"},
		{"3 bits", plugintest.AffineRequest(16, 4096, 4096, 3, 64, false), hopper(), "4 and 8 bits, not 3"},
	} {
		t.Run(c.name, func(t *testing.T) {
			adm := qmmStream{}.Admit(c.req, c.hw)
			assert.False(t, adm.Admitted)
			assert.Contains(t, adm.Reason, c.want)
		})
	}
}
