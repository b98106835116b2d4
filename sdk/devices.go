package sdk

import (
	"errors"
	"sync"

	"github.com/kcand/kcand/cuda"
	"github.com/kcand/kcand/sdk/device"
	"github.com/kcand/kcand/sdk/device/cpu"
	"github.com/kcand/kcand/sdk/errdefs"
)

// deviceOpeners make the device of each kind in a plugin process, on first
// use: a plugin that never sees a CUDA handle never initialises CUDA.
var deviceOpeners = map[device.Kind]func() (device.Device, error){
	device.CPU:  func() (device.Device, error) { return cpu.New(), nil },
	device.CUDA: func() (device.Device, error) { return cuda.OpenDevice(0) },
}

// RegisterDevice makes kind available to plugins served by this process.
// Call it from main before Serve.
func RegisterDevice(kind device.Kind, open func() (device.Device, error)) {
	deviceOpeners[kind] = open
}

// deviceSet holds a plugin's devices, opened lazily by kind.
type deviceSet struct {
	mu      sync.Mutex
	devices map[device.Kind]device.Device
}

func newDeviceSet() *deviceSet { return &deviceSet{devices: map[device.Kind]device.Device{}} }

func (s *deviceSet) get(kind device.Kind) (device.Device, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d, ok := s.devices[kind]; ok {
		return d, nil
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
	return errors.Join(errs...)
}
