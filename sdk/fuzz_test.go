package sdk

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/kcand/kcand/sdk/family"
	pb "github.com/kcand/kcand/sdk/proto"
)

// FuzzRequestDecoding feeds arbitrary bytes through what a plugin does with
// a host's prepare request: decode, convert, validate generically and by
// family. Nothing may panic, and a request that validates must have
// positive dimensions.
func FuzzRequestDecoding(f *testing.F) {
	good := Request{Family: FamilyAffine, Phase: PhaseDecode, Role: RoleGateUp, Tokens: 1, InFeatures: 4096, OutFeatures: 14336,
		Weight: Format{Kind: "affine", Bits: 4, GroupSize: 64}, Activation: BF16, Bias: true}
	for _, r := range []Request{good, {}, {Family: FamilyAffine, Tokens: -1}, {Family: "x", Phase: PhasePrefill, Tokens: 1 << 40}} {
		b, _ := proto.Marshal(&pb.PrepareRequest{Candidate: "qmm", Request: requestToProto(r),
			Weights: map[string]*pb.Handle{"weight": {Kind: "cpu", AllocationSize: 64, Size: 128, Token: []byte("/proc/1/fd/3")}}})
		f.Add(b)
	}
	f.Add([]byte{0x12, 0x02, 0x20, 0x01})
	f.Fuzz(func(t *testing.T, data []byte) {
		var p pb.PrepareRequest
		if proto.Unmarshal(data, &p) != nil {
			return
		}
		req := requestFromProto(p.Request)
		if err := validate(req); err == nil && (req.Tokens <= 0 || req.InFeatures <= 0 || req.OutFeatures <= 0) {
			t.Fatalf("validated a request with an empty dimension: %+v", req)
		}
		if c, err := family.Lookup(req.Family); err == nil && c.Validate(req) == nil {
			c.WeightSizes(req) // sizes of a valid request must be computable
		}
		if handles, err := handlesFromProto("weights", p.Weights); err == nil {
			for _, h := range handles {
				if h.Validate() == nil && (h.Offset < 0 || h.Size < 0 || h.Offset+h.Size > h.AllocationSize) {
					t.Fatalf("validated a handle outside its allocation: %+v", h)
				}
			}
		}
	})
}

// FuzzLaunchPlanValidation feeds arbitrary bytes as a plugin's launch plan.
// Validation must never panic, and a plan it accepts must only point into
// known bindings, at offsets inside them, within the limits.
func FuzzLaunchPlanValidation(f *testing.F) {
	bindings := map[string]int64{"x": 8192, "weight": 1 << 20, "y": 4096}
	b, _ := proto.Marshal(launchPlanToProto(goodPlan()))
	f.Add(b)
	bad := goodPlan()
	bad.Launches[0].Params[0].Buffer = "secret"
	b, _ = proto.Marshal(launchPlanToProto(bad))
	f.Add(b)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		var p pb.LaunchPlan
		if proto.Unmarshal(data, &p) != nil {
			return
		}
		plan := launchPlanFromProto(&p)
		if ValidateLaunchPlan(plan, nil, bindings, h200Limits) != nil {
			return
		}
		for _, l := range plan.Launches {
			threads := int(l.Block[0]) * int(l.Block[1]) * int(l.Block[2])
			if threads > h200Limits.MaxThreadsPerBlock || threads == 0 {
				t.Fatalf("accepted a block of %d threads", threads)
			}
			for _, prm := range l.Params {
				if prm.Buffer != "" && (prm.Offset < 0 || prm.Offset >= bindings[prm.Buffer]) {
					t.Fatalf("accepted a pointer outside %q: offset %d", prm.Buffer, prm.Offset)
				}
			}
		}
	})
}
