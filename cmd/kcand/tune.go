package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/kcand/kcand/host"
	"github.com/kcand/kcand/sdk"
	"github.com/kcand/kcand/sdk/device"
	"github.com/kcand/kcand/sdk/errdefs"
)

func runTune(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("tune", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c commonFlags
	c.register(fs)
	all := fs.Bool("all", false, "measure every demo request, whatever the tuning policy says")
	keepMB := fs.Int64("keep-sample-mb", host.DefaultKeepSampleBytes>>20,
		"device memory (MiB) in which the sample weights of the layers measured last are kept for their other token counts; 0 keeps none")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *keepMB < 0 {
		return errdefs.Invalid("keep-sample-mb", *keepMB, "want 0 or more")
	}
	c.measure.KeepSampleBytes = *keepMB << 20
	if *keepMB == 0 {
		c.measure.KeepSampleBytes = -1 // MeasureOptions: negative keeps none
	}
	if *all {
		c.tuneAll = true
	}
	h, err := c.open(ctx, stderr)
	if err != nil {
		return err
	}
	defer h.Close()
	requests := demoRequests(h.Device().Kind())
	cachePath := h.Cache().Path()
	if cachePath == "" {
		cachePath = "memory only"
	}
	fmt.Fprintf(stdout, "planning %d demo requests on %s (%s) with %d plugins; cache %s\n",
		len(requests), h.Device().Kind(), h.Hardware().Name, len(h.Manager().Plugins()), cachePath)
	failed := 0
	shown := map[*host.Plan]bool{} // plans whose measurement is printed
	start := time.Now()
	for i, req := range requests {
		fmt.Fprintf(stdout, "\n[%d/%d] %s\n", i+1, len(requests), req.Key())
		p, err := h.Plan(ctx, req)
		if err != nil {
			failed++
			fmt.Fprintf(stdout, "  error: %v\n", err)
			continue
		}
		if p.Decision != nil && !shown[p] {
			shown[p] = true
			printDecision(stdout, p.Decision)
		}
		if r := p.Representative; r != nil && r.Decision != nil && !shown[r] {
			shown[r] = true
			fmt.Fprintf(stdout, "  measured at tokens=%d, the largest of its bucket:\n", r.Request.Tokens)
			printDecision(stdout, r.Decision)
		}
		fmt.Fprintf(stdout, "  → %s (%s)", p.Candidate, p.Source)
		if p.AverageMicros > 0 {
			fmt.Fprintf(stdout, " %.1f µs ± %.1f", p.AverageMicros, p.SpreadMicros)
		}
		fmt.Fprintf(stdout, ": %s\n", p.Reason)
	}
	st := h.Stats()
	fmt.Fprintf(stdout, "\n%d requests in %.0f ms: %d measured, %d shared within a token bucket, %d from cache, %d device operations for tuning\n",
		len(requests), float64(time.Since(start).Microseconds())/1e3, st.Tunings, st.Shared, st.CacheHits, st.DeviceWork)
	if failed > 0 {
		return fmt.Errorf("%d of %d requests could not be planned", failed, len(requests))
	}
	return nil
}

func printDecision(w io.Writer, d *host.Decision) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  CANDIDATE\tPLUGIN\tCALL µs\tSPREAD µs\tDEVICE µs\tVERDICT\tNOTE")
	for _, m := range d.Measurements {
		t, s, dev := "-", "-", "-"
		if m.Timing.Iterations > 0 {
			t, s = fmt.Sprintf("%.1f", m.Timing.Mean), fmt.Sprintf("%.1f", m.Timing.Spread)
		}
		if m.Device.Iterations > 0 {
			dev = fmt.Sprintf("%.1f", m.Device.Mean)
		}
		note := ""
		if m.Verdict == host.VerdictRefused || m.Verdict == host.VerdictRejected || m.Verdict == host.VerdictFailed {
			note = m.Reason
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\n", m.Candidate, m.Plugin, t, s, dev, m.Verdict, note)
	}
	tw.Flush()
	fmt.Fprintf(w, "  tuning took %.0f ms (%s)\n", float64(d.Cost.Microseconds())/1e3, d.PhaseSummary())
}

// demoRequests is the built-in demo set: decode and prefill shapes of a
// small model on the CPU device, of real models on the GPU.
func demoRequests(kind device.Kind) []sdk.Request {
	affine := func(phase sdk.Phase, role sdk.Role, tokens, in, out, bits, group int) sdk.Request {
		return sdk.Request{
			Family: sdk.FamilyAffine, Phase: phase, Role: role, Tokens: tokens,
			InFeatures: in, OutFeatures: out, Activation: sdk.BF16,
			Weight: sdk.Format{Kind: "affine", Bits: bits, GroupSize: group},
		}
	}
	dense := func(role sdk.Role, tokens, in, out int) sdk.Request {
		phase := sdk.PhaseDecode
		if tokens > 8 {
			phase = sdk.PhasePrefill
		}
		return sdk.Request{Family: sdk.FamilyDense, Phase: phase, Role: role, Tokens: tokens,
			InFeatures: in, OutFeatures: out, Activation: sdk.BF16, Weight: sdk.Format{Kind: "bf16"}}
	}
	if kind == device.CUDA {
		return []sdk.Request{
			affine(sdk.PhaseDecode, sdk.RoleAttentionQKV, 1, 4096, 6144, 4, 64),
			affine(sdk.PhaseDecode, sdk.RoleGateUp, 1, 4096, 28672, 4, 64),
			affine(sdk.PhaseDecode, sdk.RoleDown, 1, 14336, 4096, 4, 64),
			affine(sdk.PhaseDecode, sdk.RoleAttentionOutput, 4, 4096, 4096, 8, 64),
			// 6 bits, MLX's other common width: gemv against the stream
			// kernel's general path (gemv/tensor-core)
			affine(sdk.PhaseDecode, sdk.RoleGateUp, 1, 4096, 14336, 6, 64),
			// a layer an engine asks for at decode and then at prefill (16
			// tokens, below): the second makes and copies only its inputs
			affine(sdk.PhaseDecode, sdk.RoleDown, 1, 28672, 8192, 4, 64),
			// gpt-oss's fused attention projection at decode: 45 groups of
			// 64 a row, which no step of gemv/bulk divides (the stream
			// kernel's last step of one group against gemv)
			affine(sdk.PhaseDecode, sdk.RoleAttentionQKV, 1, 2880, 5120, 4, 64),
			// small batches: the stream kernel or the tiled one, by shape
			affine(sdk.PhasePrefill, sdk.RoleAttentionOutput, 16, 4096, 4096, 4, 64),
			affine(sdk.PhasePrefill, sdk.RoleDown, 16, 28672, 8192, 4, 64),
			// above one mma's 16 tokens: qmm/wave's two token tiles against
			// qmm/stream and qmm/wgmma, measured at 32, the largest of its bucket
			affine(sdk.PhasePrefill, sdk.RoleGateUp, 24, 8192, 28672, 4, 64),
			affine(sdk.PhasePrefill, sdk.RoleGateUp, 256, 4096, 14336, 4, 64),
			// the 6-bit layer above at prefill: the tiled kernel against
			// qmm/wgmma's general unpacking
			affine(sdk.PhasePrefill, sdk.RoleGateUp, 256, 4096, 14336, 6, 64),
			// gpt-oss's fused attention projection at prefill: 2880 inputs,
			// 45 groups of 64 (qmm/wgmma's ODDK variant against the tiled
			// kernel)
			affine(sdk.PhasePrefill, sdk.RoleAttentionQKV, 256, 2880, 5120, 4, 64),
			dense(sdk.RoleRouter, 1, 2880, 32),
			dense(sdk.RoleOutputHead, 512, 4096, 128256),
		}
	}
	return []sdk.Request{
		affine(sdk.PhaseDecode, sdk.RoleAttentionQKV, 1, 1024, 1536, 4, 64),
		affine(sdk.PhaseDecode, sdk.RoleGateUp, 1, 1024, 4096, 4, 64),
		affine(sdk.PhaseDecode, sdk.RoleDown, 1, 2048, 1024, 8, 128),
		affine(sdk.PhaseDecode, sdk.RoleAttentionOutput, 4, 1152, 1032, 3, 64),
		// a layer at decode and then at prefill: the second measurement
		// makes and copies only its inputs
		affine(sdk.PhaseDecode, sdk.RoleGateUp, 1, 1024, 1024, 4, 32),
		affine(sdk.PhasePrefill, sdk.RoleGateUp, 64, 1024, 1024, 4, 32),
		// shares the measurement of 64 tokens, the largest of its bucket
		affine(sdk.PhasePrefill, sdk.RoleGateUp, 40, 1024, 1024, 4, 32),
		dense(sdk.RoleRouter, 1, 2880, 32),
		dense(sdk.RoleOutputHead, 512, 4096, 128256),
	}
}
