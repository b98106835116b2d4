package cuda_test

import (
	"errors"
	"fmt"
	"log"

	"github.com/kcand/kcand/cuda"
)

// A plugin compiles its kernel for the GPU at start (a cache hit from the
// second start on), loads it, and launches on the device's stream.
func Example() {
	d, err := cuda.NewDevice(0)
	if errors.Is(err, cuda.ErrNoDriver) {
		fmt.Println("no GPU here:", err)
		return
	}
	if err != nil {
		log.Fatal(err)
	}
	defer d.Close()

	compiler, err := cuda.NewCompiler()
	if err != nil {
		log.Fatal(err)
	}
	kernel, err := compiler.Compile(cuda.Source{
		Name: "scale.cu",
		Code: `extern "C" __global__ void scale(float *x, float a, unsigned n) {
			unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
			if (i < n) x[i] *= a;
		}`,
	}, d.Info().ComputeCapability.Target(false))
	if err != nil {
		log.Fatal(err) // a *cuda.CompileError carries NVRTC's log
	}
	module, err := kernel.Load(d.Context())
	if err != nil {
		log.Fatal(err)
	}
	scale, err := module.Function("scale")
	if err != nil {
		log.Fatal(err)
	}
	const n = 1 << 20
	x, err := d.Alloc(4 * n)
	if err != nil {
		log.Fatal(err)
	}
	cfg := cuda.LaunchConfig{Grid: cuda.Dim3{X: n / 256}, Block: cuda.Dim3{X: 256}}
	if err := scale.Launch(d.Stream(), cfg, cuda.NewArgs().Buffer(x).Float32(2).Uint32(n)); err != nil {
		log.Fatal(err)
	}
	fmt.Println("cache hit:", kernel.CacheHit, "sync:", d.Synchronize())
}

// The host's hot loop binds its goroutine once, so every launch is a single
// cgo call into cuLaunchKernel.
func ExampleContext_LockThread() {
	d, err := cuda.NewDevice(0)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer d.Close()
	unlock, err := d.Context().LockThread()
	if err != nil {
		log.Fatal(err)
	}
	defer unlock()
	var fn *cuda.Function // from a module the host loaded
	args := cuda.NewArgs()
	for step := 0; fn != nil && step < 1000; step++ {
		cfg := cuda.LaunchConfig{Grid: cuda.Dim3{X: 132}, Block: cuda.Dim3{X: 256}}
		if err := fn.Launch(d.Stream(), cfg, args.Reset().Int32(int32(step))); err != nil {
			log.Fatal(err)
		}
	}
}
