package sdk

import (
	"github.com/kcand/kcand/cuda"
	"github.com/kcand/kcand/sdk/device"
	"github.com/kcand/kcand/sdk/errdefs"
	pb "github.com/kcand/kcand/sdk/proto"
)

func requestToProto(r Request) *pb.Request {
	return &pb.Request{
		Family:      string(r.Family),
		Phase:       string(r.Phase),
		Role:        string(r.Role),
		Tokens:      int64(r.Tokens),
		InFeatures:  int64(r.InFeatures),
		OutFeatures: int64(r.OutFeatures),
		Experts:     int64(r.Experts),
		TopK:        int64(r.TopK),
		Weight: &pb.Format{
			Kind:      r.Weight.Kind,
			Bits:      int32(r.Weight.Bits),
			GroupSize: int32(r.Weight.GroupSize),
			Scaling:   r.Weight.Scaling,
		},
		Activation: string(r.Activation),
		Bias:       r.Bias,
	}
}

// requestFromProto converts without validating; the receiver validates.
// Dimensions that overflow int are clamped to -1 so validation names them.
func requestFromProto(p *pb.Request) Request {
	if p == nil {
		return Request{}
	}
	r := Request{
		Family:      Family(p.Family),
		Phase:       Phase(p.Phase),
		Role:        Role(p.Role),
		Tokens:      clampInt(p.Tokens),
		InFeatures:  clampInt(p.InFeatures),
		OutFeatures: clampInt(p.OutFeatures),
		Experts:     clampInt(p.Experts),
		TopK:        clampInt(p.TopK),
		Activation:  DType(p.Activation),
		Bias:        p.Bias,
	}
	if w := p.Weight; w != nil {
		r.Weight = Format{Kind: w.Kind, Bits: int(w.Bits), GroupSize: int(w.GroupSize), Scaling: w.Scaling}
	}
	return r
}

// maxDimension bounds every dimension on the wire (2^31) so products of
// dimensions cannot overflow int64.
const maxDimension = 1 << 31

func clampInt(v int64) int {
	if v > maxDimension || v < -maxDimension {
		return -1
	}
	return int(v)
}

func profileToProto(p device.Profile) *pb.Hardware {
	return &pb.Hardware{
		Kind:               string(p.Kind),
		Name:               p.Name,
		Uuid:               p.UUID,
		ComputeCapability:  p.ComputeCapability,
		Multiprocessors:    int32(p.Multiprocessors),
		MemoryBytes:        p.MemoryBytes,
		L2Bytes:            p.L2Bytes,
		Driver:             p.Driver,
		MaxThreadsPerBlock: int32(p.Limits.MaxThreadsPerBlock),
		MaxBlockDim:        int32s(p.Limits.MaxBlockDim[:]),
		MaxGridDim:         int32s(p.Limits.MaxGridDim[:]),
		MaxSharedPerBlock:  int32(p.Limits.MaxSharedPerBlock),
	}
}

func int32s(v []int) []int32 {
	out := make([]int32, len(v))
	for i, x := range v {
		out[i] = int32(x)
	}
	return out
}

func dims(v []int32) (out [3]int) {
	for i := 0; i < len(v) && i < 3; i++ {
		out[i] = int(v[i])
	}
	return out
}

func profileFromProto(p *pb.Hardware) device.Profile {
	if p == nil {
		return device.Profile{}
	}
	return device.Profile{
		Kind:              device.Kind(p.Kind),
		Name:              p.Name,
		UUID:              p.Uuid,
		ComputeCapability: p.ComputeCapability,
		Multiprocessors:   int(p.Multiprocessors),
		MemoryBytes:       p.MemoryBytes,
		L2Bytes:           p.L2Bytes,
		Driver:            p.Driver,
		Limits: device.Limits{
			MaxThreadsPerBlock: int(p.MaxThreadsPerBlock),
			MaxBlockDim:        dims(p.MaxBlockDim),
			MaxGridDim:         dims(p.MaxGridDim),
			MaxSharedPerBlock:  int(p.MaxSharedPerBlock),
		},
	}
}

func handleToProto(h device.Handle) *pb.Handle {
	return &pb.Handle{
		Kind:           string(h.Kind),
		Owner:          int64(h.Owner),
		Allocation:     h.Allocation,
		AllocationSize: h.AllocationSize,
		Token:          h.Token,
		Offset:         h.Offset,
		Size:           h.Size,
	}
}

func handleFromProto(p *pb.Handle) device.Handle {
	if p == nil {
		return device.Handle{}
	}
	return device.Handle{
		Kind:           device.Kind(p.Kind),
		Owner:          int(p.Owner),
		Allocation:     p.Allocation,
		AllocationSize: p.AllocationSize,
		Token:          p.Token,
		Offset:         p.Offset,
		Size:           p.Size,
	}
}

func handlesToProto(m map[string]device.Handle) map[string]*pb.Handle {
	out := make(map[string]*pb.Handle, len(m))
	for name, h := range m {
		out[name] = handleToProto(h)
	}
	return out
}

func handlesFromProto(field string, m map[string]*pb.Handle) (map[string]device.Handle, error) {
	out := make(map[string]device.Handle, len(m))
	for name, p := range m {
		if p == nil {
			return nil, errdefs.Invalid(field+"."+name, "nil", "missing handle")
		}
		out[name] = handleFromProto(p)
	}
	return out, nil
}

func descriptionToProto(d Description) *pb.DescribeResponse {
	resp := &pb.DescribeResponse{Name: d.Name, Version: d.Version, ProtocolVersion: int32(d.ProtocolVersion)}
	for _, f := range d.Families {
		resp.Families = append(resp.Families, string(f))
	}
	for _, c := range d.Candidates {
		pc := &pb.Candidate{
			Name:         c.Name,
			Family:       string(c.Family),
			Fallback:     c.Fallback,
			NumericClass: string(c.Numeric),
			Stability:    string(c.Stability),
		}
		for _, k := range c.Devices {
			pc.Devices = append(pc.Devices, string(k))
		}
		resp.Candidates = append(resp.Candidates, pc)
	}
	return resp
}

func descriptionFromProto(p *pb.DescribeResponse) Description {
	d := Description{Name: p.Name, Version: p.Version, ProtocolVersion: int(p.ProtocolVersion)}
	for _, f := range p.Families {
		d.Families = append(d.Families, Family(f))
	}
	for _, c := range p.Candidates {
		info := CandidateInfo{
			Name:      c.Name,
			Family:    Family(c.Family),
			Fallback:  c.Fallback,
			Numeric:   NumericClass(c.NumericClass),
			Stability: Stability(c.Stability),
		}
		for _, k := range c.Devices {
			info.Devices = append(info.Devices, device.Kind(k))
		}
		d.Candidates = append(d.Candidates, info)
	}
	return d
}

func launchPlanToProto(p *LaunchPlan) *pb.LaunchPlan {
	if p == nil {
		return nil
	}
	out := &pb.LaunchPlan{}
	for _, m := range p.Modules {
		out.Modules = append(out.Modules, &pb.Module{Hash: m.Hash, Kind: string(m.Kind), Image: m.Image})
	}
	for _, l := range p.Launches {
		pl := &pb.Launch{Module: l.Module, Function: l.Function, Grid: l.Grid[:], Block: l.Block[:], SharedBytes: l.SharedBytes, Programmatic: l.Programmatic}
		for _, prm := range l.Params {
			pl.Params = append(pl.Params, &pb.Param{Buffer: prm.Buffer, Offset: prm.Offset, Scalar: prm.Scalar, TensorMap: tensorMapToProto(prm.TensorMap)})
		}
		out.Launches = append(out.Launches, pl)
	}
	return out
}

// launchPlanFromProto converts without validating (the host validates);
// grid and block lists of the wrong length become zero dimensions, which
// validation refuses.
func launchPlanFromProto(p *pb.LaunchPlan) *LaunchPlan {
	if p == nil {
		return nil
	}
	out := &LaunchPlan{}
	for _, m := range p.Modules {
		if m != nil {
			out.Modules = append(out.Modules, Module{Hash: m.Hash, Kind: ModuleKind(m.Kind), Image: m.Image})
		}
	}
	for _, l := range p.Launches {
		if l == nil {
			continue
		}
		launch := Launch{Module: l.Module, Function: l.Function, SharedBytes: l.SharedBytes, Programmatic: l.Programmatic}
		if len(l.Grid) == 3 {
			copy(launch.Grid[:], l.Grid)
		}
		if len(l.Block) == 3 {
			copy(launch.Block[:], l.Block)
		}
		for _, prm := range l.Params {
			if prm != nil {
				launch.Params = append(launch.Params, Param{Buffer: prm.Buffer, Offset: prm.Offset, Scalar: prm.Scalar, TensorMap: tensorMapFromProto(prm.TensorMap)})
			}
		}
		out.Launches = append(out.Launches, launch)
	}
	return out
}

func tensorMapToProto(m *cuda.TensorMapDesc) *pb.TensorMap {
	if m == nil {
		return nil
	}
	return &pb.TensorMap{Dtype: string(m.DataType), Dims: m.Dims, Strides: m.Strides, Box: m.Box,
		Swizzle: uint32(m.Swizzle), L2Promotion: uint32(m.L2Promotion)}
}

// tensorMapFromProto converts without validating (the host validates).
func tensorMapFromProto(m *pb.TensorMap) *cuda.TensorMapDesc {
	if m == nil {
		return nil
	}
	return &cuda.TensorMapDesc{DataType: cuda.TensorMapDataType(m.Dtype), Dims: m.Dims, Strides: m.Strides, Box: m.Box,
		Swizzle: int(m.Swizzle), L2Promotion: int(m.L2Promotion)}
}
