package sdk

import "github.com/kcand/kcand/sdk/spec"

// The request vocabulary, defined in sdk/spec so family contracts can use it
// without importing this package.
type (
	// Family names one kind of operation with one contract.
	Family = spec.Family
	// Phase is the inference phase a request belongs to.
	Phase = spec.Phase
	// Role is the place of a projection in the model.
	Role = spec.Role
	// DType is an element type of activations or weights.
	DType = spec.DType
	// Format describes how weights are stored.
	Format = spec.Format
	// Request is the complete key of one plan.
	Request = spec.Request
	// Sample is one set of inputs for a request.
	Sample = spec.Sample
)

// Families, phases, roles and element types.
const (
	FamilyAffine   = spec.FamilyAffine
	FamilyMXFP4MoE = spec.FamilyMXFP4MoE
	FamilyFP8      = spec.FamilyFP8
	FamilyDense    = spec.FamilyDense

	PhaseDecode  = spec.PhaseDecode
	PhasePrefill = spec.PhasePrefill

	RoleAny             = spec.RoleAny
	RoleAttentionQKV    = spec.RoleAttentionQKV
	RoleAttentionOutput = spec.RoleAttentionOutput
	RoleGateUp          = spec.RoleGateUp
	RoleDown            = spec.RoleDown
	RoleRouter          = spec.RoleRouter
	RoleOutputHead      = spec.RoleOutputHead

	BF16 = spec.BF16
	FP16 = spec.FP16
	F32  = spec.F32
	E4M3 = spec.E4M3
	E5M2 = spec.E5M2
)

// Families and Roles list every family and role.
var (
	Families = spec.Families
	Roles    = spec.Roles
)
