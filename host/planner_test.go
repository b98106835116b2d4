package host

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kcand/kcand/sdk"
)

// logBuffer collects a host's JSON log lines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// lines returns the log lines whose message is msg.
func (b *logBuffer) lines(msg string) []map[string]any {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(b.buf.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["@message"] == msg {
			out = append(out, m)
		}
	}
	return out
}

type hostConfig struct {
	dir    string
	cache  string
	policy Policy
	logs   *logBuffer
	// forceRemote runs every candidate in its plugin (openGPUHost only).
	forceRemote bool
}

func newHostConfig(t *testing.T, plugins ...string) *hostConfig {
	return &hostConfig{dir: pluginDir(t, plugins...), cache: filepath.Join(t.TempDir(), "plans.json"), policy: DefaultPolicy(), logs: &logBuffer{}}
}

func (c *hostConfig) open(t *testing.T) *Host {
	t.Helper()
	logger := hclog.New(&hclog.LoggerOptions{Output: c.logs, JSONFormat: true, Level: hclog.Debug})
	policy := c.policy
	h, err := Open(context.Background(), Options{PluginDir: c.dir, Device: "cpu", CachePath: c.cache, Policy: &policy, Logger: logger})
	require.NoError(t, err)
	t.Cleanup(func() { h.Close() })
	return h
}

func decodeKeys(n int) []sdk.Request {
	var out []sdk.Request
	for i := 0; i < n; i++ {
		out = append(out, affineRequest(1, 256, 64+8*i, 4, 64))
	}
	return out
}

func TestSecondRunIsCachedAndDoesNoDeviceWork(t *testing.T) {
	cfg := newHostConfig(t, "qmm", "gemv")
	first := cfg.open(t)
	for _, req := range decodeKeys(3) {
		p, err := first.Plan(context.Background(), req)
		require.NoError(t, err)
		assert.Equal(t, SourceMeasured, p.Source)
		assert.Greater(t, p.AverageMicros, 0.0)
	}
	assert.EqualValues(t, 3, first.Stats().Tunings)
	assert.Greater(t, first.Stats().DeviceWork, int64(0))
	first.Close()

	second := cfg.open(t)
	for _, req := range decodeKeys(3) {
		p, err := second.Plan(context.Background(), req)
		require.NoError(t, err)
		assert.Equal(t, SourceCached, p.Source, "%s", req.Key())
	}
	st := second.Stats()
	assert.EqualValues(t, 0, st.Tunings)
	assert.EqualValues(t, 3, st.CacheHits)
	assert.EqualValues(t, 0, st.DeviceWork, "a cache hit does no device work")
}

func TestConcurrentPlannersTuneEachKeyOnce(t *testing.T) {
	for _, wait := range []bool{false, true} {
		t.Run(map[bool]string{false: "fallback meanwhile", true: "wait"}[wait], func(t *testing.T) {
			cfg := newHostConfig(t, "qmm", "gemv")
			cfg.policy.WaitForTuning = wait
			h := cfg.open(t)
			keys := decodeKeys(8)
			var wg sync.WaitGroup
			errs := make(chan error, 64*len(keys))
			sources := make(chan PlanSource, 64*len(keys))
			for g := 0; g < 64; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range keys {
						p, err := h.Plan(context.Background(), keys[(i+g)%len(keys)])
						if err != nil {
							errs <- err
							continue
						}
						sources <- p.Source
					}
				}()
			}
			wg.Wait()
			close(errs)
			close(sources)
			for err := range errs {
				t.Error(err)
			}
			counts := map[PlanSource]int{}
			for s := range sources {
				counts[s]++
			}
			assert.EqualValues(t, 8, h.Stats().Tunings, "exactly one tuning per key")
			if wait {
				assert.Equal(t, 64*8, counts[SourceMeasured], "waiters get the measured plan")
			} else {
				assert.Equal(t, 64*8, counts[SourceMeasured]+counts[SourceFallback])
			}
			for _, req := range keys {
				p, err := h.Plan(context.Background(), req)
				require.NoError(t, err)
				assert.Equal(t, SourceMeasured, p.Source, "after tuning, every caller gets the measured plan")
			}
		})
	}
}

func TestDecisionsAreTracedOneLineEach(t *testing.T) {
	cfg := newHostConfig(t, "qmm", "gemv")
	cfg.policy.Tune = []TuneRule{{Family: sdk.FamilyAffine, Phase: sdk.PhaseDecode, MinTokens: 1, MaxTokens: 1}}
	h := cfg.open(t)
	req := decodeKeys(1)[0]
	_, err := h.Plan(context.Background(), req)
	require.NoError(t, err)
	prefill := affineRequest(32, 256, 64, 4, 64)
	prefill.Phase = sdk.PhasePrefill
	_, err = h.Plan(context.Background(), prefill)
	require.NoError(t, err)
	lines := cfg.logs.lines("plan")
	require.Len(t, lines, 2)
	assert.Equal(t, "info", lines[0]["@level"])
	assert.Equal(t, req.Key(), lines[0]["request"])
	assert.Equal(t, "measured", lines[0]["source"])
	assert.Greater(t, lines[0]["average_us"], 0.0)
	assert.Contains(t, []any{"qmm", "gemv"}, lines[0]["candidate"])
	assert.Equal(t, "debug", lines[1]["@level"])
	assert.Equal(t, "fallback", lines[1]["source"])
}

func TestCorruptCacheIsSetAside(t *testing.T) {
	cfg := newHostConfig(t, "qmm", "gemv")
	require.NoError(t, os.WriteFile(cfg.cache, []byte("{not json"), 0o644))
	h := cfg.open(t)
	p, err := h.Plan(context.Background(), decodeKeys(1)[0])
	require.NoError(t, err)
	assert.Equal(t, SourceMeasured, p.Source)
	aside, _ := filepath.Glob(cfg.cache + ".corrupt-*")
	require.Len(t, aside, 1, "the corrupt file is kept for inspection")
	data, _ := os.ReadFile(aside[0])
	assert.Equal(t, "{not json", string(data))
	assert.Len(t, cfg.logs.lines("plan cache unreadable; set aside, starting empty"), 1)
	var fresh cacheFile
	data, err = os.ReadFile(cfg.cache)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, &fresh), "a valid cache was written again")
	assert.Len(t, fresh.Entries, 1)
}

// editCache rewrites the cache file through fn.
func editCache(t *testing.T, path string, fn func(*cacheFile)) {
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var f cacheFile
	require.NoError(t, json.Unmarshal(data, &f))
	fn(&f)
	data, err = json.Marshal(f)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, data, 0o644))
}

func TestCacheFromAnotherPluginBuildIsDropped(t *testing.T) {
	cfg := newHostConfig(t, "qmm", "gemv")
	first := cfg.open(t)
	for _, req := range decodeKeys(2) {
		_, err := first.Plan(context.Background(), req)
		require.NoError(t, err)
	}
	first.Close()
	editCache(t, cfg.cache, func(f *cacheFile) {
		e := f.Entries[decodeKeys(1)[0].Key()]
		e.Plugins["gemv"] = PluginStamp{Version: "0.0.1", SHA256: strings.Repeat("0", 64)}
		f.Entries[decodeKeys(1)[0].Key()] = e
	})
	second := cfg.open(t)
	warnings := cfg.logs.lines("dropping plan cache entries measured with other plugin builds")
	require.Len(t, warnings, 1, "one warning")
	assert.EqualValues(t, 1, warnings[0]["dropped"])
	assert.Contains(t, warnings[0]["why"], "plugin gemv sha256 changed")
	p0, err := second.Plan(context.Background(), decodeKeys(2)[0])
	require.NoError(t, err)
	assert.Equal(t, SourceMeasured, p0.Source, "the dropped entry is measured again")
	p1, err := second.Plan(context.Background(), decodeKeys(2)[1])
	require.NoError(t, err)
	assert.Equal(t, SourceCached, p1.Source, "the other entry still holds")
}

func TestCacheFromOtherHardwareIsDropped(t *testing.T) {
	cfg := newHostConfig(t, "qmm", "gemv")
	first := cfg.open(t)
	_, err := first.Plan(context.Background(), decodeKeys(1)[0])
	require.NoError(t, err)
	first.Close()
	editCache(t, cfg.cache, func(f *cacheFile) { f.Validators.GPU = "NVIDIA H200" })
	second := cfg.open(t)
	assert.Len(t, cfg.logs.lines("plan cache was written for other hardware or host; dropping every entry"), 1)
	assert.Empty(t, second.Cache().Entries())
}

func TestUnwritableCacheKeepsTheHostRunning(t *testing.T) {
	cfg := newHostConfig(t, "qmm", "gemv")
	blocker := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(blocker, nil, 0o644))
	cfg.cache = filepath.Join(blocker, "plans.json") // parent is a file: every write fails
	h := cfg.open(t)
	p, err := h.Plan(context.Background(), decodeKeys(1)[0])
	require.NoError(t, err)
	assert.Equal(t, SourceMeasured, p.Source)
	assert.Len(t, cfg.logs.lines("plan cache not written; keeping the plan in memory"), 1)
}

func TestPoliciesDecideWithoutMeasuring(t *testing.T) {
	req := decodeKeys(1)[0]
	req.Role = sdk.RoleDown
	cases := []struct {
		name      string
		edit      func(*Policy)
		req       sdk.Request
		candidate string
		source    PlanSource
		reason    string
	}{
		{"forced per family", func(p *Policy) { p.Force = map[string]string{"affine": "gemv"} }, req, "gemv", SourcePolicy, "forced"},
		{"role beats family", func(p *Policy) { p.Force = map[string]string{"affine": "gemv", "affine/down": "qmm"} }, req, "qmm", SourcePolicy, "forced"},
		{"forced but refused", func(p *Policy) { p.Force = map[string]string{"affine": "gemv"} }, func() sdk.Request {
			r := affineRequest(16, 256, 64, 4, 64)
			r.Phase = sdk.PhasePrefill
			return r
		}(), "qmm", SourceFallback, "refuses"},
		{"forced unknown", func(p *Policy) { p.Force = map[string]string{"affine": "nope"} }, req, "qmm", SourceFallback, "no plugin offers"},
		{"not worth tuning", func(p *Policy) { p.Tune = nil }, req, "qmm", SourceFallback, "does not cover"},
		{"run budget spent", func(p *Policy) { p.RunBudget = 0 }, req, "qmm", SourceFallback, "budget"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := newHostConfig(t, "qmm", "gemv")
			tc.edit(&cfg.policy)
			h := cfg.open(t)
			p, err := h.Plan(context.Background(), tc.req)
			require.NoError(t, err)
			assert.Equal(t, tc.candidate, p.Candidate)
			assert.Equal(t, tc.source, p.Source)
			assert.Contains(t, p.Reason, tc.reason)
			assert.EqualValues(t, 0, h.Stats().DeviceWork)
		})
	}
}

func TestExactNumericsAndStableAdmissionFilterCandidates(t *testing.T) {
	cfg := newHostConfig(t, "qmm", "gemv")
	cfg.policy.Numerical = NumericalExact
	h := cfg.open(t)
	p, err := h.Plan(context.Background(), decodeKeys(1)[0])
	require.NoError(t, err)
	assert.Equal(t, "qmm", p.Candidate)
	require.NotNil(t, p.Decision)
	assert.Equal(t, VerdictRefused, p.Decision.Measurements[1].Verdict)
	assert.Contains(t, p.Decision.Measurements[1].Reason, "exact numerical policy")
}

func TestKeyBudgetAbandonsTuning(t *testing.T) {
	cfg := newHostConfig(t, "qmm", "gemv")
	cfg.policy.KeyBudget = Duration(time.Millisecond)
	h := cfg.open(t)
	p, err := h.Plan(context.Background(), affineRequest(1, 2048, 2048, 4, 64))
	require.NoError(t, err)
	assert.Equal(t, SourceFallback, p.Source)
	assert.Contains(t, p.Reason, "abandoned")
	assert.Len(t, cfg.logs.lines("tuning abandoned"), 1)
	assert.Empty(t, h.Cache().Entries(), "an abandoned key records nothing")
}

func TestDensePlansAreHeuristic(t *testing.T) {
	h := newHostConfig(t, "qmm").open(t)
	dense := func(role sdk.Role, tokens, in, out int) sdk.Request {
		return sdk.Request{Family: sdk.FamilyDense, Phase: sdk.PhaseDecode, Role: role, Tokens: tokens, InFeatures: in, OutFeatures: out, Activation: sdk.BF16, Weight: sdk.Format{Kind: "bf16"}}
	}
	cases := []struct {
		req       sdk.Request
		candidate string
		source    PlanSource
	}{
		{dense(sdk.RoleGateUp, 1, 4096, 14336), DenseVector, SourceHeuristic},
		{dense(sdk.RoleRouter, 32, 2880, 32), DenseVector, SourceHeuristic},
		{dense(sdk.RoleGateUp, 256, 4096, 14336), DenseMatrix, SourceHeuristic},
		{dense(sdk.RoleOutputHead, 16, 4096, 128256), DenseMatrix, SourceHeuristic},
		{dense(sdk.RoleDown, 1, 4100, 4096), DenseMatrix, SourceFallback},
	}
	for _, tc := range cases {
		p, err := h.Plan(context.Background(), tc.req)
		require.NoError(t, err)
		assert.Equal(t, tc.candidate, p.Candidate, tc.req.Key())
		assert.Equal(t, tc.source, p.Source, tc.req.Key())
		assert.NotEmpty(t, p.Reason)
	}
	bad := dense(sdk.RoleDown, 1, 4096, 4096)
	bad.Weight.Kind = "affine"
	_, err := h.Plan(context.Background(), bad)
	assertFieldError(t, err, "weight.kind", "affine")
}

func TestPolicyFromFileAndEnvironment(t *testing.T) {
	file := filepath.Join(t.TempDir(), "policy.json")
	require.NoError(t, os.WriteFile(file, []byte(`{"numerical":"exact","key_budget_ms":250,"tune":[{"family":"affine"}]}`), 0o644))
	p, err := DefaultPolicy().LoadPolicyFile(file)
	require.NoError(t, err)
	assert.Equal(t, NumericalExact, p.Numerical)
	assert.Equal(t, 250*time.Millisecond, time.Duration(p.KeyBudget))
	assert.True(t, p.WorthTuning(affineRequest(64, 256, 64, 4, 64)))
	assert.Equal(t, AdmissionStable, p.Admission, "fields the file omits keep their value")

	p, err = p.ApplyEnv([]string{
		EnvNumerical + "=throughput", EnvForce + "=affine=gemv, affine/down=qmm", EnvTune + "=affine:decode:1-8,fp8",
		EnvMinImprovement + "=500", EnvWait + "=true", "PATH=/bin",
	})
	require.NoError(t, err)
	assert.Equal(t, NumericalThroughput, p.Numerical)
	assert.Equal(t, map[string]string{"affine": "gemv", "affine/down": "qmm"}, p.Force)
	assert.Equal(t, []TuneRule{{Family: "affine", Phase: "decode", MinTokens: 1, MaxTokens: 8}, {Family: "fp8"}}, p.Tune)
	assert.Equal(t, 500.0, p.MinimumImprovementBps)
	assert.True(t, p.WaitForTuning)

	bad := []struct{ env, field string }{
		{EnvNumerical + "=fast", "policy.numerical"},
		{EnvAdmission + "=yolo", "policy.admission"},
		{EnvForce + "=conv=x", "policy.force"},
		{EnvTune + "=affine:decode:x", EnvTune},
		{EnvKeyBudget + "=-3", EnvKeyBudget},
		{EnvWait + "=maybe", EnvWait},
	}
	for _, b := range bad {
		_, err := DefaultPolicy().ApplyEnv([]string{b.env})
		var fe interface{ Error() string }
		require.Error(t, err, b.env)
		fe = err
		assert.Contains(t, fe.Error(), b.field, b.env)
	}
	_, err = DefaultPolicy().LoadPolicyFile(filepath.Join(t.TempDir(), "missing.json"))
	assert.Error(t, err)
}

// TestFailedCacheWriteLeavesTheOldFileIntact makes every write fail as on a
// full disk (the temporary file takes no bytes): the previous cache file
// stays byte for byte, the temporary file is removed, the plan is served.
func TestFailedCacheWriteLeavesTheOldFileIntact(t *testing.T) {
	cfg := newHostConfig(t, "qmm", "gemv")
	first := cfg.open(t)
	_, err := first.Plan(context.Background(), decodeKeys(1)[0])
	require.NoError(t, err)
	first.Close()
	before, err := os.ReadFile(cfg.cache)
	require.NoError(t, err)

	createTemp = func(dir, pattern string) (*os.File, error) {
		f, err := os.CreateTemp(dir, pattern)
		if err != nil {
			return nil, err
		}
		name := f.Name()
		f.Close()
		return os.Open(name) // read-only: every write fails
	}
	t.Cleanup(func() { createTemp = os.CreateTemp })
	second := cfg.open(t)
	p, err := second.Plan(context.Background(), decodeKeys(2)[1])
	require.NoError(t, err)
	assert.Equal(t, SourceMeasured, p.Source)
	assert.Len(t, cfg.logs.lines("plan cache not written; keeping the plan in memory"), 1)
	after, err := os.ReadFile(cfg.cache)
	require.NoError(t, err)
	assert.Equal(t, before, after, "the old cache file is intact")
	leftovers, _ := filepath.Glob(filepath.Join(filepath.Dir(cfg.cache), ".plans.json.tmp-*"))
	assert.Empty(t, leftovers, "no temporary file is left behind")
}
