package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
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
	for _, want := range []string{"qmm", "gemv", "mxfp4", "fp8tc", "fallback", "none yet", "running pid"} {
		assert.Contains(t, out.String(), want)
	}
}

func TestTuneMeasuresAndChoosesForEveryDemoRequest(t *testing.T) {
	var out, errOut bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"tune", "--plugin-dir", pluginDir, "--device", "cpu"}, &out, &errOut), errOut.String())
	text := out.String()
	assert.Equal(t, len(demoRequests("cpu")), strings.Count(text, "→ "), text)
	assert.Contains(t, text, "gemv")
	assert.Contains(t, text, "refused", "the prefill request refuses GEMV")
	assert.NotContains(t, text, "error:")
}

func TestBadCommandLines(t *testing.T) {
	var out, errOut bytes.Buffer
	assert.Error(t, run(context.Background(), nil, &out, &errOut))
	assert.Error(t, run(context.Background(), []string{"frobnicate"}, &out, &errOut))
	err := run(context.Background(), []string{"tune", "--device", "tpu", "--plugin-dir", pluginDir}, &out, &errOut)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "device=tpu")
	err = run(context.Background(), []string{"plugins", "--plugin-dir", "/no/such/dir"}, &out, &errOut)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "/no/such/dir")
}
