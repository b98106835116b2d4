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
// forget it, and a CUDA mapping outlives the owner's free: the owner's next
// allocation at the same memory then fails to open in that plugin
// (cuIpcOpenMemHandle: CUDA_ERROR_ALREADY_MAPPED). So the host has the
// plugins forget what it handed them before it frees it.

// forgetTimeout bounds one plugin's answer to a forget.
const forgetTimeout = 5 * time.Second

// forget tells the plugin's live process to drop its mappings of handles,
// once and within forgetTimeout, whatever ctx's deadline: a process that
// has exited took its mappings with it and one started since never had
// them, so nothing waits for a restart or retries.
func (p *Plugin) forget(ctx context.Context, handles []device.Handle) error {
	if len(handles) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), forgetTimeout)
	defer cancel()
	c := &pluginClient{p: p}
	_, err := c.callOnce(ctx, "forget", anyGeneration, func(ctx context.Context, rpc sdk.Plugin) error {
		return rpc.Release(ctx, "", handles)
	})
	if errors.Is(err, sdk.ErrUnavailable) {
		return nil
	}
	return err
}

// forgetThenFree has each plugin forget the sets' buffers, then frees them.
func forgetThenFree(ctx context.Context, plugins []*Plugin, sets ...*bufferSet) error {
	var forget []device.Handle
	var errs []error
	for _, s := range sets {
		if s == nil {
			continue
		}
		for name, b := range s.bufs {
			h, err := b.Handle()
			if err != nil { // not exported, so never handed out
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
				continue
			}
			forget = append(forget, h)
		}
	}
	for _, p := range plugins {
		errs = append(errs, p.forget(ctx, forget))
	}
	for _, s := range sets {
		if s != nil {
			errs = append(errs, s.free())
		}
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

// Forget tells every plugin to drop its mappings of buffers. Call it
// before freeing a buffer that was passed to Executable.Run on the remote
// path (Executable.Remote), once no run uses it any more: the plugin keeps
// what it was handed mapped for its life, and a later buffer at the same
// memory would fail to open there. Buffers the host allocated itself
// (Weights, workspaces, measurement samples) are forgotten by the host.
func (h *Host) Forget(ctx context.Context, buffers ...device.Buffer) error {
	var forget []device.Handle
	for i, b := range buffers {
		hd, err := b.Handle()
		if err != nil {
			return fmt.Errorf("buffers[%d]: %w", i, err)
		}
		forget = append(forget, hd)
	}
	var errs []error
	for _, p := range h.manager.Plugins() {
		errs = append(errs, p.forget(ctx, forget))
	}
	return errors.Join(errs...)
}
