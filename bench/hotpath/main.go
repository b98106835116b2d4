// Command hotpath measures what an engine pays per call to run a plan, in
// one run, against anchors measured in the same run:
//
//   - exported path: Executable.Run vs launching the same cubin directly
//     through cuda/ with arguments bound once (target ≤ 1.1×), GPU only;
//   - CUDA graph capture of 32 plan executions replayed, compared bit for
//     bit with eager runs, GPU only;
//   - remote path round trip (execute in the plugin on IPC-shared buffers,
//     ordered against the host's stream): the doorbell channel vs one gRPC
//     call per execute, printed next to the ~290 µs baseline of DESIGN.md.
//
// Run it from the repository root after make (or on the GPU machine from
// bin/gpu): hotpath [--plugin-dir DIR] [--device auto|cpu|cuda].
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/kcand/kcand/cuda"
	"github.com/kcand/kcand/host"
	"github.com/kcand/kcand/sdk"
	"github.com/kcand/kcand/sdk/device"
	"github.com/kcand/kcand/sdk/family/affine"
)

// naiveRoundTrip is DESIGN.md's measured round trip through IPC events
// without MPS, the remote path's baseline.
const naiveRoundTripMicros = 290.0

type row struct{ what, value, note string }

func main() {
	exe, _ := os.Executable()
	pluginDir := flag.String("plugin-dir", filepath.Join(filepath.Dir(exe), "plugins"), "plugin directory")
	devName := flag.String("device", "auto", "cpu, cuda or auto")
	calls := flag.Int("calls", 2000, "calls per remote measurement")
	flag.Parse()
	rows, err := run(*pluginDir, *devName, *calls)
	printRows(rows)
	if err != nil {
		fmt.Fprintln(os.Stderr, "hotpath:", err)
		os.Exit(1)
	}
}

func run(pluginDir, devName string, calls int) ([]row, error) {
	ctx := context.Background()
	var rows []row
	policy := host.DefaultPolicy()
	policy.Force = map[string]string{"affine": "gemv"} // no tuning: measure the path, not the choice
	open := func(o host.Options) (*host.Host, error) {
		o.PluginDir, o.Device, o.Policy = pluginDir, devName, &policy
		return host.Open(ctx, o)
	}
	h, err := open(host.Options{})
	if err != nil {
		return rows, err
	}
	defer h.Close()
	gpu := h.Device().Kind() == device.CUDA
	fmt.Printf("device %s (%s); MPS: %s\n", h.Device().Kind(), h.Hardware().Name, host.MPSStatus())
	req := request(gpu)
	rows = append(rows, row{"request", req.Key(), "forced to gemv"})
	if gpu {
		r, err := exportedOverhead(ctx, h, req)
		rows = append(rows, r...)
		if err != nil {
			return rows, err
		}
		r, err = graphReplay(ctx, h, req)
		rows = append(rows, r...)
		if err != nil {
			return rows, err
		}
	}
	variants := []struct {
		what string
		opts host.Options
	}{
		{"remote round trip, doorbell, default ordering", host.Options{ForceRemote: true}},
		{"remote round trip, gRPC per call", host.Options{ForceRemote: true, NoChannels: true}},
	}
	if gpu {
		variants = append(variants,
			struct {
				what string
				opts host.Options
			}{"remote round trip, doorbell, IPC events", host.Options{ForceRemote: true, ChannelOrdering: host.OrderEvents}},
			struct {
				what string
				opts host.Options
			}{"remote round trip, doorbell, synchronise", host.Options{ForceRemote: true, ChannelOrdering: host.OrderSynchronise}})
	}
	for _, v := range variants {
		rh, err := open(v.opts)
		if err != nil {
			return rows, err
		}
		r, err := remoteRoundTrip(ctx, rh, req, calls, v.what)
		rh.Close()
		rows = append(rows, r...)
		if err != nil {
			return rows, err
		}
	}
	return rows, nil
}

func request(gpu bool) sdk.Request {
	in, out := 256, 64
	if gpu {
		in, out = 4096, 4096
	}
	return sdk.Request{Family: sdk.FamilyAffine, Phase: sdk.PhaseDecode, Tokens: 1, InFeatures: in, OutFeatures: out,
		Weight: sdk.Format{Kind: "affine", Bits: 4, GroupSize: 64}, Activation: sdk.BF16}
}

// bound is an executable with its weights and one set of io buffers.
type bound struct {
	h      *host.Host
	exe    *host.Executable
	w      *host.Weights
	io     map[string]device.Buffer
	sample sdk.Sample
}

func bind(ctx context.Context, h *host.Host, req sdk.Request) (*bound, error) {
	plan, err := h.Plan(ctx, req)
	if err != nil {
		return nil, err
	}
	sample := affine.RandomSample(req, 7)
	w, err := h.RegisterWeights(req, sample.Weights)
	if err != nil {
		return nil, err
	}
	exe, err := plan.Bind(ctx, w)
	if err != nil {
		w.Close()
		return nil, err
	}
	b := &bound{h: h, exe: exe, w: w, sample: sample}
	if b.io, err = ioPair(h, req, sample.Inputs[affine.X]); err != nil {
		b.close()
		return nil, err
	}
	return b, nil
}

func ioPair(h *host.Host, req sdk.Request, x []byte) (map[string]device.Buffer, error) {
	xb, err := h.Device().Alloc(affine.InputSizes(req)[affine.X])
	if err != nil {
		return nil, err
	}
	yb, err := h.Device().Alloc(affine.OutputSizes(req)[affine.Y])
	if err != nil {
		return nil, err
	}
	if err := h.Device().Write(xb, 0, x); err != nil {
		return nil, err
	}
	return map[string]device.Buffer{affine.X: xb, affine.Y: yb}, nil
}

func (b *bound) close() {
	b.exe.Close()
	b.w.Close()
}

// check compares y with the float64 reference.
func (b *bound) check(req sdk.Request, y device.Buffer, x []byte) error {
	out := make([]byte, y.Size())
	if err := b.h.Device().Read(out, y, 0); err != nil {
		return err
	}
	return affine.SpotCheck(req, sdk.Sample{Weights: b.sample.Weights, Inputs: map[string][]byte{affine.X: x}}, out, 8192)
}

// enqueueCosts is, for each of the enqueue functions, the median host time
// per enqueue over batches of 200 enqueues, the stream drained after every
// batch so it never backs up. In each round every function runs one batch,
// in an order that reverses from one round to the next, so that a drift
// of the machine's clocks over the measurement, or a cost of going first,
// weighs on all of them alike. The first rounds are warm-up and not
// counted.
func enqueueCosts(s *cuda.Stream, enqueues ...func() error) ([]float64, error) {
	const rounds, per, warm = 60, 200, 5
	samples := make([][]float64, len(enqueues))
	for r := 0; r < rounds; r++ {
		for turn := range enqueues {
			k := turn
			if r%2 == 1 {
				k = len(enqueues) - 1 - turn
			}
			enqueue := enqueues[k]
			start := time.Now()
			for i := 0; i < per; i++ {
				if err := enqueue(); err != nil {
					return nil, err
				}
			}
			if r >= warm {
				samples[k] = append(samples[k], float64(time.Since(start).Nanoseconds())/1e3/per)
			}
			if err := s.Synchronize(); err != nil {
				return nil, err
			}
		}
	}
	costs := make([]float64, len(enqueues))
	for k := range samples {
		costs[k] = median(samples[k])
	}
	return costs, nil
}

func exportedOverhead(ctx context.Context, h *host.Host, req sdk.Request) ([]row, error) {
	b, err := bind(ctx, h, req)
	if err != nil {
		return nil, err
	}
	defer b.close()
	if b.exe.Remote() {
		return nil, fmt.Errorf("gemv runs remotely; expected exported kernels")
	}
	dev := h.Device().(*cuda.Device)
	unlock, err := dev.Context().LockThread()
	if err != nil {
		return nil, err
	}
	defer unlock()
	s := dev.Stream()
	direct, err := b.exe.Direct(b.io)
	if err != nil {
		return nil, err
	}
	costs, err := enqueueCosts(s, func() error { return direct.Launch(s) }, func() error { return b.exe.Run(ctx, s, b.io) })
	if err != nil {
		return nil, err
	}
	raw, viaRun := costs[0], costs[1]
	if err := b.check(req, b.io[affine.Y], b.sample.Inputs[affine.X]); err != nil {
		return nil, fmt.Errorf("exported output: %w", err)
	}
	verdict := "met"
	if viaRun > 1.1*raw {
		verdict = "NOT met"
	}
	return []row{
		{"launch, same cubin direct through cuda/", fmt.Sprintf("%.2f µs", raw), "arguments bound once, anchor"},
		{"Executable.Run, exported plan", fmt.Sprintf("%.2f µs", viaRun), fmt.Sprintf("%.2f× direct (target ≤ 1.1×: %s)", viaRun/raw, verdict)},
	}, nil
}

func graphReplay(ctx context.Context, h *host.Host, req sdk.Request) ([]row, error) {
	b, err := bind(ctx, h, req)
	if err != nil {
		return nil, err
	}
	defer b.close()
	dev := h.Device().(*cuda.Device)
	const n = 32
	ios := make([]map[string]device.Buffer, n)
	xs := make([][]byte, n)
	for i := range ios {
		xs[i] = affine.RandomSample(sdk.Request{Family: req.Family, Phase: req.Phase, Tokens: 1, InFeatures: req.InFeatures, OutFeatures: 8,
			Weight: req.Weight, Activation: req.Activation}, uint64(100+i)).Inputs[affine.X]
		if ios[i], err = ioPair(h, req, xs[i]); err != nil {
			return nil, err
		}
	}
	s, err := dev.Context().NewStream(cuda.StreamNonBlocking)
	if err != nil {
		return nil, err
	}
	defer s.Destroy()
	readAll := func() ([][]byte, error) {
		out := make([][]byte, n)
		for i, io := range ios {
			out[i] = make([]byte, io[affine.Y].Size())
			if err := h.Device().Read(out[i], io[affine.Y], 0); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	poison := func() error {
		for _, io := range ios {
			if err := h.Device().Fill(io[affine.Y], 0xff); err != nil {
				return err
			}
		}
		return nil
	}
	if err := poison(); err != nil {
		return nil, err
	}
	for _, io := range ios {
		if err := b.exe.Run(ctx, s, io); err != nil {
			return nil, err
		}
	}
	if err := s.Synchronize(); err != nil {
		return nil, err
	}
	eager, err := readAll()
	if err != nil {
		return nil, err
	}
	for i := range ios {
		if err := b.check(req, ios[i][affine.Y], xs[i]); err != nil {
			return nil, fmt.Errorf("eager run %d: %w", i, err)
		}
	}
	if err := poison(); err != nil {
		return nil, err
	}
	if err := s.BeginCapture(cuda.CaptureRelaxed); err != nil {
		return nil, err
	}
	for _, io := range ios {
		if err := b.exe.Run(ctx, s, io); err != nil {
			s.EndCapture()
			return nil, err
		}
	}
	g, err := s.EndCapture()
	if err != nil {
		return nil, err
	}
	defer g.Destroy()
	ge, err := g.Instantiate()
	if err != nil {
		return nil, err
	}
	defer ge.Destroy()
	if err := ge.Launch(s); err != nil {
		return nil, err
	}
	if err := s.Synchronize(); err != nil {
		return nil, err
	}
	replay, err := readAll()
	if err != nil {
		return nil, err
	}
	same := 0
	for i := range replay {
		if bytes.Equal(replay[i], eager[i]) {
			same++
		}
	}
	var samples []float64
	for i := 0; i < 50; i++ {
		start := time.Now()
		ge.Launch(s)
		s.Synchronize()
		samples = append(samples, float64(time.Since(start).Nanoseconds())/1e3)
	}
	r := []row{{"graph of 32 plan executions", fmt.Sprintf("%d/32 bit-identical", same), fmt.Sprintf("replay %.1f µs (%.2f µs per execution)", median(samples), median(samples)/n)}}
	if same != n {
		return r, fmt.Errorf("graph replay differs from eager runs in %d of %d outputs", n-same, n)
	}
	return r, nil
}

func remoteRoundTrip(ctx context.Context, h *host.Host, req sdk.Request, calls int, what string) ([]row, error) {
	b, err := bind(ctx, h, req)
	if err != nil {
		return nil, err
	}
	defer b.close()
	if !b.exe.Remote() {
		return nil, fmt.Errorf("ForceRemote host runs exported kernels")
	}
	var samples []float64
	for i := 0; i < calls+50; i++ {
		start := time.Now()
		if err := b.exe.Run(ctx, nil, b.io); err != nil {
			return nil, err
		}
		if err := h.Device().Synchronize(); err != nil {
			return nil, err
		}
		if i >= 50 {
			samples = append(samples, float64(time.Since(start).Nanoseconds())/1e3)
		}
	}
	if err := b.check(req, b.io[affine.Y], b.sample.Inputs[affine.X]); err != nil {
		return nil, fmt.Errorf("remote output: %w", err)
	}
	st := h.Stats()
	note := fmt.Sprintf("%d channel + %d RPC calls", st.ChannelCalls, st.RPCCalls)
	m := median(samples)
	return []row{{what, fmt.Sprintf("%.1f µs", m), fmt.Sprintf("%s; p90 %.1f µs; %.2f× the %0.f µs baseline (target ≤ 50 µs)", note, percentile(samples, 0.9), m/naiveRoundTripMicros, naiveRoundTripMicros)}}, nil
}

func median(v []float64) float64 { return percentile(v, 0.5) }

func percentile(v []float64, p float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[int(p*float64(len(s)-1))]
}

func printRows(rows []row) {
	fmt.Println()
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "what\tvalue\tnote")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", r.what, r.value, r.note)
	}
	tw.Flush()
}
