// Package harnessrule runs the GPU harness's variant rules (the scripts
// under scripts/ that need nothing but Python) for the Go tests that
// compare them with the plugins' rules, so that the variants the harness
// checks and times on the GPU are the ones the plugins run.
package harnessrule

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Run runs the Python rule script scripts/<name> with input on its
// standard input and returns its output lines. It skips the test where
// python3 is not installed or the script is not found from the working
// folder: go test runs in a package two folders below the repository's
// root (plugins/qmm, internal/affinegpu), scripts/gpu-check.sh runs the
// built test binaries from the root.
func Run(t testing.TB, name, input string) []string {
	t.Helper()
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skipf("python3 is not installed: scripts/%s is not compared with the Go rule", name)
	}
	script := ""
	for _, p := range []string{filepath.Join("..", "..", "scripts", name), filepath.Join("scripts", name)} {
		if _, err := os.Stat(p); err == nil {
			script = p
			break
		}
	}
	if script == "" {
		t.Skipf("scripts/%s is not found from the working folder: not compared with the Go rule", name)
	}
	// go test caches a passing result until a file the test opened or
	// stat'd changes; the scripts the rule imports are read by Python, so
	// stat every one of them here.
	dir := filepath.Dir(script)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".py") {
			_, err := os.Stat(filepath.Join(dir, e.Name()))
			require.NoError(t, err)
		}
	}
	cmd := exec.Command(python, script)
	cmd.Stdin = strings.NewReader(input)
	out, err := cmd.Output()
	require.NoError(t, err, "python3 scripts/%s", name)
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}
