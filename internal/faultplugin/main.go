// Command faultplugin is a plugin that misbehaves on purpose, for the
// fault-injection suite. The name it is started under picks the fault; its
// candidate, named after the fault, otherwise computes correct results.
// Faults that should happen once (a crash, a hang) remember across restarts
// through marker files in $KCAND_FAULT_STATE.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/kcand/kcand/cuda"
	"github.com/kcand/kcand/internal/refcandidate"
	"github.com/kcand/kcand/sdk"
	"github.com/kcand/kcand/sdk/device"
)

// The faults, as file names of the plugin binary.
const (
	KillPrepare    = "kill-prepare"    // SIGKILLs itself in its first Prepare
	KillExecute    = "kill-execute"    // SIGKILLs itself in its first Execute
	KillBenchmark  = "kill-benchmark"  // SIGKILLs itself in its first Benchmark (during tuning)
	HangExecute    = "hang-execute"    // blocks forever in its first Execute
	PanicCrash     = "panic-crash"     // panics in a goroutine in its first Execute: the process dies
	PanicHandler   = "panic-handler"   // panics inside every Execute: the runtime turns it into an error
	StdoutGarbage  = "stdout-garbage"  // prints to stdout before the handshake
	WrongNumbers   = "wrong-numbers"   // gets one output element wrong
	LyingBenchmark = "lying-benchmark" // reports 1 ns per iteration
	BadPlan        = "bad-plan"        // exports a launch plan pointing at a buffer it was not given
	BadDescription = "bad-description" // describes two fallbacks for one family
	FailExecute    = "fail-execute"    // every Execute fails with an internal error
	LostContext    = "lost-context"    // every Execute fails with a sticky CUDA error (illegal address), as a faulting kernel would
	ProtoNext      = "proto-next"      // speaks the protocol version after the SDK's
)

func main() {
	fault := filepath.Base(os.Args[0])
	cand := refcandidate.Candidate{Name: fault}
	switch fault {
	case KillPrepare:
		cand.BeforePrepare = onceThen(fault, killSelf)
	case KillExecute:
		cand.BeforeExecute = onceThen(fault, killSelf)
	case HangExecute:
		cand.BeforeExecute = onceThen(fault, func() error { select {} })
	case PanicCrash:
		cand.BeforeExecute = onceThen(fault, func() error {
			go panic("fault injection: panic in a goroutine")
			time.Sleep(time.Second)
			return nil
		})
	case PanicHandler:
		cand.BeforeExecute = func() error { panic("fault injection: panic in Execute") }
	case StdoutGarbage:
		fmt.Println("hello from a plugin that should not print")
	case WrongNumbers:
		cand.Corrupt = true
	case BadPlan:
		cand.Export = badPlan
	case FailExecute:
		cand.BeforeExecute = func() error { return errors.New("fault injection: execute failed") }
	case LostContext:
		cand.BeforeExecute = func() error { return cuda.Result(700) } // CUDA_ERROR_ILLEGAL_ADDRESS
	case KillBenchmark, LyingBenchmark, BadDescription, ProtoNext:
	default:
		fmt.Fprintf(os.Stderr, "faultplugin: unknown fault %q\n", fault)
		os.Exit(3)
	}
	opts := sdk.Options{Name: fault, Version: "fault"}
	if fault == ProtoNext {
		opts.ProtocolVersion = sdk.ProtocolVersion + 1
	}
	logger := sdk.PluginLogger(fault)
	rt, err := sdk.NewRuntime(opts.Name, opts.Version, logger, cand)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	rt.ExitOnContextLoss() // as sdk.Serve does for every real plugin
	sdk.ServePlugin(opts, logger, &liar{Runtime: rt, fault: fault})
}

// liar serves the runtime, except where its fault makes it lie.
type liar struct {
	*sdk.Runtime
	fault string
}

func (l *liar) Describe(ctx context.Context) (sdk.Description, error) {
	d, err := l.Runtime.Describe(ctx)
	if l.fault == BadDescription && len(d.Candidates) > 0 {
		c := d.Candidates[0]
		c.Fallback = true
		d.Candidates = []sdk.CandidateInfo{c, {Name: "second", Family: c.Family, Fallback: true, Numeric: c.Numeric, Stability: c.Stability, Devices: []device.Kind{device.CPU}}}
	}
	return d, err
}

func (l *liar) Benchmark(ctx context.Context, req sdk.BenchmarkRequest) (sdk.BenchmarkResult, error) {
	switch l.fault {
	case KillBenchmark:
		if first(l.fault + "-benchmark") {
			killSelf()
		}
	case LyingBenchmark:
		res, err := l.Runtime.Benchmark(ctx, req)
		for i := range res.IterationMicros {
			res.IterationMicros[i] = 0.001
		}
		return res, err
	}
	return l.Runtime.Benchmark(ctx, req)
}

// badPlan names a binding the host never gives plugins.
func badPlan() (sdk.LaunchPlan, error) {
	m := sdk.NewModule(sdk.ModuleCubin, []byte("fault injection"))
	return sdk.LaunchPlan{Modules: []sdk.Module{m}, Launches: []sdk.Launch{{
		Module: m.Hash, Function: "steal", Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{32, 1, 1},
		Params: []sdk.Param{sdk.BufferParam("host_secrets")},
	}}}, nil
}

// onceThen runs fault the first time (across restarts) and nothing after.
func onceThen(name string, fault func() error) func() error {
	return func() error {
		if first(name) {
			return fault()
		}
		return nil
	}
}

// first reports whether this is the first time name happens, creating a
// marker file in $KCAND_FAULT_STATE (always true without that directory).
func first(name string) bool {
	dir := os.Getenv("KCAND_FAULT_STATE")
	if dir == "" {
		return true
	}
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return false
	}
	f.Close()
	return true
}

func killSelf() error {
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}
