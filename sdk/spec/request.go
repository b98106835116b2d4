// Package spec holds the request vocabulary shared by the SDK and the
// family contracts: families, phases, roles, formats, requests and samples.
// Package sdk re-exports every name, so plugin authors import only sdk.
package spec

import (
	"fmt"
	"strings"

	"github.com/kcand/kcand/sdk/errdefs"
)

// Family names one kind of operation with one contract.
type Family string

// The families.
const (
	FamilyAffine   Family = "affine"
	FamilyMXFP4MoE Family = "mxfp4-moe"
	FamilyFP8      Family = "fp8"
	FamilyDense    Family = "dense"
)

// Families lists every family the SDK knows.
var Families = []Family{FamilyAffine, FamilyMXFP4MoE, FamilyFP8, FamilyDense}

// Phase is the inference phase a request belongs to.
type Phase string

// The phases.
const (
	PhaseDecode  Phase = "decode"
	PhasePrefill Phase = "prefill"
)

// Role is the place of a projection in the model.
type Role string

// The roles.
const (
	RoleAny             Role = ""
	RoleAttentionQKV    Role = "attention-qkv"
	RoleAttentionOutput Role = "attention-output"
	RoleGateUp          Role = "gate-up"
	RoleDown            Role = "down"
	RoleRouter          Role = "router"
	RoleOutputHead      Role = "output-head"
)

// Roles lists every role.
var Roles = []Role{RoleAny, RoleAttentionQKV, RoleAttentionOutput, RoleGateUp, RoleDown, RoleRouter, RoleOutputHead}

// DType is an element type of activations or weights.
type DType string

// The element types.
const (
	BF16 DType = "bf16"
	FP16 DType = "fp16"
	F32  DType = "f32"
	E4M3 DType = "e4m3"
	E5M2 DType = "e5m2"
)

// Format describes how weights are stored.
type Format struct {
	// Kind is the storage scheme: "affine", "mxfp4", "fp8" or "bf16".
	Kind string
	// Bits per quantised value (affine).
	Bits int
	// GroupSize is the number of input features sharing one scale.
	GroupSize int
	// Scaling is the FP8 scaling mode ("tensor", "channel", "block") or the
	// FP8 element type.
	Scaling string
}

// String is the compact form used in request keys, e.g. "affine-q4g64".
func (f Format) String() string {
	s := f.Kind
	if f.Bits > 0 {
		s += fmt.Sprintf("-q%d", f.Bits)
	}
	if f.GroupSize > 0 {
		s += fmt.Sprintf("g%d", f.GroupSize)
	}
	if f.Scaling != "" {
		s += "-" + f.Scaling
	}
	return s
}

// Request is the complete key of one plan.
type Request struct {
	Family      Family
	Phase       Phase
	Role        Role
	Tokens      int
	InFeatures  int
	OutFeatures int
	// Experts and TopK describe a mixture-of-experts layer.
	Experts int
	TopK    int
	// Weight is the weight storage format.
	Weight Format
	// Activation is the element type of inputs and outputs.
	Activation DType
	// Bias says whether an output bias is added.
	Bias bool
}

// Key is the canonical string form of the request, used for plans and the cache.
func (r Request) Key() string {
	parts := []string{string(r.Family), string(r.Phase)}
	if r.Role != RoleAny {
		parts = append(parts, string(r.Role))
	}
	parts = append(parts, fmt.Sprintf("t%d", r.Tokens), fmt.Sprintf("%dx%d", r.InFeatures, r.OutFeatures))
	if r.Experts > 0 {
		parts = append(parts, fmt.Sprintf("e%dk%d", r.Experts, r.TopK))
	}
	parts = append(parts, r.Weight.String(), string(r.Activation))
	if r.Bias {
		parts = append(parts, "bias")
	}
	return strings.Join(parts, "/")
}

// String implements fmt.Stringer.
func (r Request) String() string { return r.Key() }

// Validate checks what every family requires: a known family, phase, role
// and activation type, and positive dimensions. Family packages check the rest.
func (r Request) Validate() error {
	if !knownFamily(r.Family) {
		return errdefs.Invalid("family", r.Family, "unknown family (known: %v)", Families)
	}
	if r.Phase != PhaseDecode && r.Phase != PhasePrefill {
		return errdefs.Invalid("phase", r.Phase, "want %q or %q", PhaseDecode, PhasePrefill)
	}
	if !knownRole(r.Role) {
		return errdefs.Invalid("role", r.Role, "unknown role")
	}
	if r.Tokens <= 0 {
		return errdefs.Invalid("tokens", r.Tokens, "must be positive")
	}
	if r.InFeatures <= 0 {
		return errdefs.Invalid("in_features", r.InFeatures, "must be positive")
	}
	if r.OutFeatures <= 0 {
		return errdefs.Invalid("out_features", r.OutFeatures, "must be positive")
	}
	if r.Experts < 0 {
		return errdefs.Invalid("experts", r.Experts, "must not be negative")
	}
	if r.TopK < 0 || r.TopK > r.Experts {
		return errdefs.Invalid("top_k", r.TopK, "must be between 0 and experts=%d", r.Experts)
	}
	switch r.Activation {
	case BF16, FP16, F32, E4M3, E5M2:
	default:
		return errdefs.Invalid("activation", r.Activation, "unknown element type")
	}
	return nil
}

func knownFamily(f Family) bool {
	for _, k := range Families {
		if f == k {
			return true
		}
	}
	return false
}

func knownRole(r Role) bool {
	for _, k := range Roles {
		if r == k {
			return true
		}
	}
	return false
}
