package host

import (
	"errors"
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
// outputs, that is when it may replace one (as weight rotation does). A
// tensor-map parameter is encoded over each address its buffer takes and
// the encodings are kept, so a plan that keeps its buffers, or cycles
// through a few (rotation, double buffering), encodes each map once per
// address. Not safe for concurrent use: the plan's mutex guards it.
type planBindings struct {
	names    []string         // distinct buffer names, in order of first use
	need     []int64          // bytes a buffer bound to names[i] must hold
	fixed    []bool           // names[i] has a fixed binding
	addr     []cuda.DevicePtr // fixed addresses at load; this run's after resolve
	base     []cuda.DevicePtr // the fixed addresses, to restore after a replacement
	required int              // names a run must supply
	maps     []*boundTensorMap
	// encode encodes a tensor map over an address (the device context's
	// EncodeTensorMap); needed only when maps is not empty.
	encode func(cuda.TensorMapDesc, cuda.DevicePtr) (cuda.TensorMap, error)
}

// boundTensorMap is one tensor-map parameter, its encoding for this run's
// address, and the encodings for the addresses it had before.
type boundTensorMap struct {
	binding int // index into names
	offset  int64
	desc    cuda.TensorMapDesc
	addr    cuda.DevicePtr // 0 until the first run
	encoded cuda.TensorMap
	earlier map[cuda.DevicePtr]*cuda.TensorMap
}

// maxEncodedAddresses bounds the encodings a tensor map keeps: more than a
// weight rotation's copies (maxRotation).
const maxEncodedAddresses = 32

// The slot of a parameter (see newPlanBindings): a binding index (>= 0),
// scalarSlot, or mapSlot(i) for the tensor map maps[i].
const scalarSlot = -1

func mapSlot(i int) int       { return -2 - i }
func mapOfSlot(slot int) int  { return -2 - slot }
func isMapSlot(slot int) bool { return slot <= -2 }

// newPlanBindings indexes the buffer parameters of launches (one parameter
// list per launch): slots[i][j] is the name index of launch i's parameter
// j, scalarSlot for a scalar, or mapSlot(m) for a tensor map over a buffer
// (maps[m]). A name without a fixed buffer must be supplied by each run
// with at least ioSizes[name] bytes; one that replaces a fixed buffer must
// be as large as it.
func newPlanBindings(launches [][]sdk.Param, fixed map[string]device.Buffer, ioSizes map[string]int64) (*planBindings, [][]int, error) {
	b := &planBindings{}
	index := map[string]int{}
	slots := make([][]int, len(launches))
	for i, params := range launches {
		slots[i] = make([]int, len(params))
		for j, prm := range params {
			if prm.Buffer == "" {
				slots[i][j] = scalarSlot
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
			if prm.TensorMap != nil {
				slots[i][j] = mapSlot(len(b.maps))
				b.maps = append(b.maps, &boundTensorMap{binding: k, offset: prm.Offset, desc: *prm.TensorMap})
			}
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
	return b.encodeMaps()
}

// encodeMaps gives each tensor map its encoding for this run's address:
// kept from an earlier run at that address, or encoded now.
func (b *planBindings) encodeMaps() error {
	for _, m := range b.maps {
		if err := b.encodeMap(m, b.addr[m.binding]); err != nil {
			return err
		}
	}
	return nil
}

// encodeFixed encodes the tensor maps over fixed bindings at load, so that
// a driver that cannot encode them (before CUDA 12.0) or a refused
// description fails the load, not the first run.
func (b *planBindings) encodeFixed() error {
	for _, m := range b.maps {
		if b.fixed[m.binding] {
			if err := b.encodeMap(m, b.base[m.binding]); err != nil {
				return err
			}
		}
	}
	return nil
}

// encodeMap makes m's encoding the one over the buffer at base.
func (b *planBindings) encodeMap(m *boundTensorMap, base cuda.DevicePtr) error {
	addr := base + cuda.DevicePtr(m.offset)
	if addr == m.addr {
		return nil
	}
	if kept, ok := m.earlier[addr]; ok {
		m.encoded, m.addr = *kept, addr
		return nil
	}
	field := "io." + b.names[m.binding]
	if b.fixed[m.binding] && base == b.base[m.binding] {
		field = "fixed." + b.names[m.binding]
	}
	if b.encode == nil {
		return errdefs.Internal("%s: a tensor map and no encoder", field)
	}
	encoded, err := b.encode(m.desc, addr)
	if err != nil {
		var fe *errdefs.FieldError
		if errors.As(err, &fe) {
			return errdefs.Invalid(field, fe.Value, "tensor map: %s: %s", fe.Field, fe.Reason)
		}
		return fmt.Errorf("%s: tensor map: %w", field, err)
	}
	if m.earlier == nil || len(m.earlier) >= maxEncodedAddresses {
		m.earlier = map[cuda.DevicePtr]*cuda.TensorMap{}
	}
	m.earlier[addr] = &encoded
	m.encoded, m.addr = encoded, addr
	return nil
}

// fixedSlot is the index of the fixed binding name, or -1 when the plan
// has none of that name.
func (b *planBindings) fixedSlot(name string) int {
	for i, n := range b.names {
		if n == name && b.fixed[i] {
			return i
		}
	}
	return -1
}

// replace binds buf, which the host allocated (field names it in errors),
// in place of the fixed binding i for this run, after resolve, and encodes
// the tensor maps over it.
func (b *planBindings) replace(i int, buf device.Buffer, field string) error {
	if err := b.setAs(field, "", i, buf); err != nil {
		return err
	}
	return b.encodeMaps()
}

func (b *planBindings) set(i int, buf device.Buffer) error { return b.setAs("io.", b.names[i], i, buf) }

// setAs binds buf to binding i, naming it prefix+name in errors (joined
// only then: a run that binds its buffers allocates nothing).
func (b *planBindings) setAs(prefix, name string, i int, buf device.Buffer) error {
	dm, ok := buf.(device.DeviceMemory)
	if !ok {
		return errdefs.Invalid(prefix+name, fmt.Sprintf("%T", buf), "not GPU memory")
	}
	if n := buf.Size(); n < b.need[i] {
		return errdefs.Invalid(prefix+name, n, "buffer holds %d bytes, needs %d", n, b.need[i])
	}
	b.addr[i] = cuda.DevicePtr(dm.DevicePointer())
	return nil
}

// pack appends params to args in order, buffers from addr at their offsets
// and tensor maps as resolve encoded them (slots as newPlanBindings
// returned them for this launch).
func (b *planBindings) pack(args *cuda.Args, params []sdk.Param, slots []int) {
	args.Reset()
	for j := range params {
		prm := &params[j]
		switch k := slots[j]; {
		case k >= 0:
			args.Pointer(b.addr[k] + cuda.DevicePtr(prm.Offset))
		case isMapSlot(k):
			args.TensorMap(&b.maps[mapOfSlot(k)].encoded)
		default:
			args.Bytes(prm.Scalar, len(prm.Scalar))
		}
	}
}
