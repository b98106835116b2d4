package sdk

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/kcand/kcand/cuda"
)

// ModuleKind is the format of a module image.
type ModuleKind string

// The module kinds the host loads.
const (
	ModuleCubin  ModuleKind = "cubin"
	ModulePTX    ModuleKind = "ptx"
	ModuleFatbin ModuleKind = "fatbin"
)

// Module is a GPU code image. Hash (the hex sha256 of Image) names it; the
// host loads each hash once per context and tells plugins which it has, so
// an image crosses the wire once.
type Module struct {
	Hash  string
	Kind  ModuleKind
	Image []byte
}

// NewModule names an image by its hash.
func NewModule(kind ModuleKind, image []byte) Module {
	sum := sha256.Sum256(image)
	return Module{Hash: hex.EncodeToString(sum[:]), Kind: kind, Image: image}
}

// Param is one kernel parameter: a device pointer to Offset bytes into the
// buffer bound as Buffer, or, when Buffer is empty, the immediate bytes of
// Scalar (little-endian, 1, 2, 4 or 8 bytes).
type Param struct {
	Buffer string
	Offset int64
	Scalar []byte
	// TensorMap, with Buffer, makes the parameter a tensor map (a const
	// __grid_constant__ CUtensorMap, for Hopper's tensor copies) over the
	// buffer at Offset instead of a pointer. The host encodes it when it
	// binds the buffer, so the map always holds the address of the buffer
	// the run uses; the tensor must lie inside the binding.
	TensorMap *cuda.TensorMapDesc
}

// Launch is one kernel launch.
type Launch struct {
	// Module is the hash of the module holding Function.
	Module      string
	Function    string
	Grid        [3]uint32
	Block       [3]uint32
	SharedBytes uint32
	Params      []Param
	// Programmatic lets the launch start before earlier work in the stream
	// has finished (programmatic dependent launch on compute capability
	// 9.0+; an ordinary launch elsewhere). Its kernel must execute
	// griddepcontrol.wait before it reads or writes anything that earlier
	// work reads or writes: the launch ahead may itself have started early
	// and not have waited yet. Work before the wait (setting up, loading
	// weights nothing earlier writes) overlaps the earlier work. The
	// host's correctness checks run each launch after the work ahead has
	// finished, so they cannot catch a missing wait: it is the kernel
	// author's to get right. Fixed bindings (weights) count as written by
	// nothing ahead: the host fills them before any run and never from a
	// kernel, so a kernel may read them before its wait. Read what earlier
	// work writes with coherent loads, not ld.global.nc: ptxas may move a
	// non-coherent load, whose data it may assume constant for the
	// kernel's life, above the wait.
	Programmatic bool
}

// LaunchPlan is what an exported candidate gives the host: modules and the
// launches that execute it, run in order on the host's stream.
type LaunchPlan struct {
	Modules  []Module
	Launches []Launch
}

// Exporter is implemented by a Prepared whose kernels the host may launch
// itself: no RPC per call, and the engine can capture them in a CUDA graph.
// Execute must still work (the remote path and the conformance suite use it).
type Exporter interface {
	Export() (LaunchPlan, error)
}

// BufferParam binds a kernel pointer parameter to a buffer.
func BufferParam(name string) Param { return Param{Buffer: name} }

// TensorMapParam binds a kernel's CUtensorMap parameter to a view of a
// buffer (see Param.TensorMap).
func TensorMapParam(name string, m cuda.TensorMapDesc) Param {
	return Param{Buffer: name, TensorMap: &m}
}

// Int32Param is an immediate int32 parameter.
func Int32Param(v int32) Param {
	u := uint32(v)
	return Param{Scalar: []byte{byte(u), byte(u >> 8), byte(u >> 16), byte(u >> 24)}}
}
