package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kcand/kcand/internal/testbuild"
)

var pluginDir string

func TestMain(m *testing.M) {
	dir, err := testbuild.BuildPlugins()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	pluginDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func TestPluginsListsEveryPlugin(t *testing.T) {
	var out, errOut bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"plugins", "--plugin-dir", pluginDir, "--device", "cpu"}, &out, &errOut), errOut.String())
	for _, want := range []string{"qmm", "gemv", "mxfp4", "fp8tc", "fallback", "none yet", "running pid", "started in"} {
		assert.Contains(t, out.String(), want)
	}
}

func TestTuneMeasuresThenServesFromCache(t *testing.T) {
	cache := filepath.Join(t.TempDir(), "plans.json")
	args := []string{"tune", "--plugin-dir", pluginDir, "--device", "cpu", "--cache", cache}
	var out, errOut bytes.Buffer
	require.NoError(t, run(context.Background(), args, &out, &errOut), errOut.String())
	text := out.String()
	assert.Equal(t, len(demoRequests("cpu")), strings.Count(text, "→ "), text)
	assert.Equal(t, 6, strings.Count(text, "(measured)"), "the default policy measures every affine bucket: %s", text)
	assert.Equal(t, 1, strings.Count(text, "(bucket)"), "40 tokens share the measurement of 64: %s", text)
	assert.Contains(t, text, "tokens 33–64 share the plan of tokens=64")
	assert.Contains(t, text, "refused", "the prefill request refuses GEMV")
	assert.Contains(t, text, "(heuristic)", "dense requests are planned by rule")
	assert.Contains(t, text, "6 measured, 1 shared within a token bucket")
	assert.Equal(t, 1, strings.Count(text, "samples (weights kept)"), "the 64-token measurement keeps the one-token measurement's weights: %s", text)
	assert.NotContains(t, text, "error:")

	out.Reset()
	require.NoError(t, run(context.Background(), args, &out, &errOut), errOut.String())
	assert.Equal(t, 6, strings.Count(out.String(), "(cached)"), "every measured request comes from the cache: %s", out.String())
	assert.Contains(t, out.String(), "0 measured, 1 shared within a token bucket, 6 from cache, 0 device operations")

	out.Reset()
	require.NoError(t, run(context.Background(), append(args, "--all"), &out, &errOut), errOut.String())
	assert.Contains(t, out.String(), "1 measured, 0 shared within a token bucket, 6 from cache",
		"--all measures the bucket's other count on its own: %s", out.String())

	out.Reset()
	require.NoError(t, run(context.Background(), []string{"cache", "show", "--cache", cache}, &out, &errOut))
	assert.Contains(t, out.String(), "7 entries")
	require.NoError(t, run(context.Background(), []string{"cache", "clear", "--cache", cache}, &out, &errOut))
	assert.NoFileExists(t, cache)
}

func TestBadCommandLines(t *testing.T) {
	var out, errOut bytes.Buffer
	assert.Error(t, run(context.Background(), nil, &out, &errOut))
	assert.Error(t, run(context.Background(), []string{"frobnicate"}, &out, &errOut))
	err := run(context.Background(), []string{"tune", "--device", "tpu", "--plugin-dir", pluginDir}, &out, &errOut)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "device=tpu")
	err = run(context.Background(), []string{"tune", "--keep-sample-mb", "-1", "--plugin-dir", pluginDir}, &out, &errOut)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "keep-sample-mb=-1")
	err = run(context.Background(), []string{"plugins", "--plugin-dir", "/no/such/dir"}, &out, &errOut)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "/no/such/dir")
}
