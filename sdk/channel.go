package sdk

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/kcand/kcand/cuda"
	"github.com/kcand/kcand/sdk/device"
	"github.com/kcand/kcand/sdk/doorbell"
	"github.com/kcand/kcand/sdk/errdefs"
	pb "github.com/kcand/kcand/sdk/proto"
)

// EncodeChannelExecute is what the host writes into a doorbell channel to
// execute a prepared candidate (the plugin's own id) on bound buffers.
func EncodeChannelExecute(buf []byte, preparedID string, buffers map[string]device.Handle) ([]byte, error) {
	return proto.MarshalOptions{}.MarshalAppend(buf[:0], &pb.ExecuteRequest{PreparedId: preparedID, Buffers: handlesToProto(buffers)})
}

// DecodeChannelResponse reads a plugin's answer on a doorbell channel: the
// device time, or the error with its class restored.
func DecodeChannelResponse(b []byte) (float64, error) {
	var resp pb.ChannelResponse
	if err := proto.Unmarshal(b, &resp); err != nil {
		return 0, errdefs.Internal("undecodable doorbell answer: %v", err)
	}
	if resp.Error != nil {
		return 0, errorFromDetail(resp.Error, resp.Message)
	}
	return resp.DeviceUs, nil
}

// channelOrdering holds the interprocess events of a GPU channel.
type channelOrdering struct {
	dev         *cuda.Device
	ready, done *cuda.Event
}

// OpenChannel implements Plugin: it maps the host's doorbell page and
// serves executes on it from a goroutine of its own until the host closes
// the channel or the runtime closes.
func (r *Runtime) OpenChannel(_ context.Context, req ChannelRequest) (err error) {
	defer r.recoverInto("open channel", &err)
	if req.Page.Kind != device.CPU {
		return errdefs.Invalid("page.kind", req.Page.Kind, "a doorbell page is host shared memory")
	}
	if req.Page.Size < doorbell.PageBytes {
		return errdefs.Invalid("page.size", req.Page.Size, "a doorbell page holds %d bytes", doorbell.PageBytes)
	}
	shm, err := r.devices.get(device.CPU)
	if err != nil {
		return err
	}
	page, err := shm.Open(req.Page)
	if err != nil {
		return err
	}
	mem := page.(device.HostMemory).Bytes()
	forgetPage := func() error { return shm.Forget(req.Page.Owner, req.Page.Allocation) }
	var ord *channelOrdering
	if len(req.ReadyEvent) > 0 || len(req.DoneEvent) > 0 {
		if ord, err = r.openOrdering(req); err != nil {
			return errors.Join(err, forgetPage())
		}
	}
	r.mu.Lock() // Close sets closing under mu: no channel starts after it began to wait for them
	if r.closing.Load() {
		r.mu.Unlock()
		if ord != nil {
			ord.ready.Destroy()
			ord.done.Destroy()
		}
		return errors.Join(fmt.Errorf("%w: the plugin is closing", ErrUnavailable), forgetPage())
	}
	r.channels.Add(1)
	r.mu.Unlock()
	go func() {
		defer r.channels.Done()
		err := doorbell.Serve(mem, func(b []byte) []byte { return r.serveChannel(b, ord) }, r.stopped)
		r.logger.Debug("doorbell channel ended", "reason", err)
		// The host frees the page once the channel is closed: unmap it
		// here too, or every channel's page stays mapped for the
		// plugin's life.
		released := forgetPage()
		if ord != nil {
			released = errors.Join(released, ord.ready.Destroy(), ord.done.Destroy())
		}
		if released != nil {
			r.logger.Debug("doorbell channel's page or events not released", "error", released)
		}
	}()
	return nil
}

func (r *Runtime) openOrdering(req ChannelRequest) (*channelOrdering, error) {
	d, err := r.devices.get(device.CUDA)
	if err != nil {
		return nil, err
	}
	cd, ok := d.(*cuda.Device)
	if !ok {
		return nil, errdefs.Unsupported("events need the CUDA device")
	}
	var readyTok, doneTok cuda.IPCHandle
	if len(req.ReadyEvent) != len(readyTok) || len(req.DoneEvent) != len(doneTok) {
		return nil, errdefs.Invalid("ready_event", len(req.ReadyEvent), "want %d-byte interprocess event handles", len(readyTok))
	}
	copy(readyTok[:], req.ReadyEvent)
	copy(doneTok[:], req.DoneEvent)
	ready, err := cd.OpenIPCEvent(cuda.EventHandle{Owner: req.EventOwner, Token: readyTok})
	if err != nil {
		return nil, err
	}
	done, err := cd.OpenIPCEvent(cuda.EventHandle{Owner: req.EventOwner, Token: doneTok})
	if err != nil {
		ready.Destroy()
		return nil, err
	}
	return &channelOrdering{dev: cd, ready: ready, done: done}, nil
}

// serveChannel runs one execute from the doorbell. On a GPU channel the
// work is ordered after the host's ready event, so the host need not
// synchronise its stream before the call.
func (r *Runtime) serveChannel(b []byte, ord *channelOrdering) (answer []byte) {
	var resp pb.ChannelResponse
	us, err := r.channelExecute(b, ord)
	if err != nil {
		resp.Error, _ = errorDetail(err)
		resp.Message = err.Error()
	}
	resp.DeviceUs = us
	out, merr := proto.Marshal(&resp)
	if merr != nil {
		return nil
	}
	return out
}

func (r *Runtime) channelExecute(b []byte, ord *channelOrdering) (us float64, err error) {
	defer r.recoverInto("channel execute", &err)
	var req pb.ExecuteRequest
	if err := proto.Unmarshal(b, &req); err != nil {
		return 0, errdefs.Invalid("request", len(b), "undecodable: %v", err)
	}
	buffers, err := handlesFromProto("buffers", req.Buffers)
	if err != nil {
		return 0, err
	}
	if ord == nil {
		return r.Execute(context.Background(), ExecuteRequest{PreparedID: req.PreparedId, Buffers: buffers})
	}
	if err := r.deviceLost(); err != nil {
		return 0, err
	}
	e, err := r.lookup(req.PreparedId)
	if err != nil {
		return 0, err
	}
	if e.dev != device.Device(ord.dev) {
		return 0, errdefs.Invalid("prepared_id", req.PreparedId, "prepared on a %s device, the channel orders CUDA work", e.dev.Kind())
	}
	io, err := r.devices.open(e.dev, buffers)
	if err != nil {
		return 0, r.checkContext(err)
	}
	stream := ord.dev.Stream()
	if err := stream.Wait(ord.ready); err != nil {
		return 0, r.checkContext(err)
	}
	start := time.Now()
	execErr := e.prepared.Execute(context.Background(), io)
	// Record done and wait for it before answering: a kernel fault comes
	// back with this call, and the host (which waits on done only after a
	// success) never waits on an event a dying context will not complete.
	if err := stream.Record(ord.done); err != nil && execErr == nil {
		execErr = err
	}
	if err := stream.Synchronize(); err != nil && execErr == nil {
		execErr = err
	}
	return micros(time.Since(start)), r.checkContext(execErr)
}

// stopped says the runtime is closing, ending its channels.
func (r *Runtime) stopped() error {
	if r.closing.Load() {
		return fmt.Errorf("plugin runtime closed")
	}
	return nil
}
