package host

import (
	"fmt"

	"github.com/kcand/kcand/cuda"
	"github.com/kcand/kcand/sdk"
	"github.com/kcand/kcand/sdk/device"
	"github.com/kcand/kcand/sdk/errdefs"
)

// planBindings turns a run's buffers into the device addresses a loaded
// launch plan's kernels take. Each distinct binding name is resolved once
// per run, whatever number of launches and parameters use it; the fixed
// bindings (weights, workspace) are resolved at load, and a run looks them
// up only when its io holds more buffers than the plan's required inputs and
// outputs, that is when it may replace one (as weight rotation does). Not
// safe for concurrent use: the plan's mutex guards it.
type planBindings struct {
	names    []string         // distinct buffer names, in order of first use
	need     []int64          // bytes a buffer bound to names[i] must hold
	fixed    []bool           // names[i] has a fixed binding
	addr     []cuda.DevicePtr // fixed addresses at load; this run's after resolve
	base     []cuda.DevicePtr // the fixed addresses, to restore after a replacement
	required int              // names a run must supply
}

// newPlanBindings indexes the buffer parameters of launches (one parameter
// list per launch): slots[i][j] is the name index of launch i's parameter
// j, or -1 for a scalar. A name without a fixed buffer must be supplied by
// each run with at least ioSizes[name] bytes; one that replaces a fixed
// buffer must be as large as it.
func newPlanBindings(launches [][]sdk.Param, fixed map[string]device.Buffer, ioSizes map[string]int64) (*planBindings, [][]int, error) {
	b := &planBindings{}
	index := map[string]int{}
	slots := make([][]int, len(launches))
	for i, params := range launches {
		slots[i] = make([]int, len(params))
		for j, prm := range params {
			if prm.Buffer == "" {
				slots[i][j] = -1
				continue
			}
			k, ok := index[prm.Buffer]
			if !ok {
				k = len(b.names)
				index[prm.Buffer] = k
				if err := b.add(prm.Buffer, fixed, ioSizes); err != nil {
					return nil, nil, err
				}
			}
			slots[i][j] = k
		}
	}
	return b, slots, nil
}

func (b *planBindings) add(name string, fixed map[string]device.Buffer, ioSizes map[string]int64) error {
	var addr cuda.DevicePtr
	need, isFixed := ioSizes[name], false
	if f, ok := fixed[name]; ok {
		dm, ok := f.(device.DeviceMemory)
		if !ok {
			return errdefs.Invalid("fixed."+name, fmt.Sprintf("%T", f), "not GPU memory")
		}
		addr, need, isFixed = cuda.DevicePtr(dm.DevicePointer()), f.Size(), true
	} else {
		b.required++
	}
	b.names = append(b.names, name)
	b.need = append(b.need, need)
	b.fixed = append(b.fixed, isFixed)
	b.addr = append(b.addr, addr)
	b.base = append(b.base, addr)
	return nil
}

// resolve sets addr from io: every name the run must supply, and any fixed
// one io replaces. A binding that is missing, not GPU memory, or smaller
// than needed is an error naming it (io.NAME), and addr is then not to be
// used.
func (b *planBindings) resolve(io map[string]device.Buffer) error {
	for i, name := range b.names {
		if b.fixed[i] {
			continue
		}
		buf, ok := io[name]
		if !ok {
			return errdefs.Invalid("io."+name, "missing", "binding required")
		}
		if err := b.set(i, buf); err != nil {
			return err
		}
	}
	replaces := len(io) > b.required // io holds more than the run's required buffers
	for i, name := range b.names {
		if !b.fixed[i] {
			continue
		}
		b.addr[i] = b.base[i]
		if !replaces {
			continue
		}
		if buf, ok := io[name]; ok {
			if err := b.set(i, buf); err != nil {
				return err
			}
		}
	}
	return nil
}

func (b *planBindings) set(i int, buf device.Buffer) error {
	name := b.names[i]
	dm, ok := buf.(device.DeviceMemory)
	if !ok {
		return errdefs.Invalid("io."+name, fmt.Sprintf("%T", buf), "not GPU memory")
	}
	if n := buf.Size(); n < b.need[i] {
		return errdefs.Invalid("io."+name, n, "buffer holds %d bytes, needs %d", n, b.need[i])
	}
	b.addr[i] = cuda.DevicePtr(dm.DevicePointer())
	return nil
}

// pack appends params to args in order, buffers from addr at their offsets
// (slots as newPlanBindings returned them for this launch).
func (b *planBindings) pack(args *cuda.Args, params []sdk.Param, slots []int) {
	args.Reset()
	for j := range params {
		prm := &params[j]
		if k := slots[j]; k >= 0 {
			args.Pointer(b.addr[k] + cuda.DevicePtr(prm.Offset))
		} else {
			args.Bytes(prm.Scalar, len(prm.Scalar))
		}
	}
}
