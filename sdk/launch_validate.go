package sdk

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/kcand/kcand/cuda"
	"github.com/kcand/kcand/sdk/device"
	"github.com/kcand/kcand/sdk/errdefs"
)

// Bounds on a launch plan, beyond the device's own limits.
const (
	MaxLaunches        = 16
	MaxParams          = 64
	MaxParamBytes      = 4096 // what every CUDA driver accepts for a launch
	MaxModuleBytes     = 64 << 20
	maxFunctionNameLen = 512
)

// ErrBadLaunchPlan is the class of every launch-plan validation error.
var ErrBadLaunchPlan = errors.New("bad launch plan")

// LaunchPlanError says what is wrong with a launch plan: the field (as a
// path such as "launches[1].block") and its value.
type LaunchPlanError struct {
	Field  string
	Value  any
	Reason string
}

// Error implements error.
func (e *LaunchPlanError) Error() string {
	return fmt.Sprintf("bad launch plan: %s=%v: %s", e.Field, e.Value, e.Reason)
}

// Is makes every LaunchPlanError an ErrBadLaunchPlan.
func (e *LaunchPlanError) Is(target error) bool { return target == ErrBadLaunchPlan }

func planError(field string, value any, format string, args ...any) error {
	return &LaunchPlanError{Field: field, Value: value, Reason: fmt.Sprintf(format, args...)}
}

// ValidateLaunchPlan checks a launch plan before anything of it is loaded
// or launched: every module is named by the sha256 of its image (or is one
// the host has, per known), every launch names a module, a function, a
// grid and block within limits and shared memory within the device's
// maximum, and every parameter is either a pointer into a binding of
// bindings (name → size in bytes) at an offset inside it, a tensor map whose
// tensor lies inside one, or an immediate of 1, 2, 4 or 8 bytes. What needs
// the device (the function exists, its parameter sizes, its shared-memory
// limit) is checked when it is loaded.
func ValidateLaunchPlan(p *LaunchPlan, known func(hash string) bool, bindings map[string]int64, limits device.Limits) error {
	if p == nil || len(p.Launches) == 0 {
		return planError("launches", 0, "a launch plan needs at least one launch")
	}
	if len(p.Launches) > MaxLaunches {
		return planError("launches", len(p.Launches), "at most %d launches", MaxLaunches)
	}
	modules := map[string]bool{}
	for i, m := range p.Modules {
		if err := validateModule(fmt.Sprintf("modules[%d]", i), m, known); err != nil {
			return err
		}
		modules[m.Hash] = true
	}
	for i, l := range p.Launches {
		if err := validateLaunch(fmt.Sprintf("launches[%d]", i), l, modules, bindings, limits); err != nil {
			return err
		}
	}
	return nil
}

func validateModule(field string, m Module, known func(string) bool) error {
	switch m.Kind {
	case ModuleCubin, ModulePTX, ModuleFatbin:
	default:
		return planError(field+".kind", m.Kind, "want cubin, ptx or fatbin")
	}
	if len(m.Hash) != 64 || strings.ToLower(m.Hash) != m.Hash {
		return planError(field+".hash", m.Hash, "want a lower-case hex sha256")
	}
	if len(m.Image) == 0 {
		if known == nil || !known(m.Hash) {
			return planError(field+".image", "empty", "no image, and the host has no module %s", m.Hash[:12])
		}
		return nil
	}
	if len(m.Image) > MaxModuleBytes {
		return planError(field+".image", len(m.Image), "larger than %d bytes", MaxModuleBytes)
	}
	sum := sha256.Sum256(m.Image)
	if got := hex.EncodeToString(sum[:]); got != m.Hash {
		return planError(field+".hash", m.Hash[:12], "the image hashes to %s", got[:12])
	}
	return nil
}

func validateLaunch(field string, l Launch, modules map[string]bool, bindings map[string]int64, limits device.Limits) error {
	if !modules[l.Module] {
		return planError(field+".module", l.Module, "names no module of the plan")
	}
	if l.Function == "" || len(l.Function) > maxFunctionNameLen || strings.ContainsRune(l.Function, 0) {
		return planError(field+".function", l.Function, "want a kernel name of 1 to %d bytes", maxFunctionNameLen)
	}
	threads := 1
	for d := 0; d < 3; d++ {
		if l.Grid[d] == 0 || (limits.MaxGridDim[d] > 0 && int(l.Grid[d]) > limits.MaxGridDim[d]) {
			return planError(fmt.Sprintf("%s.grid[%d]", field, d), l.Grid[d], "must be between 1 and %d", limits.MaxGridDim[d])
		}
		if l.Block[d] == 0 || (limits.MaxBlockDim[d] > 0 && int(l.Block[d]) > limits.MaxBlockDim[d]) {
			return planError(fmt.Sprintf("%s.block[%d]", field, d), l.Block[d], "must be between 1 and %d", limits.MaxBlockDim[d])
		}
		threads *= int(l.Block[d])
	}
	if limits.MaxThreadsPerBlock > 0 && threads > limits.MaxThreadsPerBlock {
		return planError(field+".block", l.Block, "%d threads, the device allows %d", threads, limits.MaxThreadsPerBlock)
	}
	if limits.MaxSharedPerBlock > 0 && int(l.SharedBytes) > limits.MaxSharedPerBlock {
		return planError(field+".shared_bytes", l.SharedBytes, "the device allows %d", limits.MaxSharedPerBlock)
	}
	if len(l.Params) > MaxParams {
		return planError(field+".params", len(l.Params), "at most %d parameters", MaxParams)
	}
	total := 0
	for j, prm := range l.Params {
		pf := fmt.Sprintf("%s.params[%d]", field, j)
		switch {
		case prm.Buffer != "" && len(prm.Scalar) > 0:
			return planError(pf, prm.Buffer, "both a buffer and a scalar")
		case prm.TensorMap != nil:
			if err := validateTensorMap(pf, prm, bindings); err != nil {
				return err
			}
			total = alignUp(total, tensorMapAlign) + len(cuda.TensorMap{})
		case prm.Buffer != "":
			size, ok := bindings[prm.Buffer]
			if !ok {
				return planError(pf+".buffer", prm.Buffer, "no such binding (have %s)", bindingNames(bindings))
			}
			if prm.Offset < 0 || prm.Offset >= size {
				return planError(pf+".offset", prm.Offset, "outside %s of %d bytes", prm.Buffer, size)
			}
			total = alignUp(total, 8) + 8
		default:
			n := len(prm.Scalar)
			if n != 1 && n != 2 && n != 4 && n != 8 {
				return planError(pf+".scalar", n, "an immediate must be 1, 2, 4 or 8 bytes")
			}
			total = alignUp(total, n) + n
		}
	}
	if total > MaxParamBytes {
		return planError(field+".params", total, "%d bytes of parameters, at most %d", total, MaxParamBytes)
	}
	return nil
}

// tensorMapAlign is a CUtensorMap parameter's alignment.
const tensorMapAlign = 64

// validateTensorMap checks a tensor-map parameter of a plan: a buffer
// binding, then CheckTensorMap against the binding's size.
func validateTensorMap(pf string, prm Param, bindings map[string]int64) error {
	if prm.Buffer == "" {
		return planError(pf+".buffer", "", "a tensor map needs a buffer to view")
	}
	size, ok := bindings[prm.Buffer]
	if !ok {
		return planError(pf+".buffer", prm.Buffer, "no such binding (have %s)", bindingNames(bindings))
	}
	return CheckTensorMap(pf, prm, size)
}

// CheckTensorMap checks a tensor-map parameter (field names it in errors)
// against the size of the buffer it views: a description the driver takes,
// an offset on a 16-byte boundary inside the buffer, and a tensor that ends
// inside it.
func CheckTensorMap(field string, prm Param, size int64) error {
	m := *prm.TensorMap
	if err := m.Check(field + ".tensor_map"); err != nil {
		var fe *errdefs.FieldError
		if errors.As(err, &fe) {
			return planError(fe.Field, fe.Value, "%s", fe.Reason)
		}
		return err
	}
	if prm.Offset < 0 || prm.Offset%16 != 0 || prm.Offset > size {
		return planError(field+".offset", prm.Offset, "a tensor map starts on a 16-byte boundary inside %s (%d bytes)", prm.Buffer, size)
	}
	if extent := m.Extent(); extent > size-prm.Offset {
		return planError(field+".tensor_map", m.Dims, "reaches byte %d of %s, which has %d", prm.Offset+min(extent, size), prm.Buffer, size)
	}
	return nil
}

func alignUp(n, to int) int { return (n + to - 1) / to * to }

func bindingNames(bindings map[string]int64) string {
	names := make([]string, 0, len(bindings))
	for n := range bindings {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}
