package host

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLostDeviceContextRestartsThePluginAtOnce is the CPU stand-in for a
// kernel fault: the plugin's execution fails with a sticky CUDA error
// (illegal address). The host stops that process at once, so the next
// measurement runs in a fresh process instead of meeting the dying one.
func TestLostDeviceContextRestartsThePluginAtOnce(t *testing.T) {
	h := openHost(t, "qmm", pluginLostCtx)
	ctx := context.Background()
	lost, ok := h.Manager().Lookup(pluginLostCtx)
	require.True(t, ok)
	req := affineRequest(1, 256, 64, 4, 64)
	for round := 1; round <= 2; round++ {
		before := lost.Health().Generation
		d, err := h.Measure(ctx, req)
		require.NoError(t, err)
		// Right away, not after the plugin's own exit: the failed process
		// no longer serves.
		if now := lost.Health(); now.Running {
			assert.Greater(t, now.Generation, before, "round %d: the process whose context was lost still serves", round)
		}
		assert.Equal(t, "qmm", d.Choice, "round %d", round)
		var found bool
		for _, m := range d.Measurements {
			if m.Candidate != "lostctx" {
				continue
			}
			found = true
			assert.Equal(t, VerdictFailed, m.Verdict, "round %d", round)
			assert.Contains(t, m.Reason, "device context lost", "round %d", round)
			assert.Contains(t, m.Reason, "CUDA_ERROR_ILLEGAL_ADDRESS", "round %d: the call that broke the context is reported, not a later one", round)
		}
		require.True(t, found, "round %d: lostctx measured", round)
		waitFor(t, 20*time.Second, "lostctx restarted", func() bool {
			hl := lost.Health()
			return hl.Restarts >= round && hl.Running
		})
	}
}
