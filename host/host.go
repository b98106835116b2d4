// Package host is the library an inference engine embeds: it runs kernel
// plugins as separate processes, owns the device memory they share, and
// picks the fastest correct candidate for each request.
package host

import (
	"context"
	"errors"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/kcand/kcand/sdk"
	"github.com/kcand/kcand/sdk/device"
	"github.com/kcand/kcand/sdk/device/cpu"
	"github.com/kcand/kcand/sdk/errdefs"
)

// Options configure a Host.
type Options struct {
	// PluginDir holds the plugin binaries; empty means $KCAND_PLUGIN_DIR.
	PluginDir string
	// Device is "cpu", "cuda" or "auto" (CUDA when a GPU is usable, else
	// CPU); empty means auto.
	Device string
	// Logger receives the host's logs and, named per plugin, the plugins'.
	Logger hclog.Logger
	// Manager tunes plugin supervision; its Dir and Logger are filled in.
	Manager ManagerOptions
	// Measure tunes candidate measurement.
	Measure MeasureOptions
	// Policy governs selection; nil means LoadPolicy("") (the defaults with
	// the KCAND_* environment variables applied).
	Policy *Policy
	// CachePath is the plan cache file; empty keeps plans in memory only.
	CachePath string
	// QuarantineAfter consecutive failures refuse a candidate for
	// QuarantineFor (defaults 3 and 10 minutes).
	QuarantineAfter int
	QuarantineFor   time.Duration
	// NoChannels turns the doorbell fast path off: remote calls go over
	// gRPC (for comparison and debugging).
	NoChannels bool
	// ForceRemote runs every candidate in its plugin even when it exports
	// its kernels (for comparison and debugging).
	ForceRemote bool
	// ChannelOrdering picks how remote GPU work is ordered against the
	// caller's stream; the default chooses by whether MPS runs.
	ChannelOrdering ChannelOrdering
}

// LoadPolicy builds a policy from the defaults, then the JSON file at path
// (when not empty), then the KCAND_* environment variables.
func LoadPolicy(path string) (Policy, error) {
	p := DefaultPolicy()
	var err error
	if path != "" {
		if p, err = p.LoadPolicyFile(path); err != nil {
			return p, err
		}
	}
	return p.ApplyEnv(os.Environ())
}

// Host runs plugins and selects candidates on one device.
type Host struct {
	logger   hclog.Logger
	dev      device.Device
	manager  *Manager
	registry *Registry
	measurer *measurer
	planner  *planner
	cache    *Cache
	policy   Policy
	// launcher runs exported launch plans; nil on devices without kernels.
	launcher launcher
	// env is what preparing and running candidates needs.
	env *execEnv
	// shm allocates the doorbell pages of remote channels.
	shm *cpu.Device
}

// Open starts a host: it starts every plugin in the plugin directory (on a
// GPU, telling them to open it ahead of use), opens the device and indexes
// the candidates. Plugins that fail to start or verify are refused and
// logged; Open fails only when the device or the directory is unusable.
func Open(ctx context.Context, opts Options) (*Host, error) {
	logger := opts.Logger
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	policy, err := resolvePolicy(opts.Policy)
	if err != nil {
		return nil, err
	}
	if err := checkDeviceName(opts.Device); err != nil {
		return nil, err
	}
	mopts := opts.Manager
	mopts.Dir, mopts.Logger = opts.PluginDir, logger
	if mopts.Dir == "" {
		mopts.Dir = os.Getenv(PluginDirEnv)
	}
	// The plugins start first, told which device to open ahead of use, so
	// that their CUDA contexts start while the host makes its own.
	mopts.Env = warmDeviceEnv(opts.Device, mopts.Env)
	manager, err := StartManager(ctx, mopts)
	if err != nil {
		return nil, err
	}
	dev, err := openDevice(opts.Device)
	if err != nil {
		manager.Close()
		return nil, err
	}
	registry, problems := NewRegistry(manager.Plugins())
	for _, p := range problems {
		logger.Warn("candidate conflict", "error", p)
	}
	measureOpts := opts.Measure
	measureOpts.defaults()
	h := &Host{logger: logger, dev: dev, manager: manager, registry: registry, policy: policy, launcher: launcherFor(dev), shm: cpu.New()}
	health := newQuarantine(opts.QuarantineAfter, opts.QuarantineFor, logger.Named("quarantine"))
	h.env = &execEnv{dev: dev, hw: dev.Profile(), launcher: h.launcher, health: health, forceRemote: opts.ForceRemote, lent: newLentBuffers(dev.Kind())}
	if w, ok := dev.(device.FreeWatcher); ok {
		w.WatchFree(h.forgetOnFree)
	}
	if opts.ForceRemote {
		h.env.launcher, h.launcher = nil, nil
	}
	if !opts.NoChannels {
		h.env.channels = newChannelFactory(h.shm, dev, opts.ChannelOrdering, logger.Named("channel"))
	}
	h.measurer = &measurer{env: h.env, dev: dev, hw: dev.Profile(), registry: registry, logger: logger.Named("tuner"), opts: measureOpts, policy: policy,
		health: health, launcher: h.launcher, kept: keptSamples{limit: max(0, measureOpts.KeepSampleBytes)}}
	h.cache = OpenCache(opts.CachePath, validatorsFor(dev.Profile()), stamps(manager.Plugins()), logger.Named("cache"))
	h.planner = newPlanner(registry, h.measurer, h.cache, policy, dev.Profile(), logger.Named("planner"))
	h.planner.owner = h
	logger.Info("host open", "device", dev.Kind(), "hardware", dev.Profile().Name, "plugins", len(manager.Plugins()), "refused", len(manager.Refused()))
	if dev.Kind() == device.CUDA {
		logger.Info("GPU sharing", "mps", MPSStatus())
	}
	return h, nil
}

// checkDeviceName refuses a device name openDevice would not know.
func checkDeviceName(kind string) error {
	switch kind {
	case "", "auto", string(device.CPU), string(device.CUDA):
		return nil
	}
	return errdefs.Invalid("device", kind, "want cpu, cuda or auto")
}

// openDevice opens the device named by kind.
func openDevice(kind string) (device.Device, error) {
	switch kind {
	case "", "auto":
		if d, err := openCUDA(); err == nil {
			return d, nil
		}
		return cpu.New(), nil
	case string(device.CPU):
		return cpu.New(), nil
	case string(device.CUDA):
		return openCUDA()
	}
	return nil, checkDeviceName(kind)
}

// warmDeviceEnv adds EnvWarmDevice=cuda to the plugins' environment env
// when the host will try a CUDA device, unless env or the host's own
// environment (which plugins inherit) already sets it: "none" there turns
// the early start off.
func warmDeviceEnv(kind string, env []string) []string {
	if _, set := os.LookupEnv(sdk.EnvWarmDevice); set {
		return env
	}
	for _, kv := range env {
		if strings.HasPrefix(kv, sdk.EnvWarmDevice+"=") {
			return env
		}
	}
	if !wantsCUDA(kind) {
		return env
	}
	return append(env[:len(env):len(env)], sdk.EnvWarmDevice+"="+string(device.CUDA))
}

// Device is the device the host runs on.
func (h *Host) Device() device.Device { return h.dev }

// Hardware describes the device.
func (h *Host) Hardware() sdk.Hardware { return h.dev.Profile() }

// Manager supervises the plugin processes.
func (h *Host) Manager() *Manager { return h.manager }

// Registry indexes the candidates.
func (h *Host) Registry() *Registry { return h.registry }

func resolvePolicy(p *Policy) (Policy, error) {
	if p == nil {
		return LoadPolicy("")
	}
	return *p, p.Validate()
}

func validatorsFor(hw sdk.Hardware) Validators {
	return Validators{HostVersion: Version, Device: string(hw.Kind), GPU: hw.Name, ComputeCapability: hw.ComputeCapability, Driver: hw.Driver}
}

func stamps(plugins []*Plugin) map[string]PluginStamp {
	out := map[string]PluginStamp{}
	for _, p := range plugins {
		out[p.Name()] = stampOf(p)
	}
	return out
}

// Plan returns the plan for req: forced by policy, else cached, else
// measured now (one tuner per request; concurrent callers get the fallback
// or wait, by policy), else the fallback. The same request gets the same
// plan for the rest of the host's life.
func (h *Host) Plan(ctx context.Context, req sdk.Request) (*Plan, error) {
	return h.planner.plan(ctx, req)
}

// Stats reports what the planner has done.
func (h *Host) Stats() Stats { return h.planner.stats() }

// Cache is the plan cache.
func (h *Host) Cache() *Cache { return h.cache }

// Policy is the policy in force.
func (h *Host) Policy() Policy { return h.policy }

// Measure runs and times every admitted candidate of req on sample inputs
// and decides which to use.
func (h *Host) Measure(ctx context.Context, req sdk.Request) (*Decision, error) {
	d, err := h.measurer.measure(ctx, req, 0)
	if err != nil {
		return nil, err
	}
	h.logger.Info("decision", "request", req.Key(), "candidate", d.Choice, "source", "measured", "average_us", d.Timing.Mean, "reason", d.Reason)
	return d, nil
}

// Close stops every plugin and frees the device.
func (h *Host) Close() error {
	if h.env.channels != nil {
		h.env.channels.close()
	}
	h.measurer.close()
	return errors.Join(h.manager.Close(), h.dev.Close(), h.shm.Close())
}
