package host

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/kcand/kcand/cuda"
	"github.com/kcand/kcand/sdk"
	"github.com/kcand/kcand/sdk/device"
	"github.com/kcand/kcand/sdk/device/cpu"
	"github.com/kcand/kcand/sdk/doorbell"
	"github.com/kcand/kcand/sdk/errdefs"
)

// errChannelDown says a doorbell channel cannot carry the call (its plugin
// process died or restarted, or the channel closed): the caller falls back
// to the RPC path, which knows how to recover.
var errChannelDown = fmt.Errorf("%w: doorbell channel down", sdk.ErrUnavailable)

// channelFactory opens doorbell channels to plugins: host shared memory for
// the doorbell and, on a GPU, a pair of interprocess events that order the
// plugin's stream against the host's.
type channelFactory struct {
	shm    *cpu.Device
	dev    device.Device
	logger hclog.Logger
	// events orders GPU work with interprocess events; without them the
	// host waits for its stream before a call and the plugin for its own
	// before answering (see ChannelOrdering).
	events bool

	mu   sync.Mutex
	open map[*remoteChannel]bool
}

func newChannelFactory(shm *cpu.Device, dev device.Device, ordering ChannelOrdering, logger hclog.Logger) *channelFactory {
	_, gpu := dev.(*cuda.Device)
	events := gpu && (ordering == OrderEvents || ordering == OrderAuto && MPSRunning())
	logger.Debug("doorbell channels", "gpu", gpu, "ordering", map[bool]string{true: "events", false: "synchronise"}[events])
	return &channelFactory{shm: shm, dev: dev, logger: logger, events: events, open: map[*remoteChannel]bool{}}
}

// ChannelOrdering says how the remote path orders a plugin's GPU work
// against the caller's stream.
type ChannelOrdering string

// The orderings. Measured on the H200 (bench/NOTES.md): with MPS, events
// give a 39 µs round trip; without MPS, making one context's stream wait on
// another's event costs more (330 µs) than each side synchronising its own
// stream, so Auto picks events only when MPS runs.
const (
	OrderAuto        ChannelOrdering = ""
	OrderEvents      ChannelOrdering = "events"
	OrderSynchronise ChannelOrdering = "synchronise"
)

// remoteChannel is one doorbell to one plugin process.
type remoteChannel struct {
	f           *channelFactory
	plugin      *Plugin
	gen         uint64
	page        device.Buffer
	client      *doorbell.Client
	ready, done *cuda.Event
	timeout     time.Duration

	mu  sync.Mutex // one call at a time: record, ring, wait form one step
	buf []byte
}

// openChannel asks e's plugin to serve a new channel.
func (f *channelFactory) openChannel(ctx context.Context, e Entry) (*remoteChannel, error) {
	page, err := f.shm.Alloc(doorbell.PageBytes)
	if err != nil {
		return nil, err
	}
	ch := &remoteChannel{f: f, plugin: e.Plugin, page: page, timeout: e.Plugin.m.opts.CallTimeout}
	fail := func(err error) (*remoteChannel, error) {
		ch.free()
		return nil, err
	}
	if ch.client, err = doorbell.NewClient(page.(device.HostMemory).Bytes()); err != nil {
		return fail(err)
	}
	handle, err := page.Handle()
	if err != nil {
		return fail(err)
	}
	req := sdk.ChannelRequest{Page: handle}
	if cd, ok := f.dev.(*cuda.Device); ok && f.events {
		var rh, dh cuda.EventHandle
		if ch.ready, rh, err = cd.NewIPCEvent(); err != nil {
			return fail(err)
		}
		if ch.done, dh, err = cd.NewIPCEvent(); err != nil {
			return fail(err)
		}
		req.ReadyEvent, req.DoneEvent, req.EventOwner = rh.Token[:], dh.Token[:], rh.Owner
	}
	if ch.gen, err = e.Plugin.openChannel(ctx, req); err != nil {
		return fail(err)
	}
	f.mu.Lock()
	f.open[ch] = true
	f.mu.Unlock()
	return ch, nil
}

// execute runs a prepared candidate (its plugin-side id) over the channel,
// after everything enqueued on stream so far: through interprocess events,
// or by waiting for stream first. It returns when the outputs are written.
func (c *remoteChannel) execute(ctx context.Context, stream device.Stream, rawID string, io map[string]device.Handle) (float64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.plugin.Generation() != c.gen {
		return 0, errChannelDown
	}
	msg, err := sdk.EncodeChannelExecute(c.buf, rawID, io)
	if err != nil {
		return 0, err
	}
	c.buf = msg
	var s *cuda.Stream
	if c.ready != nil {
		if s, err = c.cudaStream(stream); err != nil {
			return 0, err
		}
		if err := s.Record(c.ready); err != nil {
			return 0, err
		}
	} else if err := syncStream(c.f.dev, stream); err != nil {
		return 0, err
	}
	deadline := time.Now().Add(c.timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	resp, err := c.client.Call(msg, deadline, func() error {
		if c.plugin.exited() || c.plugin.Generation() != c.gen {
			return errChannelDown
		}
		return ctx.Err()
	})
	if errors.Is(err, doorbell.ErrDeadline) && ctx.Err() == nil {
		c.plugin.killGeneration(c.gen, fmt.Sprintf("execute did not answer on its channel within %s", c.timeout))
		return 0, errChannelDown
	}
	if err != nil {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		return 0, errChannelDown
	}
	us, callErr := sdk.DecodeChannelResponse(resp)
	if errors.Is(callErr, errdefs.ErrDeviceLost) {
		// As on the RPC path: the process's context is gone, stop it now.
		c.plugin.killGeneration(c.gen, "execute: its CUDA context was lost")
	}
	if s != nil && callErr == nil {
		// The plugin synchronised its stream after recording done, so the
		// event is complete: the wait orders without blocking. After a
		// failure there is no wait at all: a plugin whose kernel faulted
		// has a dead context, and an event it enqueued never completes.
		if err := s.Wait(c.done); err != nil {
			callErr = err
		}
	}
	return us, callErr
}

func (c *remoteChannel) cudaStream(stream device.Stream) (*cuda.Stream, error) {
	if stream == nil {
		return c.f.dev.(*cuda.Device).Stream(), nil
	}
	s, ok := stream.(*cuda.Stream)
	if !ok {
		return nil, errdefs.Invalid("stream", fmt.Sprintf("%T", stream), "not a CUDA stream")
	}
	return s, nil
}

// close ends the channel: the plugin's server loop stops at the flag.
func (c *remoteChannel) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.free()
	c.f.mu.Lock()
	delete(c.f.open, c)
	c.f.mu.Unlock()
}

func (c *remoteChannel) free() {
	if c.client != nil {
		c.client.Close()
		c.client = nil
	}
	if c.ready != nil {
		c.ready.Destroy()
		c.ready = nil
	}
	if c.done != nil {
		c.done.Destroy()
		c.done = nil
	}
	if c.page != nil {
		c.f.shm.Free(c.page)
		c.page = nil
	}
}

// close ends every open channel.
func (f *channelFactory) close() {
	f.mu.Lock()
	open := make([]*remoteChannel, 0, len(f.open))
	for c := range f.open {
		open = append(open, c)
	}
	f.mu.Unlock()
	for _, c := range open {
		c.close()
	}
}

// rawPreparedID strips the host's generation tag from a prepared id.
func rawPreparedID(id string) string {
	_, raw, _ := strings.Cut(id, "/")
	return raw
}
