// Command cudabench measures the cuda package on a real GPU: kernel launch
// cost through the binding against cupy launching the same kernel, IPC
// open cost, a cross-process ordered round trip, and NVRTC compile time cold
// and cached. It prints a table last. Without a GPU it says why and exits 1.
//
//	cudabench [-launches 20000] [-batch 200] [-roundtrips 1000] [-cupy=false] [-device 0]
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/kcand/kcand/cuda"
)

func main() {
	launches := flag.Int("launches", 20000, "launches per launch measurement")
	batch := flag.Int("batch", 200, "launches per timed round (the stream is synchronised between rounds)")
	roundTrips := flag.Int("roundtrips", 1000, "cross-process round trips per mode")
	ipcHandles := flag.Int("ipc-handles", 16, "allocations the second process opens")
	withCupy := flag.Bool("cupy", true, "also time cupy.RawKernel launching the same kernel (python3 -c)")
	ordinal := flag.Int("device", 0, "GPU ordinal")
	childRole := flag.String("child", "", "internal: run as the second process in this role")
	flag.Parse()

	if *childRole != "" {
		os.Exit(runChild(*childRole, *ordinal))
	}
	if *launches < *batch || *batch < 1 || *roundTrips < 1 || *ipcHandles < 1 {
		fmt.Fprintln(os.Stderr, "cudabench: need launches >= batch >= 1, roundtrips >= 1 and ipc-handles >= 1")
		os.Exit(2)
	}
	if err := run(*ordinal, *launches / *batch, *batch, *roundTrips, *ipcHandles, *withCupy); err != nil {
		fmt.Fprintf(os.Stderr, "cudabench: %v\n", err)
		if errors.Is(err, cuda.ErrNoDriver) {
			fmt.Fprintln(os.Stderr, "cudabench: this machine has no usable CUDA GPU; run it on the GPU machine")
		}
		os.Exit(1)
	}
}

// row is one line of the final table.
type row struct{ what, value, note string }

func run(ordinal, rounds, batch, roundTrips, ipcHandles int, withCupy bool) error {
	d, err := cuda.NewDevice(ordinal)
	if err != nil {
		return err
	}
	defer d.Close()
	info := d.Info()
	fmt.Printf("device %d: %s, cc %s, %d SMs, %d MiB, driver %s, libcuda %s\n",
		ordinal, info.Name, info.ComputeCapability, info.Multiprocessors, info.MemoryBytes>>20, info.DriverVersionString(), cuda.DriverLibrary())
	fmt.Printf("MPS: %s\n", mpsState())
	var table []row

	// NVRTC: a fresh cache directory makes the first compile cold.
	cacheDir, err := os.MkdirTemp("", "cudabench-kernels-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(cacheDir)
	cold, cached, kernelArch, err := measureCompile(cacheDir, info.ComputeCapability.Target(false))
	if err != nil {
		return err
	}
	fmt.Printf("nvrtc: cold %.1f ms, cached %.2f ms (%s)\n", cold, cached, kernelArch)
	empty, err := loadKernel(d, cacheDir, "kcand_empty")
	if err != nil {
		return err
	}
	add, err := loadKernel(d, cacheDir, "kcand_add")
	if err != nil {
		return err
	}

	target, err := d.Alloc(4)
	if err != nil {
		return err
	}
	defer d.Free(target)
	lb := &launchBench{dev: d, empty: empty, target: cuda.DevicePtr(target.(interface{ DevicePointer() uintptr }).DevicePointer()), rounds: rounds, batch: batch}
	rawUS, err := lb.raw()
	if err != nil {
		return err
	}
	variants := []struct {
		what, note string
		measure    func() (float64, error)
	}{
		{"launch, bound goroutine (LockThread)", "the hot path", lb.bound},
		{"launch, batched in one Context.Do", "one hop per round", lb.batchedDo},
		{"launch, any goroutine", "context made current per call", lb.anyGoroutine},
		{"launch, one Context.Do per launch", "channel hop per launch", lb.perDo},
	}
	table = append(table, row{"launch, raw (cuLaunchKernel loop in C)", fmt.Sprintf("%.2f µs", rawUS), "floor, 1.00x"})
	var boundUS float64
	for _, v := range variants {
		us, err := v.measure()
		if err != nil {
			return fmt.Errorf("%s: %w", v.what, err)
		}
		if boundUS == 0 {
			boundUS = us
		}
		fmt.Printf("%s: %.2f µs\n", v.what, us)
		table = append(table, row{v.what, fmt.Sprintf("%.2f µs", us), fmt.Sprintf("%s, %.2fx raw", v.note, us/rawUS)})
	}
	if withCupy {
		us, version, err := cupyLaunch(rounds, batch, ordinal)
		if err != nil {
			fmt.Printf("cupy: unavailable: %v\n", err)
			table = append(table, row{"launch, cupy RawKernel", "n/a", firstLine(err.Error())})
		} else {
			fmt.Printf("cupy %s: %.2f µs per launch\n", version, us)
			table = append(table, row{"launch, cupy " + version + " RawKernel", fmt.Sprintf("%.2f µs", us), fmt.Sprintf("bound is %.2fx cupy", boundUS/us)})
		}
	}

	ipc, err := measureIPCOpen(d, ipcHandles, ordinal)
	if err != nil {
		return fmt.Errorf("ipc open: %w", err)
	}
	fmt.Printf("ipc: child NewDevice %.0f µs, open %.1f µs, cached open %.2f µs, forget %.1f µs\n", ipc.childStartUS, ipc.openUS, ipc.cachedOpenUS, ipc.forgetUS)
	table = append(table,
		row{"second process NewDevice", fmt.Sprintf("%.1f ms", ipc.childStartUS/1e3), "cuInit + primary context + stream"},
		row{"IPC open (cuIpcOpenMemHandle)", fmt.Sprintf("%.1f µs", ipc.openUS), fmt.Sprintf("median of %d allocations", ipcHandles)},
		row{"IPC open, cached mapping", fmt.Sprintf("%.2f µs", ipc.cachedOpenUS), "per (owner, allocation)"},
		row{"IPC forget (cuIpcCloseMemHandle)", fmt.Sprintf("%.1f µs", ipc.forgetUS), "includes a stream sync"},
	)

	trip, err := measureRoundTrip(d, add, cacheDir, roundTrips, ordinal)
	if err != nil {
		return fmt.Errorf("round trip: %w", err)
	}
	fmt.Printf("round trip: events %.1f µs (pipelined %.1f µs), synchronise %.1f µs\n", trip.eventsLatencyUS, trip.eventsPipelinedUS, trip.syncLatencyUS)
	table = append(table,
		row{"round trip, IPC events", fmt.Sprintf("%.1f µs", trip.eventsLatencyUS), fmt.Sprintf("median of %d, host syncs each", roundTrips)},
		row{"round trip, IPC events, pipelined", fmt.Sprintf("%.1f µs", trip.eventsPipelinedUS), "mean, host syncs once"},
		row{"round trip, stream synchronise", fmt.Sprintf("%.1f µs", trip.syncLatencyUS), "no events, both sides sync"},
		row{"NVRTC compile, cold", fmt.Sprintf("%.1f ms", cold), kernelArch},
		row{"NVRTC compile, cached", fmt.Sprintf("%.2f ms", cached), "new Compiler, same cache dir"},
	)
	printTable(table)
	return nil
}

// measureCompile compiles the bench source twice through two Compilers
// sharing cacheDir: the first compiles, the second must hit the cache.
func measureCompile(cacheDir string, target cuda.Target) (coldMS, cachedMS float64, arch string, err error) {
	src := cuda.Source{Name: "cudabench.cu", Code: benchSource}
	var k *cuda.Kernel
	for i := range 2 {
		compiler, err := cuda.NewCompiler(cuda.WithKernelCacheDir(cacheDir))
		if err != nil {
			return 0, 0, "", err
		}
		start := time.Now()
		if k, err = compiler.Compile(src, target); err != nil {
			return 0, 0, "", err
		}
		ms := float64(time.Since(start).Nanoseconds()) / 1e6
		if i == 0 {
			coldMS, arch = ms, fmt.Sprintf("%s %s, NVRTC %s", k.Arch, k.Format, k.NVRTCVersion)
			if k.CacheHit {
				return 0, 0, "", errors.New("cold compile hit the cache")
			}
		} else {
			cachedMS = ms
			if !k.CacheHit {
				return 0, 0, "", errors.New("second compile missed the cache")
			}
		}
	}
	return coldMS, cachedMS, arch, nil
}

// mpsState says whether an MPS control daemon looks present; it changes
// the round-trip numbers by a factor of six (see docs/DESIGN.md).
func mpsState() string {
	dir := os.Getenv("CUDA_MPS_PIPE_DIRECTORY")
	if dir == "" {
		dir = "/tmp/nvidia-mps"
	}
	if _, err := os.Stat(dir + "/control"); err == nil {
		return "control pipe found in " + dir + " (clients share one context: fast, no fault isolation)"
	}
	return "not running (each process has its own context: isolated, slower round trips)"
}

func printTable(rows []row) {
	fmt.Println()
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "what\tvalue\tnote")
	fmt.Fprintln(w, "----\t-----\t----")
	for _, r := range rows {
		fmt.Fprintf(w, "%s\t%s\t%s\n", r.what, r.value, r.note)
	}
	w.Flush()
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
