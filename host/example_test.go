package host_test

import (
	"context"
	"fmt"
	"os"

	"github.com/kcand/kcand/host"
	"github.com/kcand/kcand/sdk"
	"github.com/kcand/kcand/sdk/device"
	"github.com/kcand/kcand/sdk/family/affine"
)

// Example shows an engine's use of the host: open it on a plugin directory,
// plan a request, register a layer's weights, bind and run.
func Example() {
	ctx := context.Background()
	h, err := host.Open(ctx, host.Options{
		PluginDir: os.Getenv(host.PluginDirEnv), // e.g. bin/plugins
		Device:    "cpu",                        // "cuda" or "auto" on a GPU machine
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer h.Close()

	req := sdk.Request{
		Family: sdk.FamilyAffine, Phase: sdk.PhaseDecode, Role: sdk.RoleGateUp,
		Tokens: 1, InFeatures: 512, OutFeatures: 256, Activation: sdk.BF16,
		Weight: sdk.Format{Kind: "affine", Bits: 4, GroupSize: 64},
	}
	plan, err := h.Plan(ctx, req) // measured now, or served from the cache
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("plan from", plan.Source)

	sample := affine.RandomSample(req, 42) // stands in for a checkpoint's tensors
	weights, err := h.RegisterWeights(req, sample.Weights)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer weights.Close()
	exe, err := plan.Bind(ctx, weights)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer exe.Close()

	dev := h.Device()
	x, _ := dev.Alloc(int64(req.Tokens * req.InFeatures * 2))
	y, _ := dev.Alloc(int64(req.Tokens * req.OutFeatures * 2))
	defer func() {
		dev.Free(x) // a plugin that ran on x drops its mapping first
		dev.Free(y)
	}()
	dev.Write(x, 0, sample.Inputs[affine.X])
	if err := exe.Run(ctx, nil, map[string]device.Buffer{affine.X: x, affine.Y: y}); err != nil {
		fmt.Println(err)
		return
	}
	out := make([]byte, y.Size())
	dev.Read(out, y, 0)
	want := affine.Reference(req, sample.Weights, sample.Inputs[affine.X])
	fmt.Println("matches the float64 reference:", affine.Check(out, want) == nil)
	// Output:
	// plan from measured
	// matches the float64 reference: true
}
