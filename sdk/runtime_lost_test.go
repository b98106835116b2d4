package sdk

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kcand/kcand/cuda"
	"github.com/kcand/kcand/sdk/errdefs"
)

// TestStickyErrorMarksTheContextLost: the first sticky CUDA error comes back
// as ErrDeviceLost (wrapping the CUDA error) and runs the exit hook once;
// from then on every call that would touch the device fails at once with
// ErrUnavailable (it did not run: the host retries it in a fresh process).
func TestStickyErrorMarksTheContextLost(t *testing.T) {
	r, err := NewRuntime("lost", "test", nil)
	require.NoError(t, err)
	exits := 0
	r.onContextLost = func(error) { exits++ }

	plain := errors.New("not a CUDA error")
	assert.Same(t, plain, r.checkContext(plain), "ordinary errors pass through")
	assert.NoError(t, r.deviceLost())

	err = r.checkContext(cuda.Result(700))
	assert.ErrorIs(t, err, errdefs.ErrDeviceLost)
	assert.ErrorIs(t, err, cuda.Result(700), "the CUDA error that broke the context is kept")
	assert.ErrorIs(t, r.checkContext(cuda.Result(716)), errdefs.ErrDeviceLost)
	assert.Equal(t, 1, exits, "the exit hook runs once")

	ctx := context.Background()
	_, err = r.Prepare(ctx, PrepareRequest{Candidate: "anything"})
	assert.ErrorIs(t, err, ErrUnavailable, "prepare fails fast instead of looking the candidate up")
	_, err = r.Execute(ctx, ExecuteRequest{PreparedID: "x"})
	assert.ErrorIs(t, err, ErrUnavailable)
	_, err = r.Benchmark(ctx, BenchmarkRequest{PreparedID: "x", Iterations: 1})
	assert.ErrorIs(t, err, ErrUnavailable)
	assert.NotErrorIs(t, err, errdefs.ErrDeviceLost)
	assert.Contains(t, err.Error(), "lost its CUDA context and is exiting")
}
