package main

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kcand/kcand/cuda"
)

// launchBench measures the host cost of launching an empty kernel: rounds
// of batch launches, each round timed on the host between stream
// synchronisations (so the launch queue never fills and throttles), the
// result the median over rounds of time per launch.
type launchBench struct {
	dev    *cuda.Device
	empty  *cuda.Function
	target cuda.DevicePtr
	rounds int
	batch  int
}

var oneBlock = cuda.LaunchConfig{Grid: cuda.Dim3{X: 1}, Block: cuda.Dim3{X: 32}}

// measure runs round (which must enqueue b.batch launches) once to warm up,
// then b.rounds times, and returns the median µs per launch.
func (b *launchBench) measure(round func() error) (float64, error) {
	stream := b.dev.Stream()
	perLaunch := make([]float64, 0, b.rounds)
	for i := -1; i < b.rounds; i++ {
		if err := stream.Synchronize(); err != nil {
			return 0, err
		}
		start := time.Now()
		if err := round(); err != nil {
			return 0, err
		}
		elapsed := time.Since(start)
		if i >= 0 {
			perLaunch = append(perLaunch, float64(elapsed.Nanoseconds())/1e3/float64(b.batch))
		}
	}
	return median(perLaunch), stream.Synchronize()
}

// args packs the empty kernel's parameters, as a host would per launch.
func (b *launchBench) args(a *cuda.Args) *cuda.Args {
	return a.Reset().Pointer(b.target).Int32(1)
}

// raw is the floor: the same launch repeated inside one C call, no Go per
// launch.
func (b *launchBench) raw() (float64, error) {
	args := b.args(cuda.NewArgs())
	return b.measure(func() error {
		return b.empty.LaunchRepeated(b.dev.Stream(), oneBlock, args, b.batch)
	})
}

// bound launches from a goroutine bound with LockThread: the hot path.
func (b *launchBench) bound() (float64, error) {
	unlock, err := b.dev.Context().LockThread()
	if err != nil {
		return 0, err
	}
	defer unlock()
	return b.launchEach()
}

// anyGoroutine launches from an unbound goroutine: each launch makes the
// context current around itself inside the same C call.
func (b *launchBench) anyGoroutine() (float64, error) { return b.launchEach() }

func (b *launchBench) launchEach() (float64, error) {
	stream, args := b.dev.Stream(), cuda.NewArgs()
	return b.measure(func() error {
		for range b.batch {
			if err := b.empty.Launch(stream, oneBlock, b.args(args)); err != nil {
				return err
			}
		}
		return nil
	})
}

// batchedDo sends each round to the context thread as one closure.
func (b *launchBench) batchedDo() (float64, error) {
	stream, args, ctx := b.dev.Stream(), cuda.NewArgs(), b.dev.Context()
	return b.measure(func() error {
		return ctx.Do(func() error {
			for range b.batch {
				if err := b.empty.Launch(stream, oneBlock, b.args(args)); err != nil {
					return err
				}
			}
			return nil
		})
	})
}

// perDo sends every launch to the context thread on its own: the cost of
// the channel hop.
func (b *launchBench) perDo() (float64, error) {
	stream, args, ctx := b.dev.Stream(), cuda.NewArgs(), b.dev.Context()
	launch := func() error { return b.empty.Launch(stream, oneBlock, b.args(args)) }
	return b.measure(func() error {
		for range b.batch {
			if err := ctx.Do(launch); err != nil {
				return err
			}
		}
		return nil
	})
}

// cupyScript launches the same kernel through cupy.RawKernel with the same
// rounds-and-median scheme and prints the median µs per launch.
const cupyScript = `
import statistics, sys, time
import cupy as cp
import numpy as np
rounds, batch, device = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
cp.cuda.Device(device).use()
kernel = cp.RawKernel(sys.stdin.read(), "kcand_empty")
p, n = cp.zeros(1, dtype=cp.float32), np.int32(1)
stream = cp.cuda.Stream(non_blocking=True)
per = []
with stream:
    for r in range(rounds + 1):
        stream.synchronize()
        t0 = time.perf_counter()
        for _ in range(batch):
            kernel((1,), (32,), (p, n))
        t1 = time.perf_counter()
        if r > 0:
            per.append((t1 - t0) / batch * 1e6)
    stream.synchronize()
print("KCAND_CUPY_US", statistics.median(per), cp.__version__)
`

// cupyLaunch runs cupyScript with python3 and parses its result.
func cupyLaunch(rounds, batch, ordinal int) (us float64, version string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "python3", "-c", cupyScript, strconv.Itoa(rounds), strconv.Itoa(batch), strconv.Itoa(ordinal))
	cmd.Stdin = strings.NewReader(benchSource)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return 0, "", fmt.Errorf("python3 cupy: %v: %s", err, lastLine(out))
	}
	scanner := bufio.NewScanner(strings.NewReader(string(out)))
	for scanner.Scan() {
		fields := strings.Fields(scanner.Text())
		if len(fields) >= 2 && fields[0] == "KCAND_CUPY_US" {
			us, err := strconv.ParseFloat(fields[1], 64)
			if len(fields) >= 3 {
				version = fields[2]
			}
			return us, version, err
		}
	}
	return 0, "", fmt.Errorf("python3 cupy printed no result: %s", lastLine(out))
}

func lastLine(out []byte) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1]
}

func median(values []float64) float64 {
	if len(values) == 0 {
		return 0
	}
	sorted := slices.Clone(values)
	slices.Sort(sorted)
	mid := len(sorted) / 2
	if len(sorted)%2 == 0 {
		return (sorted[mid-1] + sorted[mid]) / 2
	}
	return sorted[mid]
}
