package faults

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kcand/kcand/host"
)

// Scenarios lists every scenario in report order.
func Scenarios() []Scenario {
	return []Scenario{
		{"sigkill-prepare", "plugin SIGKILLs itself in Prepare (during tuning)", faultDuringTuning("kill-prepare")},
		{"sigkill-tune", "plugin SIGKILLs itself in Benchmark (during tuning)", faultDuringTuning("kill-benchmark")},
		{"sigkill-execute", "plugin SIGKILLs itself in Execute (engine run of a forced plan)", forcedFault("kill-execute", 0)},
		{"hang", "plugin blocks forever in Execute", forcedFault("hang-execute", time.Second)},
		{"panic-crash", "plugin panics in a goroutine and dies", forcedFault("panic-crash", 0)},
		{"panic-handler", "plugin panics inside every Execute", forcedFault("panic-handler", 0)},
		{"stdout-garbage", "plugin prints to stdout before the handshake", refusedAtStart("stdout-garbage")},
		{"wrong-numbers", "candidate returns one wrong element", faultDuringTuning("wrong-numbers")},
		{"lying-benchmark", "plugin reports 1 ns per iteration", faultDuringTuning("lying-benchmark")},
		{"bad-launch-plan", "candidate exports a launch plan pointing at a buffer it was not given", faultDuringTuning("bad-plan")},
		{"lost-context", "every execution fails with a sticky CUDA error (a faulting kernel's illegal address)", faultDuringTuning("lost-context")},
		{"bad-description", "plugin describes two fallbacks for one family", refusedAtStart("bad-description")},
		{"checksum-mismatch", "SHA256SUMS pins another digest for gemv", checksumMismatch},
		{"version-mismatch", "plugin speaks the next protocol version", refusedAtStart("proto-next")},
		{"corrupt-cache", "plan cache file is not JSON", corruptCache},
		{"unwritable-cache", "plan cache path cannot be written", unwritableCache},
		{"chaos", "64 goroutines plan and run 8 requests while plugins are SIGKILLed at random", chaos},
	}
}

// faultDuringTuning installs a fault plugin beside qmm and gemv and plans
// and runs a decode request, which tunes it.
func faultDuringTuning(fault string) func(context.Context, *session) (string, error) {
	return func(ctx context.Context, s *session) (string, error) {
		if err := s.install(fault); err != nil {
			return "", err
		}
		h, err := s.open(ctx, nil)
		if err != nil {
			return "", err
		}
		plan, err := s.exercise(ctx, h, decode(128), 4, 11)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("%s; %s", describeFaulty(plan, fault), restarts(h)), nil
	}
}

// forcedFault forces the fault candidate by policy (no tuning, no numeric
// gate) and runs it through the engine API, where the fault happens.
func forcedFault(fault string, callTimeout time.Duration) func(context.Context, *session) (string, error) {
	return func(ctx context.Context, s *session) (string, error) {
		if err := s.install(fault); err != nil {
			return "", err
		}
		h, err := s.open(ctx, func(o *host.Options) {
			o.Policy.Force = map[string]string{"affine": fault}
			if callTimeout > 0 {
				o.Manager.CallTimeout = callTimeout
			}
		})
		if err != nil {
			return "", err
		}
		plan, err := s.exercise(ctx, h, decode(128), 4, 21)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("served by %s (%s); %s", plan.Candidate, plan.Source, restarts(h)), nil
	}
}

// refusedAtStart installs a plugin that must be refused, and checks the
// others serve.
func refusedAtStart(fault string) func(context.Context, *session) (string, error) {
	return func(ctx context.Context, s *session) (string, error) {
		if err := s.install(fault); err != nil {
			return "", err
		}
		h, err := s.open(ctx, nil)
		if err != nil {
			return "", err
		}
		refused := h.Manager().Refused()
		if len(refused) != 1 || refused[0].Name != fault {
			return "", fmt.Errorf("want %s refused, got %v", fault, refused)
		}
		if _, err := s.exercise(ctx, h, decode(64), 3, 31); err != nil {
			return "", err
		}
		return "refused: " + firstLine(refused[0].Err.Error()), nil
	}
}

func checksumMismatch(ctx context.Context, s *session) (string, error) {
	if err := s.install(); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(s.dir, host.SumsFile), []byte(strings.Repeat("0", 64)+"  gemv\n"), 0o644); err != nil {
		return "", err
	}
	h, err := s.open(ctx, nil)
	if err != nil {
		return "", err
	}
	refused := h.Manager().Refused()
	var ce *host.ChecksumError
	if len(refused) != 1 || !errors.As(refused[0].Err, &ce) {
		return "", fmt.Errorf("want gemv refused for its checksum, got %v", refused)
	}
	plan, err := s.exercise(ctx, h, decode(64), 3, 41)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("gemv refused (pinned %s…, found %s…); %s serves", ce.Want[:8], ce.Got[:8], plan.Candidate), nil
}

func corruptCache(ctx context.Context, s *session) (string, error) {
	if err := s.install(); err != nil {
		return "", err
	}
	cache := filepath.Join(s.scratch, "plans.json")
	if err := os.WriteFile(cache, []byte("{\"format\": 1, \"entries\": {oops"), 0o644); err != nil {
		return "", err
	}
	h, err := s.open(ctx, func(o *host.Options) { o.CachePath = cache })
	if err != nil {
		return "", err
	}
	plan, err := s.exercise(ctx, h, decode(64), 3, 51)
	if err != nil {
		return "", err
	}
	aside, _ := filepath.Glob(cache + ".corrupt-*")
	if len(aside) != 1 {
		return "", fmt.Errorf("corrupt cache not set aside")
	}
	return fmt.Sprintf("file set aside as %s; plan %s (%s)", filepath.Base(aside[0]), plan.Candidate, plan.Source), nil
}

func unwritableCache(ctx context.Context, s *session) (string, error) {
	if err := s.install(); err != nil {
		return "", err
	}
	blocker := filepath.Join(s.scratch, "not-a-dir")
	if err := os.WriteFile(blocker, nil, 0o644); err != nil {
		return "", err
	}
	h, err := s.open(ctx, func(o *host.Options) { o.CachePath = filepath.Join(blocker, "plans.json") })
	if err != nil {
		return "", err
	}
	plan, err := s.exercise(ctx, h, decode(64), 3, 61)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("write failed, plan kept in memory: %s (%s)", plan.Candidate, plan.Source), nil
}

// chaosDuration is how long the chaos scenario keeps planning and running.
const chaosDuration = 1500 * time.Millisecond

// chaos plans, binds and runs 8 requests from 64 goroutines, round after
// round for chaosDuration, while a killer SIGKILLs a random plugin process
// every 100–300 ms.
func chaos(ctx context.Context, s *session) (string, error) {
	if err := s.install(); err != nil {
		return "", err
	}
	h, err := s.open(ctx, nil)
	if err != nil {
		return "", err
	}
	stop := make(chan struct{})
	kills := 0
	var killer sync.WaitGroup
	killer.Add(1)
	go func() {
		defer killer.Done()
		rng := rand.New(rand.NewPCG(7, 7))
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(100+rng.IntN(200)) * time.Millisecond):
			}
			plugins := h.Manager().Plugins()
			p := plugins[rng.IntN(len(plugins))]
			if pid := p.Health().PID; pid > 0 && syscall.Kill(pid, syscall.SIGKILL) == nil {
				kills++
			}
		}
	}()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	deadline := time.Now().Add(chaosDuration)
	for g := 0; g < 64; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each goroutine keeps its own counters and merges them after.
			local := &session{env: s.env, pids: map[int]bool{}}
			var err error
			for round := 0; err == nil && (round == 0 || time.Now().Before(deadline)); round++ {
				_, err = local.exercise(ctx, h, decode(64+8*(g%8)), 2, uint64(1000*round+g))
			}
			mu.Lock()
			defer mu.Unlock()
			s.results += local.results
			s.correct += local.correct
			if err != nil && firstErr == nil {
				firstErr = err
			}
		}()
	}
	wg.Wait()
	close(stop)
	killer.Wait()
	if firstErr != nil {
		return "", firstErr
	}
	return fmt.Sprintf("%d SIGKILLs; %s; %d tunings", kills, restarts(h), h.Stats().Tunings), nil
}

func restarts(h *host.Host) string {
	n := 0
	for _, p := range h.Manager().Plugins() {
		n += p.Health().Restarts
	}
	return fmt.Sprintf("%d plugin restarts", n)
}

// describeFaulty says what became of the fault candidate in the plan's measurement.
func describeFaulty(plan *host.Plan, fault string) string {
	if plan.Decision != nil {
		for _, m := range plan.Decision.Measurements {
			if m.Candidate == fault {
				s := fmt.Sprintf("%s %s", fault, m.Verdict)
				if m.Verdict == host.VerdictRejected || m.Verdict == host.VerdictFailed {
					s += ": " + firstLine(m.Reason)
				}
				return s + fmt.Sprintf("; %s chosen", plan.Candidate)
			}
		}
	}
	return fmt.Sprintf("%s chosen (%s)", plan.Candidate, plan.Source)
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 140 {
		s = s[:140] + "…"
	}
	return s
}
