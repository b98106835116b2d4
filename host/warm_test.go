package host

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kcand/kcand/sdk"
)

// TestPluginsOpenTheNamedDeviceAsTheyStart: a plugin told the host's
// device opens it before any request reaches it.
func TestPluginsOpenTheNamedDeviceAsTheyStart(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "opened")
	cfg := newHostConfig(t, pluginWarm)
	policy := cfg.policy
	h, err := Open(context.Background(), Options{PluginDir: cfg.dir, Device: "cpu", CachePath: cfg.cache, Policy: &policy, Logger: hclog.NewNullLogger(),
		Manager: ManagerOptions{Env: []string{sdk.EnvWarmDevice + "=cpu", envWarmMarker + "=" + marker}}})
	require.NoError(t, err)
	t.Cleanup(func() { h.Close() })
	waitFor(t, 10*time.Second, "the plugin to open its device", func() bool {
		_, err := os.Stat(marker)
		return err == nil
	})
	assert.EqualValues(t, 0, h.Stats().DeviceWork, "no request was planned")
}

func TestWarmDeviceEnvironment(t *testing.T) {
	t.Setenv(sdk.EnvWarmDevice, "")
	require.NoError(t, os.Unsetenv(sdk.EnvWarmDevice))
	cuda := sdk.EnvWarmDevice + "=cuda"
	caller := []string{"A=1"}
	assert.Equal(t, []string{"A=1", cuda}, warmDeviceEnv("cuda", caller), "a host on CUDA names it")
	assert.Equal(t, []string{"A=1"}, caller, "the caller's slice is not written")
	assert.Equal(t, caller, warmDeviceEnv("cpu", caller), "a host on the CPU names nothing")
	off := []string{sdk.EnvWarmDevice + "=none"}
	assert.Equal(t, off, warmDeviceEnv("cuda", off), "the caller's own value stands")

	t.Setenv(sdk.EnvWarmDevice, "none")
	assert.Equal(t, caller, warmDeviceEnv("cuda", caller), "so does the host's environment, which plugins inherit")
}
