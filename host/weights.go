package host

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/kcand/kcand/sdk"
	"github.com/kcand/kcand/sdk/device"
	"github.com/kcand/kcand/sdk/errdefs"
	"github.com/kcand/kcand/sdk/family"
)

// Weights are one layer's weight buffers, held by the host and shared with
// plugins by handle. A plugin that dies loses only its mapping of them.
type Weights struct {
	h       *Host
	req     sdk.Request
	bufs    map[string]device.Buffer
	handles map[string]device.Handle
	owned   bool

	mu     sync.Mutex
	closed bool
}

// RegisterWeights copies tensors (binding name → bytes in the family's
// layout) into buffers the host allocates.
func (h *Host) RegisterWeights(req sdk.Request, tensors map[string][]byte) (*Weights, error) {
	sizes, err := weightSizes(req)
	if err != nil {
		return nil, err
	}
	for name := range tensors {
		if _, ok := sizes[name]; !ok {
			return nil, errdefs.Invalid("weights."+name, len(tensors[name]), "not a weight of %s (want %v)", req.Family, sortedNames(sizes))
		}
	}
	for name, size := range sizes {
		if got := int64(len(tensors[name])); got != size {
			return nil, errdefs.Invalid("weights."+name, got, "%s needs %d bytes", req.Key(), size)
		}
	}
	set, err := allocate(h.dev, sizes)
	if err != nil {
		return nil, err
	}
	if err := set.write(tensors); err != nil {
		set.free()
		return nil, err
	}
	return h.newWeights(req, set.bufs, true)
}

// AdoptWeights shares buffers the engine already holds on the host's
// device; the engine keeps ownership and frees them after Close.
func (h *Host) AdoptWeights(req sdk.Request, bufs map[string]device.Buffer) (*Weights, error) {
	sizes, err := weightSizes(req)
	if err != nil {
		return nil, err
	}
	if err := checkSizes("weights", sizes, bufs); err != nil {
		return nil, err
	}
	return h.newWeights(req, bufs, false)
}

func (h *Host) newWeights(req sdk.Request, bufs map[string]device.Buffer, owned bool) (*Weights, error) {
	w := &Weights{h: h, req: req, bufs: bufs, handles: map[string]device.Handle{}, owned: owned}
	for name, b := range bufs {
		hd, err := b.Handle()
		if err != nil {
			if owned {
				(&bufferSet{dev: h.dev, bufs: bufs}).free()
			}
			return nil, fmt.Errorf("weights.%s: %w", name, err)
		}
		w.handles[name] = hd
	}
	return w, nil
}

// Request is the request the weights were registered for.
func (w *Weights) Request() sdk.Request { return w.req }

// Close tells the plugins to drop their mappings and frees the buffers the
// host allocated.
func (w *Weights) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	w.mu.Unlock()
	var forget []device.Handle
	for _, hd := range w.handles {
		forget = append(forget, hd)
	}
	errs := []error{forgetIn(context.Background(), w.h.manager.Plugins(), forget)}
	if w.owned {
		errs = append(errs, (&bufferSet{dev: w.h.dev, bufs: w.bufs}).free())
	}
	return errors.Join(errs...)
}

func weightSizes(req sdk.Request) (map[string]int64, error) {
	if err := validateAny(req); err != nil {
		return nil, err
	}
	c, err := family.Lookup(req.Family)
	if err != nil {
		return nil, err
	}
	return c.WeightSizes(req), nil
}

// checkSizes checks that every named binding is present and large enough.
func checkSizes(prefix string, sizes map[string]int64, bufs map[string]device.Buffer) error {
	for _, name := range sortedNames(sizes) {
		b, ok := bufs[name]
		if !ok {
			return errdefs.Invalid(prefix+"."+name, "missing", "binding required")
		}
		if b.Size() < sizes[name] {
			return errdefs.Invalid(prefix+"."+name, b.Size(), "buffer holds %d bytes, needs %d", b.Size(), sizes[name])
		}
	}
	return nil
}
