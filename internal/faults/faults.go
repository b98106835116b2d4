// Package faults is kcand's fault-injection suite: each scenario starts a
// host on the CPU device with real plugin processes and one misbehaving
// plugin (or a damaged plugin directory or cache), runs requests through the
// engine API, and checks that the host survives, that every result it
// returns matches the float64 reference, and that no plugin process is left
// when it closes. `go test ./internal/faults` runs each once in CI;
// `kcand faults` runs them repeatedly and writes docs/reliability.md.
package faults

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/kcand/kcand/host"
	"github.com/kcand/kcand/sdk"
	"github.com/kcand/kcand/sdk/device"
	"github.com/kcand/kcand/sdk/family/affine"
)

// Env says where the binaries are.
type Env struct {
	// Plugins holds the real plugin binaries (qmm, gemv).
	Plugins string
	// FaultPlugin is the faultplugin binary.
	FaultPlugin string
	// Logger receives the hosts' logs; nil discards them.
	Logger hclog.Logger
}

// Result is the outcome of one run of one scenario.
type Result struct {
	Scenario string
	// Results counts outputs the host returned; Correct those matching the
	// reference.
	Results, Correct int
	// Leftover counts plugin processes alive after the host closed.
	Leftover int
	// Outcome says what the host did about the fault.
	Outcome string
	// Err is set when the scenario could not run or the host failed a call
	// it should have served.
	Err error
}

// Passed reports whether the run met every promise.
func (r Result) Passed() bool {
	return r.Err == nil && r.Results > 0 && r.Correct == r.Results && r.Leftover == 0
}

// Scenario is one fault and how to provoke it.
type Scenario struct {
	Name string
	// Fault describes what goes wrong, for the report.
	Fault string
	run   func(ctx context.Context, s *session) (string, error)
}

// Run runs the scenario once.
func (sc Scenario) Run(ctx context.Context, env Env) Result {
	s, err := newSession(env)
	res := Result{Scenario: sc.Name}
	if err != nil {
		res.Err = err
		return res
	}
	defer s.cleanup()
	res.Outcome, res.Err = sc.run(ctx, s)
	res.Results, res.Correct = s.results, s.correct
	res.Leftover = s.closeAndCountLeftovers()
	return res
}

// session is one scenario run: a plugin directory, a host and counters.
type session struct {
	env     Env
	dir     string
	state   string
	hosts   []*host.Host
	pids    map[int]bool
	results int
	correct int
	scratch string
}

func newSession(env Env) (*session, error) {
	scratch, err := os.MkdirTemp("", "kcand-faults-")
	if err != nil {
		return nil, err
	}
	s := &session{env: env, dir: filepath.Join(scratch, "plugins"), state: filepath.Join(scratch, "state"), scratch: scratch, pids: map[int]bool{}}
	for _, d := range []string{s.dir, s.state} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// install puts the real plugins and the named faults in the plugin directory.
func (s *session) install(faults ...string) error {
	for _, name := range []string{"qmm", "gemv"} {
		if err := copyFile(filepath.Join(s.env.Plugins, name), filepath.Join(s.dir, name)); err != nil {
			return err
		}
	}
	for _, f := range faults {
		if err := os.Symlink(s.env.FaultPlugin, filepath.Join(s.dir, f)); err != nil {
			return err
		}
	}
	return nil
}

// open starts a host on the session's plugin directory.
func (s *session) open(ctx context.Context, edit func(*host.Options)) (*host.Host, error) {
	policy := host.DefaultPolicy()
	opts := host.Options{
		PluginDir: s.dir, Device: "cpu", Policy: &policy, Logger: s.env.Logger,
		Manager: host.ManagerOptions{Env: []string{"KCAND_FAULT_STATE=" + s.state}, CallTimeout: 20 * time.Second},
	}
	if edit != nil {
		edit(&opts)
	}
	h, err := host.Open(ctx, opts)
	if err != nil {
		return nil, err
	}
	s.hosts = append(s.hosts, h)
	s.notePIDs(h)
	return h, nil
}

// notePIDs remembers the host's live plugin processes.
func (s *session) notePIDs(h *host.Host) {
	for _, p := range h.Manager().Plugins() {
		if pid := p.Health().PID; pid > 0 {
			s.pids[pid] = true
		}
	}
}

// exercise plans req, binds fresh weights, runs it `runs` times on fresh
// inputs and checks every output against the float64 reference. It returns
// the plan the executable ended with.
func (s *session) exercise(ctx context.Context, h *host.Host, req sdk.Request, runs int, seed uint64) (*host.Plan, error) {
	plan, err := h.Plan(ctx, req)
	if err != nil {
		return nil, err
	}
	sample := affine.RandomSample(req, seed)
	w, err := h.RegisterWeights(req, sample.Weights)
	if err != nil {
		return nil, err
	}
	defer w.Close()
	exe, err := plan.Bind(ctx, w)
	if err != nil {
		return nil, err
	}
	defer exe.Close()
	dev := h.Device()
	x, err := dev.Alloc(affine.InputSizes(req)[affine.X])
	if err != nil {
		return nil, err
	}
	defer dev.Free(x)
	y, err := dev.Alloc(affine.OutputSizes(req)[affine.Y])
	if err != nil {
		return nil, err
	}
	defer dev.Free(y)
	for i := 0; i < runs; i++ {
		in := affine.RandomSample(req, seed+uint64(i)+1).Inputs[affine.X]
		if err := dev.Write(x, 0, in); err != nil {
			return nil, err
		}
		if err := dev.Fill(y, 0xff); err != nil {
			return nil, err
		}
		if err := exe.Run(ctx, nil, map[string]device.Buffer{affine.X: x, affine.Y: y}); err != nil {
			return exe.Plan(), fmt.Errorf("run %d of %s: %w", i, req.Key(), err)
		}
		s.notePIDs(h)
		out := make([]byte, y.Size())
		if err := dev.Read(out, y, 0); err != nil {
			return nil, err
		}
		s.results++
		want := affine.Reference(req, sample.Weights, in)
		if err := affine.Check(out, want); err == nil {
			s.correct++
		} else if s.env.Logger != nil {
			s.env.Logger.Error("wrong output returned", "request", req.Key(), "run", i, "candidate", exe.Plan().Candidate, "source", exe.Plan().Source, "error", err)
		}
	}
	return exe.Plan(), nil
}

// closeAndCountLeftovers closes every host and counts plugin processes
// still alive a few seconds later.
func (s *session) closeAndCountLeftovers() int {
	for _, h := range s.hosts {
		s.notePIDs(h)
		h.Close()
	}
	s.hosts = nil
	deadline := time.Now().Add(5 * time.Second)
	for {
		left := 0
		for pid := range s.pids {
			if alive(pid) {
				left++
			}
		}
		if left == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *session) cleanup() {
	for _, h := range s.hosts {
		h.Close()
	}
	os.RemoveAll(s.scratch)
}

// alive reports whether pid is a live, non-zombie process.
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	text := string(stat)
	fields := strings.Fields(text[strings.LastIndexByte(text, ')')+1:])
	return len(fields) > 0 && fields[0] != "Z" && fields[0] != "X"
}

func copyFile(from, to string) error {
	data, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, data, 0o755)
}

// decode is a small decode request that the default policy tunes.
func decode(out int) sdk.Request {
	return sdk.Request{
		Family: sdk.FamilyAffine, Phase: sdk.PhaseDecode, Tokens: 1, InFeatures: 512, OutFeatures: out,
		Weight: sdk.Format{Kind: "affine", Bits: 4, GroupSize: 64}, Activation: sdk.BF16,
	}
}
