package host

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kcand/kcand/sdk"
	"github.com/kcand/kcand/sdk/device"
)

// A plugin keeps what it opened mapped (sdk's deviceSet) until told to
// forget it, and a CUDA mapping outlives the owner's free: the memory stays
// in use until the plugin unmaps it (driver 580 on the H200: a freed 1 GiB
// stayed in use), and on an earlier driver (bench/NOTES.md, twenty-third
// session) the owner's next allocation at the same memory failed to open in
// that plugin (cuIpcOpenMemHandle: CUDA_ERROR_ALREADY_MAPPED). So the host
// has the plugins forget what it handed them before it frees it.

// forgetTimeout bounds one plugin's answer to a forget (a variable for
// tests).
var forgetTimeout = 5 * time.Second

// forget tells the plugin's live process to drop its mappings of handles,
// once and within forgetTimeout, whatever ctx's deadline. A process that
// is not running (exited, restarting, stopped) took its mappings with it,
// and one started since never had them: nothing waits for a restart. A
// process that does not answer in time is killed, so that no mapping
// outlives the free that follows.
func (p *Plugin) forget(ctx context.Context, handles []device.Handle) error {
	if len(handles) == 0 {
		return nil
	}
	p.mu.Lock()
	state, rpc, gen, client := p.state, p.rpc, p.generation, p.client
	p.mu.Unlock()
	if state != stateRunning || client == nil || client.Exited() {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), forgetTimeout)
	defer cancel()
	deadline, _ := ctx.Deadline()
	err := rpc.Release(ctx, "", handles)
	switch {
	case err == nil:
		return nil
	case !time.Now().Before(deadline):
		// No answer in time. Read from the clock, not ctx.Err(): the call's
		// own deadline may end it a moment before ctx reports it (seen as
		// "unavailable: context deadline exceeded" with ctx.Err() still nil),
		// and ctx has no other way to end (WithoutCancel).
		p.killGeneration(gen, fmt.Sprintf("forget did not answer within %s", forgetTimeout))
		return nil
	case errors.Is(err, sdk.ErrUnavailable):
		return nil // the process died under the call
	}
	return fmt.Errorf("plugin %s: forget: %w", p.bin.name, err)
}

// forgetThenFree has each plugin forget the sets' buffers, then frees them.
func forgetThenFree(ctx context.Context, plugins []*Plugin, sets ...*bufferSet) error {
	forget, err := handleList(sets...)
	errs := []error{err, forgetIn(ctx, plugins, forget)}
	for _, s := range sets {
		if s != nil {
			errs = append(errs, s.free())
		}
	}
	return errors.Join(errs...)
}

// handleList lists the handles of the sets' buffers. A buffer without one
// could not have been handed out either; it is reported, and the rest are
// listed.
func handleList(sets ...*bufferSet) ([]device.Handle, error) {
	var out []device.Handle
	var errs []error
	for _, s := range sets {
		if s == nil {
			continue
		}
		for name, b := range s.bufs {
			h, err := b.Handle()
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
				continue
			}
			out = append(out, h)
		}
	}
	return out, errors.Join(errs...)
}

// forgetIn has each of plugins forget handles.
func forgetIn(ctx context.Context, plugins []*Plugin, handles []device.Handle) error {
	var errs []error
	for _, p := range plugins {
		errs = append(errs, p.forget(ctx, handles))
	}
	return errors.Join(errs...)
}

// pluginsOf lists the distinct plugins of runs.
func pluginsOf(runs []*run) []*Plugin {
	seen := map[*Plugin]bool{}
	var out []*Plugin
	for _, r := range runs {
		if !seen[r.entry.Plugin] {
			seen[r.entry.Plugin] = true
			out = append(out, r.entry.Plugin)
		}
	}
	return out
}

// Forget tells every plugin to drop its mappings of buffers. A buffer
// allocated by Host.Device and freed there needs no call: the device tells
// the host of the free, and the host has the plugins forget the buffer first
// if a remote run ever handed it to them. Call Forget for other memory
// passed to Executable.Run (another device's buffers, or buffers opened from
// another process), before freeing or closing it and once no run uses it any
// more: a run on the remote path (which a re-plan can switch to) has the
// plugin map its buffers and keep them mapped, which holds the memory after
// the free (and on some drivers makes a later buffer at the same memory fail
// to open there). Buffers the host allocated itself (Weights, workspaces,
// measurement samples) it forgets itself. Forget ignores ctx's cancellation:
// each plugin gets one call of at most 5 s, and one that does not answer is
// killed (and restarted), so that no mapping outlives the free. A buffer
// without a handle is reported; the others are still forgotten.
func (h *Host) Forget(ctx context.Context, buffers ...device.Buffer) error {
	var forget []device.Handle
	var errs []error
	for i, b := range buffers {
		hd, err := b.Handle()
		if err != nil {
			errs = append(errs, fmt.Errorf("buffers[%d]: %w", i, err))
			continue
		}
		forget = append(forget, hd)
	}
	h.env.lent.drop(forget)
	return errors.Join(append(errs, forgetIn(ctx, h.manager.Plugins(), forget))...)
}
