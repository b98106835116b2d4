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
	} {
		t.Run(c.name, func(t *testing.T) {
			adm := qmmStream{}.Admit(c.req, c.hw)
			assert.False(t, adm.Admitted)
			assert.Contains(t, adm.Reason, c.want)
		})
	}
	// Every width MLX writes: 2, 3, 5 and 6 bits unpack on the kernel's
	// general path.
	for _, bits := range []int{2, 3, 4, 5, 6, 8} {
		adm := qmmStream{}.Admit(plugintest.AffineRequest(16, 4096, 4096, bits, 64, false), hopper())
		assert.True(t, adm.Admitted, "%d bits: %s", bits, adm.Reason)
	}
}

func TestStreamCandidateRefusesWhatTheKernelCannotCopy(t *testing.T) {
	for _, c := range []struct {
		name string
		req  sdk.Request
		hw   device.Profile
		want string
	}{
		{"45 groups of 24 bytes", plugintest.AffineRequest(16, 2880, 64, 3, 64, false), hopper(), "in_features/group_size=45"},
	} {
		t.Run(c.name, func(t *testing.T) {
			adm := qmmStream{}.Admit(c.req, c.hw)
			assert.False(t, adm.Admitted)
			assert.Contains(t, adm.Reason, c.want)
		})
	}
}
