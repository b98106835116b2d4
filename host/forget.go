package host

import (
	"context"
	"errors"

	"github.com/kcand/kcand/sdk"
	"github.com/kcand/kcand/sdk/device"
)

// forgetThenFree tells each plugin in clients to drop its mappings of the
// sets' buffers, then frees them. A plugin keeps what it opened mapped
// (sdk's deviceSet) until told otherwise, and a CUDA mapping outlives the
// owner's free: the owner's next allocation at the same memory then fails
// to open in that plugin (cuIpcOpenMemHandle: CUDA_ERROR_ALREADY_MAPPED).
// A dead plugin has nothing mapped.
func forgetThenFree(ctx context.Context, clients []sdk.Plugin, sets ...*bufferSet) error {
	var forget []device.Handle
	for _, s := range sets {
		if s == nil {
			continue
		}
		hs, err := s.handles()
		if err != nil {
			return errors.Join(err, freeSets(sets))
		}
		for _, h := range hs {
			forget = append(forget, h)
		}
	}
	var errs []error
	if len(forget) > 0 {
		ctx = context.WithoutCancel(ctx) // a measurement's spent budget must not leave mappings behind
		for _, c := range clients {
			if err := c.Release(ctx, "", forget); err != nil && !errors.Is(err, sdk.ErrUnavailable) && !errors.Is(err, ErrStale) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(append(errs, freeSets(sets))...)
}

func freeSets(sets []*bufferSet) error {
	var errs []error
	for _, s := range sets {
		if s != nil {
			errs = append(errs, s.free())
		}
	}
	return errors.Join(errs...)
}

// clientsOf lists the distinct plugin clients of runs.
func clientsOf(runs []*run) []sdk.Plugin {
	seen := map[*Plugin]bool{}
	var out []sdk.Plugin
	for _, r := range runs {
		if !seen[r.entry.Plugin] {
			seen[r.entry.Plugin] = true
			out = append(out, r.entry.Client)
		}
	}
	return out
}
