package sdk

import (
	"errors"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/kcand/kcand/cuda"
	"github.com/kcand/kcand/sdk/device"
	"github.com/kcand/kcand/sdk/device/cpu"
	"github.com/kcand/kcand/sdk/errdefs"
)

// deviceOpeners make the device of each kind in a plugin process, on first
// use or, when the host names its device (EnvWarmDevice), as the plugin
// starts: a plugin with no CUDA candidate, or under a host on the CPU,
// never initialises CUDA.
var deviceOpeners = map[device.Kind]func() (device.Device, error){
	device.CPU:  func() (device.Device, error) { return cpu.New(), nil },
	device.CUDA: func() (device.Device, error) { return cuda.OpenDevice(0) },
}

// RegisterDevice makes kind available to plugins served by this process.
// Call it from main before Serve.
func RegisterDevice(kind device.Kind, open func() (device.Device, error)) {
	deviceOpeners[kind] = open
}

// EnvWarmDevice names the device kind a host runs on ("cuda"); the host
// sets it in each plugin's environment unless its own environment already
// does ("none" turns the early start off). A plugin with candidates for that
// kind then opens its device in the background as it starts, so that the
// device's start (a CUDA context: 0.1–0.3 s) overlaps the host's own
// instead of falling on the first request the host tunes.
const EnvWarmDevice = "KCAND_WARM_DEVICE"

// deviceSet holds a plugin's devices, opened lazily by kind.
type deviceSet struct {
	mu      sync.Mutex
	devices map[device.Kind]device.Device
	// closed refuses opens after close: a device opened ahead of use must
	// not outlive the runtime that closed while it was opening.
	closed bool
}

func newDeviceSet() *deviceSet { return &deviceSet{devices: map[device.Kind]device.Device{}} }

func (s *deviceSet) get(kind device.Kind) (device.Device, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d, ok := s.devices[kind]; ok {
		return d, nil
	}
	if s.closed {
		return nil, ErrUnavailable
	}
	open, ok := deviceOpeners[kind]
	if !ok {
		return nil, errdefs.Unsupported("this plugin has no %q device", kind)
	}
	d, err := open()
	if err != nil {
		return nil, err
	}
	s.devices[kind] = d
	return d, nil
}

// warm opens the device of kind in the background and returns a channel
// closed when it is done, or nil when kind has no opener. An error is only
// logged: get does not keep it, so the first call that needs the device
// tries again and reports it.
func (s *deviceSet) warm(kind device.Kind, logger hclog.Logger) <-chan struct{} {
	if _, ok := deviceOpeners[kind]; !ok {
		return nil
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		start := time.Now()
		if _, err := s.get(kind); err != nil {
			logger.Debug("device not opened ahead of use", "device", kind, "error", err)
			return
		}
		logger.Debug("device opened ahead of use", "device", kind, "took", time.Since(start))
	}()
	return done
}

// openAll opens every handle on the device of kind.
func (s *deviceSet) openAll(kind device.Kind, handles map[string]device.Handle) (device.Device, Buffers, error) {
	d, err := s.get(kind)
	if err != nil {
		return nil, nil, err
	}
	bufs, err := s.open(d, handles)
	return d, bufs, err
}

// open opens every handle on d; a handle of another kind is refused.
func (s *deviceSet) open(d device.Device, handles map[string]device.Handle) (Buffers, error) {
	out := make(Buffers, len(handles))
	for name, h := range handles {
		if h.Kind != d.Kind() {
			return nil, errdefs.Invalid("buffers."+name+".kind", h.Kind, "prepared on a %s device", d.Kind())
		}
		b, err := d.Open(h)
		if err != nil {
			return nil, err
		}
		out[name] = b
	}
	return out, nil
}

func (s *deviceSet) forget(handles []device.Handle) error {
	var errs []error
	for _, h := range handles {
		s.mu.Lock()
		d, ok := s.devices[h.Kind]
		s.mu.Unlock()
		if ok {
			errs = append(errs, d.Forget(h.Owner, h.Allocation))
		}
	}
	return errors.Join(errs...)
}

func (s *deviceSet) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for _, d := range s.devices {
		errs = append(errs, d.Close())
	}
	s.devices = map[device.Kind]device.Device{}
	s.closed = true
	return errors.Join(errs...)
}
