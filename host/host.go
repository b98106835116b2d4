// Package host is the library an inference engine embeds: it runs kernel
// plugins as separate processes, owns the device memory they share, and
// picks the fastest correct candidate for each request.
package host

import (
	"context"
	"errors"
	"os"

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
}

// Host runs plugins and selects candidates on one device.
type Host struct {
	logger   hclog.Logger
	dev      device.Device
	manager  *Manager
	registry *Registry
	measurer *measurer
}

// Open starts a host: it opens the device, starts every plugin in the
// plugin directory and indexes their candidates. Plugins that fail to start
// or verify are refused and logged; Open fails only when the device or the
// directory is unusable.
func Open(ctx context.Context, opts Options) (*Host, error) {
	logger := opts.Logger
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	dev, err := openDevice(opts.Device)
	if err != nil {
		return nil, err
	}
	mopts := opts.Manager
	mopts.Dir, mopts.Logger = opts.PluginDir, logger
	if mopts.Dir == "" {
		mopts.Dir = os.Getenv(PluginDirEnv)
	}
	manager, err := StartManager(ctx, mopts)
	if err != nil {
		dev.Close()
		return nil, err
	}
	registry, problems := NewRegistry(manager.Plugins())
	for _, p := range problems {
		logger.Warn("candidate conflict", "error", p)
	}
	measureOpts := opts.Measure
	measureOpts.defaults()
	h := &Host{logger: logger, dev: dev, manager: manager, registry: registry}
	h.measurer = &measurer{dev: dev, hw: dev.Profile(), registry: registry, logger: logger.Named("tuner"), opts: measureOpts}
	logger.Info("host open", "device", dev.Kind(), "hardware", dev.Profile().Name, "plugins", len(manager.Plugins()), "refused", len(manager.Refused()))
	return h, nil
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
	return nil, errdefs.Invalid("device", kind, "want cpu, cuda or auto")
}

// openCUDA is replaced when the CUDA device exists.
var openCUDA = func() (device.Device, error) {
	return nil, errdefs.Unsupported("this host was built without the CUDA device")
}

// Device is the device the host runs on.
func (h *Host) Device() device.Device { return h.dev }

// Hardware describes the device.
func (h *Host) Hardware() sdk.Hardware { return h.dev.Profile() }

// Manager supervises the plugin processes.
func (h *Host) Manager() *Manager { return h.manager }

// Registry indexes the candidates.
func (h *Host) Registry() *Registry { return h.registry }

// Measure runs and times every admitted candidate of req on sample inputs
// and decides which to use.
func (h *Host) Measure(ctx context.Context, req sdk.Request) (*Decision, error) {
	d, err := h.measurer.measure(ctx, req)
	if err != nil {
		return nil, err
	}
	h.logger.Info("decision", "request", req.Key(), "candidate", d.Choice, "source", "measured", "average_us", d.Timing.Mean, "reason", d.Reason)
	return d, nil
}

// Close stops every plugin and frees the device.
func (h *Host) Close() error {
	return errors.Join(h.manager.Close(), h.dev.Close())
}
