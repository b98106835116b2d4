package sdk

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kcand/kcand/sdk/errdefs"
)

// TestErrorClassesSurviveTheWire sends each class through toStatus and
// fromStatus, as a plugin error crosses gRPC to the host.
func TestErrorClassesSurviveTheWire(t *testing.T) {
	cases := []struct {
		name  string
		err   error
		class error
	}{
		{"field", errdefs.Invalid("tokens", 0, "must be positive"), errdefs.ErrInvalidRequest},
		{"invalid", errors.New("x"), errdefs.ErrInternal},
		{"unsupported", errdefs.Unsupported("no sm_80"), errdefs.ErrUnsupported},
		{"not found", errors.Join(errdefs.ErrNotFound, errors.New("id 7")), errdefs.ErrNotFound},
		{"internal", errdefs.Internal("boom"), errdefs.ErrInternal},
		{"device lost", fmt.Errorf("%w: cuStreamSynchronize: %w", errdefs.ErrDeviceLost, errors.New("CUDA_ERROR_ILLEGAL_ADDRESS")), errdefs.ErrDeviceLost},
		// device lost wins over the class of the error it wraps
		{"device lost, invalid inside", fmt.Errorf("%w: %w", errdefs.ErrDeviceLost, errdefs.Invalid("buffers.x", 0, "cannot open")), errdefs.ErrDeviceLost},
		{"exiting", fmt.Errorf("%w: plugin p lost its CUDA context and is exiting", ErrUnavailable), ErrUnavailable},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			back := fromStatus(toStatus(tc.err))
			assert.ErrorIs(t, back, tc.class)
			assert.Equal(t, tc.err.Error(), back.Error())
		})
	}
	var fe *errdefs.FieldError
	require.ErrorAs(t, fromStatus(toStatus(errdefs.Invalid("weight.bits", 7, "want 4"))), &fe)
	assert.Equal(t, "weight.bits", fe.Field)
	assert.Equal(t, "7", fe.Value)
}

func TestTransportErrorsAreUnavailable(t *testing.T) {
	assert.ErrorIs(t, fromStatus(status.Error(codes.Unavailable, "connection refused")), ErrUnavailable)
	err := fromStatus(status.Error(codes.DeadlineExceeded, "slow"))
	assert.ErrorIs(t, err, ErrUnavailable)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.ErrorIs(t, fromStatus(errors.New("not a status")), ErrUnavailable)
	assert.NoError(t, fromStatus(nil))
}

func TestRequestKeyAndValidate(t *testing.T) {
	req := Request{Family: FamilyAffine, Phase: PhaseDecode, Role: RoleGateUp, Tokens: 1, InFeatures: 4096, OutFeatures: 14336,
		Weight: Format{Kind: "affine", Bits: 4, GroupSize: 64}, Activation: BF16, Bias: true}
	assert.Equal(t, "affine/decode/gate-up/t1/4096x14336/affine-q4g64/bf16/bias", req.Key())
	require.NoError(t, req.Validate())
	req.Role = "mlp"
	var fe *errdefs.FieldError
	require.ErrorAs(t, req.Validate(), &fe)
	assert.Equal(t, "role", fe.Field)
}

func TestRequestSurvivesTheWireAndOverflowIsInvalid(t *testing.T) {
	req := Request{Family: FamilyMXFP4MoE, Phase: PhasePrefill, Tokens: 5, InFeatures: 2880, OutFeatures: 5760, Experts: 32, TopK: 4,
		Weight: Format{Kind: "mxfp4"}, Activation: BF16}
	assert.Equal(t, req, requestFromProto(requestToProto(req)))
	p := requestToProto(req)
	p.Tokens = 1 << 40
	var fe *errdefs.FieldError
	require.ErrorAs(t, requestFromProto(p).Validate(), &fe)
	assert.Equal(t, "tokens", fe.Field)
}
