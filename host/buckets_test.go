package host

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kcand/kcand/sdk"
	"github.com/kcand/kcand/sdk/family/affine"
)

func prefillRequest(tokens int) sdk.Request {
	r := affineRequest(tokens, 256, 64, 4, 64)
	r.Phase = sdk.PhasePrefill
	return r
}

func TestPow2BucketsStayWithinTheRule(t *testing.T) {
	all := TuneRule{Family: sdk.FamilyAffine, Buckets: BucketPow2}
	bounded := TuneRule{Family: sdk.FamilyAffine, MinTokens: 6, MaxTokens: 24, Buckets: BucketPow2}
	exact := TuneRule{Family: sdk.FamilyAffine}
	cases := []struct {
		name           string
		rule           TuneRule
		tokens, lo, hi int
	}{
		{"one token alone", all, 1, 1, 1},
		{"two alone", all, 2, 2, 2},
		{"three with four", all, 3, 3, 4},
		{"five to eight", all, 5, 5, 8},
		{"the top of a bucket", all, 16, 9, 16},
		{"one past it", all, 17, 17, 32},
		{"prefill lengths", all, 3000, 2049, 4096},
		{"cut at the rule's minimum", bounded, 7, 6, 8},
		{"cut at the rule's maximum", bounded, 20, 17, 24},
		{"exact rule", exact, 24, 24, 24},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			require.True(t, tc.rule.Matches(affineRequest(tc.tokens, 256, 64, 4, 64)))
			lo, hi := tc.rule.bucket(tc.tokens)
			assert.Equal(t, []int{tc.lo, tc.hi}, []int{lo, hi})
		})
	}
}

func TestBucketsInRulesFilesAndVariables(t *testing.T) {
	rules, err := ParseTuneRules("affine:*:*:pow2, fp8, affine:prefill:9-:pow2")
	require.NoError(t, err)
	assert.Equal(t, []TuneRule{
		{Family: sdk.FamilyAffine, Buckets: BucketPow2},
		{Family: sdk.FamilyAffine, Phase: sdk.PhasePrefill, MinTokens: 9, Buckets: BucketPow2},
		{Family: sdk.FamilyFP8},
	}, rules)
	assert.Equal(t, "affine:prefill:9-:pow2", rules[1].String(), "String writes what ParseTuneRules reads")
	assert.Equal(t, "fp8:*:*", rules[2].String())

	for _, bad := range []string{"affine:*:*:pow3", "affine:*:*:pow2:x"} {
		_, err := ParseTuneRules(bad)
		assertFieldError(t, err, EnvTune, bad)
	}

	file := filepath.Join(t.TempDir(), "policy.json")
	require.NoError(t, os.WriteFile(file, []byte(`{"tune":[{"family":"affine","buckets":"pow3"}]}`), 0o644))
	_, err = DefaultPolicy().LoadPolicyFile(file)
	assertFieldError(t, err, "policy.tune.buckets", BucketScheme("pow3"))
}

// TestTokenBucketSharesOneMeasurement: the counts of a bucket cost one
// measurement, taken at the bucket's largest count; the next bucket is
// measured on its own, and a later host serves the bucket from the cache.
func TestTokenBucketSharesOneMeasurement(t *testing.T) {
	cfg := newHostConfig(t, "qmm", "gemv")
	h := cfg.open(t)
	ctx := context.Background()
	p, err := h.Plan(ctx, prefillRequest(24))
	require.NoError(t, err)
	assert.Equal(t, SourceBucket, p.Source)
	require.NotNil(t, p.Representative)
	assert.Equal(t, 32, p.Representative.Request.Tokens)
	assert.Equal(t, SourceMeasured, p.Representative.Source)
	assert.Equal(t, p.Representative.Candidate, p.Candidate)
	assert.Contains(t, p.Reason, "tokens 17–32 share the plan of tokens=32")
	assert.Zero(t, p.AverageMicros, "no time was measured at 24 tokens")

	for _, tokens := range []int{17, 20, 31} {
		q, err := h.Plan(ctx, prefillRequest(tokens))
		require.NoError(t, err)
		assert.Equal(t, SourceBucket, q.Source, "tokens=%d", tokens)
		assert.Same(t, p.Representative, q.Representative, "tokens=%d", tokens)
	}
	top, err := h.Plan(ctx, prefillRequest(32))
	require.NoError(t, err)
	assert.Same(t, p.Representative, top, "the largest count is the representative itself")
	assert.EqualValues(t, 1, h.Stats().Tunings, "one measurement for the bucket")
	assert.EqualValues(t, 4, h.Stats().Shared)

	_, err = h.Plan(ctx, prefillRequest(33))
	require.NoError(t, err)
	assert.EqualValues(t, 2, h.Stats().Tunings, "33 tokens are the next bucket")
	assert.Contains(t, h.Cache().Entries(), prefillRequest(64).Key())
	assert.NotContains(t, h.Cache().Entries(), prefillRequest(33).Key(), "the cache holds representatives only")
	require.NoError(t, h.Close())

	again := cfg.open(t)
	q, err := again.Plan(ctx, prefillRequest(24))
	require.NoError(t, err)
	assert.Equal(t, SourceBucket, q.Source)
	assert.Equal(t, SourceCached, q.Representative.Source)
	assert.EqualValues(t, 0, again.Stats().DeviceWork)
}

// hostWithBucketPlan opens a host with qmm and a test plugin whose
// candidate (named like the plugin) the cache names for 17–32 tokens.
func hostWithBucketPlan(t *testing.T, plugin string) (*hostConfig, *Host) {
	cfg := newHostConfig(t, "qmm", plugin)
	h := cfg.open(t)
	rep := prefillRequest(32)
	require.NoError(t, h.Cache().Record(rep.Key(), CacheEntry{Candidate: plugin, Plugin: plugin, AverageMicros: 1, Reason: "planted by the test"}))
	return cfg, h
}

// TestBucketCandidateThatRefusesTheCountIsMeasuredAlone: a count the
// bucket's candidate refuses is measured on its own; a count it admits
// shares its plan once it passes the gate there, and the check is cached.
func TestBucketCandidateThatRefusesTheCountIsMeasuredAlone(t *testing.T) {
	cfg, h := hostWithBucketPlan(t, pluginEven)
	ctx := context.Background()

	even, err := h.Plan(ctx, prefillRequest(24))
	require.NoError(t, err)
	assert.Equal(t, "even", even.Candidate)
	assert.Equal(t, SourceBucket, even.Source)
	require.NotNil(t, even.Decision, "checked at 24 tokens")
	assert.Equal(t, []Verdict{VerdictChecked, VerdictChecked}, verdicts(even.Decision))
	assert.Contains(t, even.Reason, "checked at tokens=24")
	assert.Contains(t, h.Cache().Entries(), prefillRequest(24).Key(), "the check is recorded")
	assert.EqualValues(t, 0, h.Stats().Tunings)

	odd, err := h.Plan(ctx, prefillRequest(23))
	require.NoError(t, err)
	assert.Equal(t, SourceMeasured, odd.Source, odd.Reason)
	assert.Equal(t, 23, odd.Request.Tokens)
	assert.NotEqual(t, "even", odd.Candidate, "the bucket's candidate refuses 23 tokens")
	assert.EqualValues(t, 1, h.Stats().Tunings)
	require.NoError(t, h.Close())

	again := cfg.open(t)
	p, err := again.Plan(ctx, prefillRequest(24))
	require.NoError(t, err)
	assert.Equal(t, SourceCached, p.Source, "the count's check came from the cache")
	assert.Equal(t, "even", p.Candidate)
	assert.EqualValues(t, 0, again.Stats().DeviceWork)
}

// TestBucketCandidateThatFailsTheGateAtTheCountIsMeasuredAlone: a
// candidate right at the bucket's largest count and wrong at the caller's
// (a bug in its partial tiles) never serves that count.
func TestBucketCandidateThatFailsTheGateAtTheCountIsMeasuredAlone(t *testing.T) {
	cfg, h := hostWithBucketPlan(t, pluginOddTail)
	ctx := context.Background()

	odd, err := h.Plan(ctx, prefillRequest(23))
	require.NoError(t, err)
	assert.Equal(t, SourceMeasured, odd.Source, odd.Reason)
	assert.Equal(t, "qmm", odd.Candidate)
	require.NotNil(t, odd.Decision)
	for _, m := range odd.Decision.Measurements {
		if m.Candidate == "oddtail" {
			assert.Equal(t, VerdictRejected, m.Verdict, "the gate at 23 tokens catches it")
		}
	}
	assert.Len(t, cfg.logs.lines("token bucket's plan does not serve this count; measuring it on its own"), 1)

	even, err := h.Plan(ctx, prefillRequest(24))
	require.NoError(t, err)
	assert.Equal(t, "oddtail", even.Candidate, "right at 24 tokens, it shares the bucket's plan")
	assert.Equal(t, SourceBucket, even.Source)
}

func verdicts(d *Decision) []Verdict {
	var out []Verdict
	for _, m := range d.Measurements {
		out = append(out, m.Verdict)
	}
	return out
}

// TestBucketCountPlannedWhileItsRepresentativeIsTuned: a caller whose
// bucket is being measured by another gets the fallback meanwhile and does
// not keep it; once the measurement is in, the count shares it.
func TestBucketCountPlannedWhileItsRepresentativeIsTuned(t *testing.T) {
	cfg := newHostConfig(t, "qmm", pluginSlow)
	h := cfg.open(t)
	ctx := context.Background()
	rep := prefillRequest(32)
	tuned := make(chan error, 1)
	go func() {
		_, err := h.Plan(ctx, rep)
		tuned <- err
	}()
	waitFor(t, 10*time.Second, "the representative's claim", func() bool {
		h.planner.mu.Lock()
		defer h.planner.mu.Unlock()
		return h.planner.claims[rep.Key()] != nil
	})
	meanwhile, err := h.Plan(ctx, prefillRequest(24))
	require.NoError(t, err)
	assert.Equal(t, SourceFallback, meanwhile.Source)
	assert.Contains(t, meanwhile.Reason, "being tuned")
	require.NoError(t, <-tuned)

	after, err := h.Plan(ctx, prefillRequest(24))
	require.NoError(t, err)
	assert.Equal(t, SourceBucket, after.Source, "the stand-in was not kept: %s", after.Reason)
	assert.EqualValues(t, 1, h.Stats().Tunings)
}

// TestBucketUnderConcurrentCallers: callers of one bucket's counts measure
// it once, and every count ends up sharing its plan.
func TestBucketUnderConcurrentCallers(t *testing.T) {
	cfg := newHostConfig(t, "qmm", "gemv")
	h := cfg.open(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := 0; g < 32; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := h.Plan(ctx, prefillRequest(17+g%15)); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	assert.EqualValues(t, 1, h.Stats().Tunings)
	for tokens := 17; tokens < 32; tokens++ {
		p, err := h.Plan(ctx, prefillRequest(tokens))
		require.NoError(t, err)
		assert.Equal(t, SourceBucket, p.Source, "tokens=%d: %s", tokens, p.Reason)
	}
}

// TestBucketPlanRunsAtItsOwnCount: a shared plan prepares its candidate
// for the caller's token count, not the representative's, and its outputs
// pass the gate against the reference at that count.
func TestBucketPlanRunsAtItsOwnCount(t *testing.T) {
	h := newHostConfig(t, "qmm", "gemv").open(t)
	ctx := context.Background()
	req := prefillRequest(5)
	req.Bias = true
	exe, sample := bindSample(t, h, req, 0x5eed5)
	require.Equal(t, SourceBucket, exe.Plan().Source)
	assert.Equal(t, 8, exe.Plan().Representative.Request.Tokens)
	io := ioBuffers(t, h, req, sample)
	require.NoError(t, h.Device().Fill(io[affine.Y], 0xff))
	require.NoError(t, exe.Run(ctx, nil, io))
	want := affine.Reference(req, sample.Weights, sample.Inputs[affine.X])
	require.NoError(t, affine.Check(readY(t, h, io), want))
}

// TestPrefillCannotSpendDecodesBudget: each phase has the run budget to
// itself; once prefill has spent its share, decode is still measured.
func TestPrefillCannotSpendDecodesBudget(t *testing.T) {
	cfg := newHostConfig(t, "qmm", "gemv")
	cfg.policy.RunBudget = Duration(time.Millisecond)
	h := cfg.open(t)
	ctx := context.Background()
	first, err := h.Plan(ctx, prefillRequest(16))
	require.NoError(t, err)
	assert.Equal(t, SourceMeasured, first.Source, "the first measurement starts with budget left")
	more, err := h.Plan(ctx, prefillRequest(64))
	require.NoError(t, err)
	assert.Equal(t, SourceFallback, more.Source)
	assert.Contains(t, more.Reason, "budget of 1ms for prefill is spent")
	decode, err := h.Plan(ctx, affineRequest(1, 256, 64, 4, 64))
	require.NoError(t, err)
	assert.Equal(t, SourceMeasured, decode.Source, decode.Reason)
}
