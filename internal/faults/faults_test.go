package faults

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/kcand/kcand/internal/testbuild"
)

var env Env

func TestMain(m *testing.M) {
	dir, err := testbuild.BuildPlugins("qmm", "gemv")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fault, err := testbuild.Build("github.com/kcand/kcand/internal/faultplugin", filepath.Join(dir, "faultplugin-bin"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	env = Env{Plugins: dir, FaultPlugin: fault}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// TestEveryFaultIsSurvived runs each scenario once through real processes.
func TestEveryFaultIsSurvived(t *testing.T) {
	for _, sc := range Scenarios() {
		t.Run(sc.Name, func(t *testing.T) {
			r := sc.Run(context.Background(), env)
			assert.NoError(t, r.Err, "the host failed a call it should have served")
			assert.Greater(t, r.Results, 0, "no output was checked")
			assert.Equal(t, r.Results, r.Correct, "every returned result matches the reference")
			assert.Zero(t, r.Leftover, "no plugin process outlives the host")
			t.Logf("%s: %s (%d outputs)", sc.Name, r.Outcome, r.Results)
		})
	}
}
