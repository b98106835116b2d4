package host

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kcand/kcand/sdk"
	"github.com/kcand/kcand/sdk/family/affine"
)

func startManager(t *testing.T, dir string, opts ManagerOptions) *Manager {
	t.Helper()
	opts.Dir = dir
	m, err := StartManager(context.Background(), opts)
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	return m
}

func TestManagerStartsAndDescribesPlugins(t *testing.T) {
	m := startManager(t, pluginDir(t, "qmm", "gemv", "mxfp4", "fp8tc"), ManagerOptions{})
	require.Empty(t, m.Refused())
	names := []string{}
	for _, p := range m.Plugins() {
		names = append(names, p.Name())
		h := p.Health()
		assert.True(t, h.Running, "%s running", p.Name())
		assert.NotZero(t, h.PID)
		assert.Positive(t, h.StartTook, "%s: launch-to-description time recorded", p.Name())
		assert.Len(t, p.Digest(), 64)
	}
	assert.Equal(t, []string{"fp8tc", "gemv", "mxfp4", "qmm"}, names)
	qmm, ok := m.Lookup("qmm")
	require.True(t, ok)
	cands := qmm.Description().Candidates
	require.Len(t, cands, 5)
	assert.True(t, cands[0].Fallback, "the fallback comes first")
	names = names[:0]
	for _, c := range cands {
		names = append(names, c.Name)
	}
	assert.Equal(t, []string{"qmm", "qmm/stream", "qmm/bulk", "qmm/wave", "qmm/wgmma"}, names)
	mx, _ := m.Lookup("mxfp4")
	assert.Empty(t, mx.Description().Candidates, "placeholder plugins offer no candidates")
}

func TestChecksumMismatchIsRefusedWithBothDigests(t *testing.T) {
	dir := pluginDir(t, "qmm", "gemv")
	wrong := strings.Repeat("ab", 32)
	require.NoError(t, os.WriteFile(dir+"/"+SumsFile, []byte(wrong+"  gemv\n"), 0o644))
	m := startManager(t, dir, ManagerOptions{})
	require.Len(t, m.Refused(), 1)
	var ce *ChecksumError
	require.True(t, errors.As(m.Refused()[0].Err, &ce), "got %v", m.Refused()[0].Err)
	actual, err := fileDigest(dir + "/gemv")
	require.NoError(t, err)
	assert.Equal(t, wrong, ce.Want)
	assert.Equal(t, actual, ce.Got)
	assert.Contains(t, ce.Error(), wrong)
	assert.Contains(t, ce.Error(), actual)
	_, ok := m.Lookup("qmm")
	assert.True(t, ok, "the other plugin still runs")
}

func TestMalformedSumsFileIsAnError(t *testing.T) {
	dir := pluginDir(t, "qmm")
	require.NoError(t, os.WriteFile(dir+"/"+SumsFile, []byte("nothex  qmm\n"), 0o644))
	_, err := StartManager(context.Background(), ManagerOptions{Dir: dir})
	require.Error(t, err)
	assert.Contains(t, err.Error(), SumsFile+":1")
}

func TestProtocolVersionMismatchIsRefusedNamingBothVersions(t *testing.T) {
	m := startManager(t, pluginDir(t, "qmm", pluginProto2), ManagerOptions{})
	require.Len(t, m.Refused(), 1)
	var pe *ProtocolVersionError
	require.True(t, errors.As(m.Refused()[0].Err, &pe), "got %v", m.Refused()[0].Err)
	next := sdk.ProtocolVersion + 1
	assert.Equal(t, fmt.Sprint(next), pe.PluginVersion)
	assert.Equal(t, []int{sdk.ProtocolVersion}, pe.HostVersions)
	assert.Contains(t, pe.Error(), fmt.Sprintf("version %d", next))
	assert.Contains(t, pe.Error(), fmt.Sprintf("[%d]", sdk.ProtocolVersion))
}

func TestWorldWritablePluginIsRefused(t *testing.T) {
	dir := pluginDir(t, "qmm")
	require.NoError(t, os.Chmod(dir+"/qmm", 0o757))
	_, err := StartManager(context.Background(), ManagerOptions{Dir: dir})
	var pe *PermissionError
	require.True(t, errors.As(err, &pe), "got %v", err)
	assert.Equal(t, dir+"/qmm", pe.Path)
}

func TestMissingPluginDirIsAnInvalidRequest(t *testing.T) {
	_, err := StartManager(context.Background(), ManagerOptions{Dir: "/no/such/dir"})
	assertFieldError(t, err, "plugin_dir", "/no/such/dir")
}

func TestKilledPluginIsRestarted(t *testing.T) {
	m := startManager(t, pluginDir(t, "qmm"), ManagerOptions{})
	p, _ := m.Lookup("qmm")
	before := p.Health()
	require.NoError(t, syscall.Kill(before.PID, syscall.SIGKILL))
	waitFor(t, 10*time.Second, "restart", func() bool {
		h := p.Health()
		return h.Running && h.Restarts == 1 && h.PID != before.PID
	})
	assert.Equal(t, before.Generation+1, p.Generation())
	d, err := p.Client().Describe(context.Background())
	require.NoError(t, err)
	assert.Equal(t, "qmm", d.Name)
}

func TestReplacedBinaryIsRefusedAtRestart(t *testing.T) {
	dir := pluginDir(t, "qmm", "gemv")
	m := startManager(t, dir, ManagerOptions{})
	p, _ := m.Lookup("gemv")
	// Swap gemv for another binary, then kill it: the restart must refuse it.
	other, err := os.ReadFile(dir + "/qmm")
	require.NoError(t, err)
	require.NoError(t, os.Remove(dir+"/gemv"))
	require.NoError(t, os.WriteFile(dir+"/gemv", other, 0o755))
	require.NoError(t, syscall.Kill(p.Health().PID, syscall.SIGKILL))
	waitFor(t, 10*time.Second, "refused restart", func() bool {
		return strings.Contains(p.Health().LastError, "pinned")
	})
	assert.False(t, p.Health().Running)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err = p.Client().Describe(ctx)
	assert.ErrorIs(t, err, sdk.ErrUnavailable)
}

// TestPreparedIDsDieWithTheirProcess checks that an id prepared before a
// restart is refused as stale, never sent to the new process.
func TestPreparedIDsDieWithTheirProcess(t *testing.T) {
	h := openHost(t, "qmm")
	req := affineRequest(1, 256, 64, 4, 64)
	w, err := h.RegisterWeights(req, affine.RandomSample(req, 3).Weights)
	require.NoError(t, err)
	defer w.Close()
	p, _ := h.Manager().Lookup("qmm")
	client := p.Client()
	info, err := client.Prepare(context.Background(), sdk.PrepareRequest{Candidate: "qmm", Request: req, Hardware: h.Hardware(), Weights: w.handles})
	require.NoError(t, err)
	require.NoError(t, syscall.Kill(p.Health().PID, syscall.SIGKILL))
	waitFor(t, 10*time.Second, "restart", func() bool { return p.Health().Running && p.Health().Restarts == 1 })
	_, err = client.Execute(context.Background(), sdk.ExecuteRequest{PreparedID: info.ID})
	assert.ErrorIs(t, err, ErrStale)
	_, err = client.Benchmark(context.Background(), sdk.BenchmarkRequest{PreparedID: info.ID, Iterations: 1})
	assert.ErrorIs(t, err, ErrStale)
	assert.NoError(t, client.Release(context.Background(), info.ID, nil), "releasing state that died with its process is a no-op")
}
