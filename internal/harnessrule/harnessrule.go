// Package harnessrule runs the GPU harness's variant rules (the scripts
// under scripts/ that need nothing but Python) for the Go tests that
// compare them with the plugins' rules, so that the variants the harness
// checks and times on the GPU are the ones the plugins run.
package harnessrule

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kcand/kcand/sdk"
	"github.com/kcand/kcand/sdk/plugintest"
)

// maxMismatches is how many differing lines Compare reports one by one
// before it only counts them.
const maxMismatches = 10

// Run runs the Python rule script scripts/<name> with args and with input
// on its standard input, and returns its output lines (none for no
// output). It finds scripts/ at the root of the module that holds the
// working folder (go test runs in the package's folder, scripts/gpu-check.sh
// runs the built test binaries from the root), and skips the test where
// python3 is not installed or no such module is found (a test binary run
// elsewhere); a module without the script fails it.
func Run(t testing.TB, name, input string, args ...string) []string {
	t.Helper()
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skipf("python3 is not installed: scripts/%s is not compared with the Go rule", name)
	}
	root, ok := moduleRoot()
	if !ok {
		t.Skipf("no go.mod above the working folder: scripts/%s is not compared with the Go rule", name)
	}
	dir := filepath.Join(root, "scripts")
	script := filepath.Join(dir, name)
	_, err = os.Stat(script)
	require.NoError(t, err, "the harness's rule script")
	// go test caches a passing result until a file the test opened or
	// stat'd changes; the scripts the rule imports are read by Python, so
	// stat every one of them here.
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".py") {
			_, err := os.Stat(filepath.Join(dir, e.Name()))
			require.NoError(t, err)
		}
	}
	cmd := exec.Command(python, append([]string{script}, args...)...)
	cmd.Stdin = strings.NewReader(input)
	out, err := cmd.Output()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		require.NoError(t, err, "python3 scripts/%s %s:\n%s", name, strings.Join(args, " "), exit.Stderr)
	}
	require.NoError(t, err, "python3 scripts/%s %s", name, strings.Join(args, " "))
	text := strings.TrimSpace(string(out))
	if text == "" {
		return nil
	}
	return strings.Split(text, "\n")
}

// moduleRoot is the nearest folder at or above the working folder that
// holds a go.mod.
func moduleRoot() (string, bool) {
	dir, err := os.Getwd()
	if err != nil {
		return "", false
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, true
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", false
		}
		dir = parent
	}
}

// Case is one request of a sweep and the multiprocessor count it is
// planned for.
type Case struct {
	SMs int
	Req sdk.Request
}

// Sweep lists the affine requests (bf16 activations, no bias) over the
// given multiprocessor counts, token counts, widths, group sizes and input
// and output sizes, input sizes that are not a multiple of the group size
// left out, and of those the ones keep keeps.
func Sweep(sms, tokens, bits, groups, ins, outs []int, keep func(Case) bool) []Case {
	var cases []Case
	for _, n := range sms {
		for _, tok := range tokens {
			for _, b := range bits {
				for _, g := range groups {
					for _, in := range ins {
						for _, out := range outs {
							c := Case{SMs: n, Req: plugintest.AffineRequest(tok, in, out, b, g, false)}
							if in%g == 0 && keep(c) {
								cases = append(cases, c)
							}
						}
					}
				}
			}
		}
	}
	return cases
}

// Compare runs scripts/harness_rule.py kind on the cases (a line "sms
// tokens in out bits group" each) and asserts that it prints, for each,
// the JSON of want(case): a map of macros and sizes, or nil where the Go
// rule does not serve the request (Python's null). It reports the first
// maxMismatches differing lines and counts the rest.
func Compare(t testing.TB, kind string, cases []Case, want func(Case) any) {
	t.Helper()
	require.NotEmpty(t, cases, "a sweep with requests to compare")
	var stdin strings.Builder
	for _, c := range cases {
		fmt.Fprintf(&stdin, "%d %d %d %d %d %d\n", c.SMs, c.Req.Tokens, c.Req.InFeatures, c.Req.OutFeatures, c.Req.Weight.Bits, c.Req.Weight.GroupSize)
	}
	lines := Run(t, "harness_rule.py", stdin.String(), kind)
	require.Len(t, lines, len(cases))
	differ := 0
	for i, c := range cases {
		js, err := json.Marshal(want(c))
		require.NoError(t, err)
		if string(js) == lines[i] {
			continue
		}
		if differ++; differ <= maxMismatches {
			assert.Equal(t, string(js), lines[i], "%s on %d SMs", c.Req.Key(), c.SMs)
		}
	}
	assert.Zero(t, differ, "requests whose harness variant differs from the Go rule's, of %d", len(cases))
}
