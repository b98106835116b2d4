package host

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/kcand/kcand/sdk"
	"github.com/kcand/kcand/sdk/device"
	"github.com/kcand/kcand/sdk/errdefs"
)

// ErrStale says a prepared id belongs to an earlier run of its plugin (it
// restarted since), so the candidate must be prepared again.
var ErrStale = errors.New("prepared state lost in a plugin restart")

// Client returns the plugin as an sdk.Plugin that outlives restarts: each
// call goes to the live process under the manager's call deadline, a call
// that outlasts it kills the (hung) process, and prepared ids carry the
// generation they belong to so a stale one fails fast with ErrStale.
func (p *Plugin) Client() sdk.Plugin { return &pluginClient{p: p} }

type pluginClient struct{ p *Plugin }

var _ sdk.Plugin = (*pluginClient)(nil)

// anyGeneration lets a call go to whichever process is live.
const anyGeneration = 0

// call runs fn; calls not tied to a generation (describe, admit, prepare,
// forgetting mappings) are safe to repeat, so when the plugin dies under
// one it is retried in the restarted process.
func (c *pluginClient) call(ctx context.Context, op string, want uint64, fn func(context.Context, sdk.Plugin) error) (uint64, error) {
	for attempt := 0; ; attempt++ {
		gen, err := c.callOnce(ctx, op, want, fn)
		if err == nil || want != anyGeneration || attempt >= retriesAfterRestart || !errors.Is(err, sdk.ErrUnavailable) || ctx.Err() != nil {
			return gen, err
		}
		select {
		case <-time.After(time.Duration(attempt+1) * 20 * time.Millisecond):
		case <-ctx.Done():
			return gen, err
		}
	}
}

// callOnce runs fn against the live process with the call deadline. When want
// is not anyGeneration the call is refused with ErrStale unless the live
// process is of that generation: the check and the choice of connection are
// one step, so state prepared in one process never reaches another.
func (c *pluginClient) callOnce(ctx context.Context, op string, want uint64, fn func(context.Context, sdk.Plugin) error) (uint64, error) {
	callCtx, cancel := context.WithTimeout(ctx, c.p.m.opts.CallTimeout)
	defer cancel()
	rpc, gen, err := c.p.current(callCtx)
	if err != nil {
		return 0, err
	}
	if want != anyGeneration && gen != want {
		return gen, fmt.Errorf("plugin %s: %s: prepared in run %d, now run %d: %w", c.p.bin.name, op, want, gen, ErrStale)
	}
	err = fn(callCtx, rpc)
	if err == nil {
		return gen, nil
	}
	if errors.Is(err, errdefs.ErrDeviceLost) {
		// The process's CUDA context is gone and it is exiting: stop it now
		// so that the next call meets a fresh process. The call itself
		// failed (it is not retried: what it ran may be what broke the
		// context).
		c.p.killGeneration(gen, op+": its CUDA context was lost")
		return gen, fmt.Errorf("plugin %s: %s: %w", c.p.bin.name, op, err)
	}
	if errors.Is(err, sdk.ErrUnavailable) || errors.Is(callCtx.Err(), context.DeadlineExceeded) {
		if ctx.Err() == nil && errors.Is(callCtx.Err(), context.DeadlineExceeded) {
			c.p.killGeneration(gen, fmt.Sprintf("%s did not answer within %s", op, c.p.m.opts.CallTimeout))
		} else {
			c.p.nudge()
		}
		if !errors.Is(err, sdk.ErrUnavailable) {
			err = fmt.Errorf("%w: %w", sdk.ErrUnavailable, err)
		}
	}
	return gen, fmt.Errorf("plugin %s: %s: %w", c.p.bin.name, op, err)
}

func (c *pluginClient) Describe(ctx context.Context) (d sdk.Description, err error) {
	_, err = c.call(ctx, "describe", anyGeneration, func(ctx context.Context, rpc sdk.Plugin) (err error) {
		d, err = rpc.Describe(ctx)
		return err
	})
	return d, err
}

func (c *pluginClient) Admit(ctx context.Context, req sdk.Request, hw device.Profile) (out []sdk.Admission, err error) {
	_, err = c.call(ctx, "admit", anyGeneration, func(ctx context.Context, rpc sdk.Plugin) (err error) {
		out, err = rpc.Admit(ctx, req, hw)
		return err
	})
	return out, err
}

func (c *pluginClient) Prepare(ctx context.Context, req sdk.PrepareRequest) (info sdk.PreparedInfo, err error) {
	gen, err := c.call(ctx, "prepare", anyGeneration, func(ctx context.Context, rpc sdk.Plugin) (err error) {
		info, err = rpc.Prepare(ctx, req)
		return err
	})
	if err == nil {
		info.ID = strconv.FormatUint(gen, 10) + "/" + info.ID
	}
	return info, err
}

// unwrapID splits a generation-tagged id into the generation it belongs
// to and the plugin's own id.
func (c *pluginClient) unwrapID(id string) (uint64, string, error) {
	genText, raw, ok := strings.Cut(id, "/")
	gen, err := strconv.ParseUint(genText, 10, 64)
	if !ok || err != nil || gen == anyGeneration {
		return 0, "", errdefs.Invalid("prepared_id", id, "not issued by this host")
	}
	return gen, raw, nil
}

func (c *pluginClient) Execute(ctx context.Context, req sdk.ExecuteRequest) (us float64, err error) {
	gen, raw, err := c.unwrapID(req.PreparedID)
	if err != nil {
		return 0, err
	}
	req.PreparedID = raw
	_, err = c.call(ctx, "execute", gen, func(ctx context.Context, rpc sdk.Plugin) (err error) {
		us, err = rpc.Execute(ctx, req)
		return err
	})
	return us, err
}

func (c *pluginClient) Benchmark(ctx context.Context, req sdk.BenchmarkRequest) (res sdk.BenchmarkResult, err error) {
	gen, raw, err := c.unwrapID(req.PreparedID)
	if err != nil {
		return res, err
	}
	req.PreparedID = raw
	_, err = c.call(ctx, "benchmark", gen, func(ctx context.Context, rpc sdk.Plugin) (err error) {
		res, err = rpc.Benchmark(ctx, req)
		return err
	})
	return res, err
}

func (c *pluginClient) Release(ctx context.Context, id string, forget []device.Handle) (err error) {
	want := uint64(anyGeneration)
	if id != "" {
		if want, id, err = c.unwrapID(id); err != nil {
			return err
		}
	}
	_, err = c.call(ctx, "release", want, func(ctx context.Context, rpc sdk.Plugin) error {
		return rpc.Release(ctx, id, forget)
	})
	if errors.Is(err, ErrStale) {
		return nil // the process that held it is gone, and with it the state and its mappings
	}
	return err
}

func (c *pluginClient) OpenChannel(ctx context.Context, req sdk.ChannelRequest) error {
	_, err := c.p.openChannel(ctx, req)
	return err
}

// openChannel asks the plugin to serve a doorbell channel and returns the
// generation of the process that serves it.
func (p *Plugin) openChannel(ctx context.Context, req sdk.ChannelRequest) (uint64, error) {
	c := &pluginClient{p: p}
	return c.callOnce(ctx, "open channel", anyGeneration, func(ctx context.Context, rpc sdk.Plugin) error {
		return rpc.OpenChannel(ctx, req)
	})
}
