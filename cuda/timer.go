package cuda

import (
	"errors"

	"github.com/kcand/kcand/sdk/device"
)

// eventTimer times work with CUDA events recorded on the device's stream
// before and after it: GPU time, free of host-side jitter.
type eventTimer struct {
	d *Device
}

// NewTimer implements device.TimerSource.
func (d *Device) NewTimer() device.Timer { return eventTimer{d: d} }

// Time implements device.Timer. work must put its GPU work on the device's
// stream (Device.Stream), or order it before the end event.
func (t eventTimer) Time(work func() error) (float64, error) {
	if err := t.d.usable(); err != nil {
		return 0, err
	}
	ctx, stream := t.d.ctx, t.d.stream
	start, err := ctx.NewEvent(EventDefault)
	if err != nil {
		return 0, err
	}
	end, err := ctx.NewEvent(EventDefault)
	if err != nil {
		start.Destroy()
		return 0, err
	}
	us, err := timeBetween(stream, start, end, work)
	return us, errors.Join(err, start.Destroy(), end.Destroy())
}

func timeBetween(stream *Stream, start, end *Event, work func() error) (float64, error) {
	if err := stream.Record(start); err != nil {
		return 0, err
	}
	if err := work(); err != nil {
		return 0, err
	}
	if err := stream.Record(end); err != nil {
		return 0, err
	}
	if err := end.Synchronize(); err != nil {
		return 0, err
	}
	ms, err := end.ElapsedSince(start)
	return float64(ms) * 1e3, err
}
