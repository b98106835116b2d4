// Package gpukernel helps a plugin serve CUDA C kernels: compile a variant
// with NVRTC for the device's architecture (cached on disk, so a plugin's
// second start compiles nothing), load it in the plugin's context for the
// remote path, and describe its launches as a launch plan the host can run
// on its own stream.
package gpukernel

import (
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/kcand/kcand/cuda"
	"github.com/kcand/kcand/sdk"
	"github.com/kcand/kcand/sdk/device"
	"github.com/kcand/kcand/sdk/errdefs"
)

// Source is a kernel's CUDA C text and the name of its file.
type Source struct {
	Name string
	Code string
}

// Variant is one specialisation of a source: its entry point and the
// preprocessor definitions that shape it.
type Variant struct {
	Entry   string
	Defines map[string]int
	// ArchSpecific compiles for sm_XYa (Hopper-only instructions).
	ArchSpecific bool
}

// key names a variant in the in-process cache.
func (v Variant) key(src Source) string {
	names := make([]string, 0, len(v.Defines))
	for k := range v.Defines {
		names = append(names, k)
	}
	sort.Strings(names)
	var b strings.Builder
	fmt.Fprintf(&b, "%s|%s|%v", src.Name, v.Entry, v.ArchSpecific)
	for _, n := range names {
		fmt.Fprintf(&b, "|%s=%d", n, v.Defines[n])
	}
	return b.String()
}

// Options are the NVRTC options that compile a variant: its definitions,
// in a stable order so that the disk cache recognises them.
func Options(v Variant) []string {
	opts := []string{"-std=c++17", "-default-device"}
	names := make([]string, 0, len(v.Defines))
	for n := range v.Defines {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		opts = append(opts, fmt.Sprintf("-D%s=%d", n, v.Defines[n]))
	}
	return opts
}

// String names the variant for logs and tests: entry and definitions.
func (v Variant) String() string {
	return strings.Join(append([]string{v.Entry}, Options(v)[2:]...), " ")
}

// Kernel is a compiled, loaded variant.
type Kernel struct {
	Module sdk.Module
	Entry  string
	fn     *cuda.Function
	mod    *cuda.Module
	dev    *cuda.Device
	// CacheHit says NVRTC's disk cache supplied the image.
	CacheHit bool
}

// Sibling is another entry point of the same compiled module (a source
// with several kernels launched one after another).
func (k *Kernel) Sibling(entry string) (*Kernel, error) {
	if k.mod == nil {
		return nil, errdefs.Internal("kernel %s has no loaded module to find %s in", k.Entry, entry)
	}
	fn, err := k.mod.Function(entry)
	if err != nil {
		return nil, err
	}
	return &Kernel{Module: k.Module, Entry: entry, fn: fn, mod: k.mod, dev: k.dev, CacheHit: k.CacheHit}, nil
}

// Cache compiles each variant once per process.
type Cache struct {
	mu       sync.Mutex
	compiler *cuda.Compiler
	kernels  map[string]*Kernel
}

// NewCache returns an empty cache; the NVRTC compiler opens on first use.
func NewCache() *Cache { return &Cache{kernels: map[string]*Kernel{}} }

// Get returns the variant compiled for dev, compiling and loading it the
// first time.
func (c *Cache) Get(dev *cuda.Device, src Source, v Variant) (*Kernel, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	key := v.key(src)
	if k, ok := c.kernels[key]; ok && k.dev == dev {
		return k, nil
	}
	if c.compiler == nil {
		comp, err := cuda.NewCompiler()
		if err != nil {
			return nil, err
		}
		c.compiler = comp
	}
	target := dev.Info().ComputeCapability.Target(v.ArchSpecific)
	out, err := c.compiler.Compile(cuda.Source{Name: src.Name, Code: src.Code, Options: Options(v)}, target)
	if err != nil {
		return nil, err
	}
	mod, err := dev.Context().LoadModule(out.Image)
	if err != nil {
		return nil, err
	}
	fn, err := mod.Function(v.Entry)
	if err != nil {
		return nil, err
	}
	kind := sdk.ModuleCubin
	if out.Format == cuda.FormatPTX {
		kind = sdk.ModulePTX
	}
	k := &Kernel{Module: sdk.NewModule(kind, out.Image), Entry: v.Entry, fn: fn, mod: mod, dev: dev, CacheHit: out.CacheHit}
	c.kernels[key] = k
	return k, nil
}

// Launch is one launch of a kernel.
type Launch struct {
	Grid, Block [3]uint32
	SharedBytes uint32
	Params      []sdk.Param
	// Programmatic: the launch may start before earlier work in the stream
	// has finished; the kernel must execute griddepcontrol.wait before it
	// reads or writes anything that earlier work reads or writes (see
	// sdk.Launch).
	Programmatic bool
}

// config is how the driver is to run l: its shape, shared memory and
// early start.
func (l Launch) config() cuda.LaunchConfig {
	return cuda.LaunchConfig{
		Grid:              cuda.Dim3{X: int(l.Grid[0]), Y: int(l.Grid[1]), Z: int(l.Grid[2])},
		Block:             cuda.Dim3{X: int(l.Block[0]), Y: int(l.Block[1]), Z: int(l.Block[2])},
		SharedMemoryBytes: int(l.SharedBytes),
		Programmatic:      l.Programmatic,
	}
}

// Step is one launch of one kernel, part of a candidate's execution.
type Step struct {
	Kernel *Kernel
	Launch Launch
}

// Plan is the launch plan of k with one launch.
func (k *Kernel) Plan(l Launch) sdk.LaunchPlan { return Plan(Step{Kernel: k, Launch: l}) }

// Plan is the launch plan that runs steps in order; each module is listed
// once.
func Plan(steps ...Step) sdk.LaunchPlan {
	var plan sdk.LaunchPlan
	seen := map[string]bool{}
	for _, s := range steps {
		k, l := s.Kernel, s.Launch
		if !seen[k.Module.Hash] {
			seen[k.Module.Hash] = true
			plan.Modules = append(plan.Modules, k.Module)
		}
		plan.Launches = append(plan.Launches, sdk.Launch{
			Module: k.Module.Hash, Function: k.Entry, Grid: l.Grid, Block: l.Block, SharedBytes: l.SharedBytes, Params: l.Params,
			Programmatic: l.Programmatic,
		})
	}
	return plan
}

// Run launches k on the device's stream with the parameters bound to
// buffers (the remote path: the plugin executes itself). A tensor-map
// parameter is encoded over its buffer for this launch.
func (k *Kernel) Run(l Launch, buffers map[string]device.Buffer) error {
	args := cuda.NewArgs()
	for i, p := range l.Params {
		if p.Buffer == "" {
			args.Bytes(p.Scalar, len(p.Scalar))
			continue
		}
		b, ok := buffers[p.Buffer]
		if !ok {
			return errdefs.Invalid("buffers."+p.Buffer, "missing", "parameter %d of %s needs it", i, k.Entry)
		}
		dm, ok := b.(device.DeviceMemory)
		if !ok {
			return errdefs.Invalid("buffers."+p.Buffer, fmt.Sprintf("%T", b), "not GPU memory")
		}
		addr := cuda.DevicePtr(dm.DevicePointer() + uintptr(p.Offset))
		if p.TensorMap == nil {
			args.Pointer(addr)
			continue
		}
		if err := sdk.CheckTensorMap(fmt.Sprintf("%s.params[%d]", k.Entry, i), p, b.Size()); err != nil {
			return err
		}
		m, err := k.dev.Context().EncodeTensorMap(*p.TensorMap, addr)
		if err != nil {
			return fmt.Errorf("parameter %d of %s over %s: %w", i, k.Entry, p.Buffer, err)
		}
		args.TensorMap(&m)
	}
	return k.fn.Launch(k.dev.Stream(), l.config(), args)
}

// Occupancy is how many blocks of k fit on one multiprocessor.
func (k *Kernel) Occupancy(threads, sharedBytes int) (int, error) {
	if sharedBytes > 48<<10 {
		if err := k.fn.SetMaxDynamicSharedMemory(sharedBytes); err != nil {
			return 0, err
		}
	}
	return k.fn.MaxActiveBlocksPerMultiprocessor(threads, sharedBytes)
}

// NullPointer is an 8-byte zero parameter: an absent optional buffer.
var NullPointer = sdk.Param{Scalar: make([]byte, 8)}
