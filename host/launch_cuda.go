package host

import (
	"fmt"
	"sort"
	"sync"

	"github.com/kcand/kcand/cuda"
	"github.com/kcand/kcand/sdk"
	"github.com/kcand/kcand/sdk/device"
	"github.com/kcand/kcand/sdk/errdefs"
)

// cudaLauncher loads exported launch plans into the host's CUDA context.
// Modules are cached by content hash for the life of the host: a plugin
// sends each image once, and a plugin's death leaves loaded modules working.
type cudaLauncher struct {
	dev *cuda.Device

	mu      sync.Mutex
	modules map[string]*cuda.Module
}

var _ launcher = (*cudaLauncher)(nil)

func newCUDALauncher(dev *cuda.Device) *cudaLauncher {
	return &cudaLauncher{dev: dev, modules: map[string]*cuda.Module{}}
}

func (l *cudaLauncher) known(hash string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.modules[hash]
	return ok
}

func (l *cudaLauncher) knownModules() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]string, 0, len(l.modules))
	for h := range l.modules {
		out = append(out, h)
	}
	sort.Strings(out)
	return out
}

// module returns the loaded module of a hash, loading the image when new.
func (l *cudaLauncher) module(m sdk.Module) (*cuda.Module, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if mod, ok := l.modules[m.Hash]; ok {
		return mod, nil
	}
	if len(m.Image) == 0 {
		return nil, &sdk.LaunchPlanError{Field: "modules.image", Value: m.Hash[:12], Reason: "the host has no such module"}
	}
	mod, err := l.dev.Context().LoadModule(m.Image)
	if err != nil {
		return nil, &sdk.LaunchPlanError{Field: "modules.image", Value: m.Hash[:12], Reason: "the driver refuses it: " + err.Error()}
	}
	l.modules[m.Hash] = mod
	return mod, nil
}

// cudaLaunch is one validated launch with its function resolved.
type cudaLaunch struct {
	fn     *cuda.Function
	config cuda.LaunchConfig
	params []sdk.Param
	slots  []int // each parameter's slot in the plan's bindings (see newPlanBindings)
	args   *cuda.Args
}

// cudaPlan is a loaded launch plan with its fixed bindings (weights and
// workspace); a run binds the inputs and outputs and launches in order.
type cudaPlan struct {
	dev      *cuda.Device
	launches []*cudaLaunch
	mu       sync.Mutex // guards bindings and the launches' argument buffers
	bindings *planBindings
	// scratch gives each stream its own workspace (nil: the plan has
	// none), bound at scratchSlot.
	scratch     *streamScratch
	scratchSlot int
}

// load checks what needs the device (each function exists, its parameters
// have the sizes the plan gives, its shared memory fits) and resolves
// everything a run needs, so a run does no lookup but the bindings. A
// buffer a run binds must hold ioSizes[name] bytes, or as many as the fixed
// buffer of that name it replaces.
func (l *cudaLauncher) load(plan *sdk.LaunchPlan, fixed map[string]device.Buffer, ioSizes map[string]int64) (exported, error) {
	modules := map[string]sdk.Module{}
	for _, m := range plan.Modules {
		modules[m.Hash] = m
	}
	params := make([][]sdk.Param, len(plan.Launches))
	for i, ln := range plan.Launches {
		params[i] = ln.Params
	}
	bindings, slots, err := newPlanBindings(params, fixed, ioSizes)
	if err != nil {
		return nil, err
	}
	bindings.encode = l.dev.Context().EncodeTensorMap
	if err := bindings.encodeFixed(); err != nil {
		return nil, err
	}
	out := &cudaPlan{dev: l.dev, bindings: bindings, scratchSlot: bindings.fixedSlot(sdk.BufferWorkspace)}
	if out.scratchSlot >= 0 {
		out.scratch = newStreamScratch(l.dev, fixed[sdk.BufferWorkspace].Size())
	}
	for i, ln := range plan.Launches {
		field := fmt.Sprintf("launches[%d]", i)
		mod, err := l.module(modules[ln.Module])
		if err != nil {
			return nil, err
		}
		fn, err := mod.Function(ln.Function)
		if err != nil {
			return nil, &sdk.LaunchPlanError{Field: field + ".function", Value: ln.Function, Reason: err.Error()}
		}
		if err := checkParams(field, fn, ln.Params); err != nil {
			return nil, err
		}
		if int(ln.SharedBytes) > 48<<10 {
			if err := fn.SetMaxDynamicSharedMemory(int(ln.SharedBytes)); err != nil {
				return nil, &sdk.LaunchPlanError{Field: field + ".shared_bytes", Value: ln.SharedBytes, Reason: err.Error()}
			}
		}
		out.launches = append(out.launches, &cudaLaunch{
			fn:     fn,
			slots:  slots[i],
			config: launchConfig(ln),
			params: ln.Params,
			args:   cuda.NewArgs(),
		})
	}
	return out, nil
}

// launchConfig is how the driver is to run ln: its shape, shared memory
// and early start.
func launchConfig(ln sdk.Launch) cuda.LaunchConfig {
	return cuda.LaunchConfig{
		Grid:              cuda.Dim3{X: int(ln.Grid[0]), Y: int(ln.Grid[1]), Z: int(ln.Grid[2])},
		Block:             cuda.Dim3{X: int(ln.Block[0]), Y: int(ln.Block[1]), Z: int(ln.Block[2])},
		SharedMemoryBytes: int(ln.SharedBytes),
		Programmatic:      ln.Programmatic,
	}
}

// checkParams compares the plan's parameters with the kernel's own layout
// when the driver can report it (CUDA 12.4+).
func checkParams(field string, fn *cuda.Function, params []sdk.Param) error {
	info, err := fn.ParamInfo()
	if err != nil {
		return nil // an older driver cannot say; the static checks stand
	}
	if len(info) != len(params) {
		return &sdk.LaunchPlanError{Field: field + ".params", Value: len(params), Reason: fmt.Sprintf("kernel %s takes %d parameters", fn.Name(), len(info))}
	}
	for j, p := range params {
		size := len(p.Scalar)
		switch {
		case p.TensorMap != nil:
			size = len(cuda.TensorMap{})
		case p.Buffer != "":
			size = 8
		}
		if info[j].Size != size {
			return &sdk.LaunchPlanError{Field: fmt.Sprintf("%s.params[%d]", field, j), Value: size, Reason: fmt.Sprintf("kernel %s expects %d bytes there", fn.Name(), info[j].Size)}
		}
	}
	return nil
}

// run binds io (which may also override fixed bindings, as weight rotation
// does) and enqueues every launch on stream (the device's stream when nil).
func (p *cudaPlan) run(stream device.Stream, io map[string]device.Buffer) error {
	s := p.dev.Stream()
	if stream != nil {
		cs, ok := stream.(*cuda.Stream)
		if !ok {
			return errdefs.Invalid("stream", fmt.Sprintf("%T", stream), "not a CUDA stream")
		}
		s = cs
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	// Every binding is checked before the first launch is enqueued, so a
	// bad one leaves the device untouched.
	if err := p.bindings.resolve(io); err != nil {
		return err
	}
	if err := p.bindStreamScratch(s, io); err != nil {
		return err
	}
	for _, l := range p.launches {
		p.bindings.pack(l.args, l.params, l.slots)
	}
	for _, l := range p.launches {
		if err := l.fn.Launch(s, l.config, l.args); err != nil {
			return err
		}
	}
	return nil
}

// bindStreamScratch binds s's own workspace when the plan has one and io
// does not bind its own: runs on different streams may overlap.
func (p *cudaPlan) bindStreamScratch(s *cuda.Stream, io map[string]device.Buffer) error {
	if p.scratch == nil {
		return nil
	}
	if _, ok := io[sdk.BufferWorkspace]; ok {
		return nil
	}
	buf, err := p.scratch.forStream(s)
	if err != nil || buf == nil {
		return err
	}
	return p.bindings.replace(p.scratchSlot, buf, "stream workspace")
}

// close frees the workspaces of streams other than the first once their
// work is done. It waits for a run being enqueued (the plan's lock), so no
// launch binds a workspace after it is freed.
func (p *cudaPlan) close() error {
	if p.scratch == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.scratch.close()
}

// DirectLaunch launches an exported executable's kernels with arguments
// bound once, straight through cuda/: what an engine launching the same
// cubin itself would do. It exists to measure the host's per-call cost.
type DirectLaunch struct {
	launches []directLaunch
}

type directLaunch struct {
	fn   *cuda.Function
	cfg  cuda.LaunchConfig
	args *cuda.Args
}

// Direct binds io once and returns the raw launches, or an error when the
// executable does not run exported kernels.
func (e *Executable) Direct(io map[string]device.Buffer) (*DirectLaunch, error) {
	e.mu.Lock()
	plan, ok := e.exported.(*cudaPlan)
	e.mu.Unlock()
	if !ok {
		return nil, errdefs.Unsupported("executable %s runs remotely; it has no kernels to launch directly", e.plan.Candidate)
	}
	plan.mu.Lock()
	defer plan.mu.Unlock()
	if err := plan.bindings.resolve(io); err != nil {
		return nil, err
	}
	d := &DirectLaunch{}
	for _, l := range plan.launches {
		args := cuda.NewArgs()
		plan.bindings.pack(args, l.params, l.slots)
		d.launches = append(d.launches, directLaunch{fn: l.fn, cfg: l.config, args: args})
	}
	return d, nil
}

// Launch enqueues the kernels on s.
func (d *DirectLaunch) Launch(s *cuda.Stream) error {
	for _, l := range d.launches {
		if err := l.fn.Launch(s, l.cfg, l.args); err != nil {
			return err
		}
	}
	return nil
}
