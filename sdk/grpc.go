package sdk

import (
	"context"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/kcand/kcand/sdk/device"
	pb "github.com/kcand/kcand/sdk/proto"
)

// GRPCPlugin is the go-plugin glue: it serves a Plugin over gRPC in the
// plugin process and hands the host a Plugin client.
type GRPCPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	// Impl is the served plugin (plugin side only).
	Impl Plugin
}

var (
	_ plugin.GRPCPlugin = (*GRPCPlugin)(nil)
	_ Plugin            = (*GRPCClient)(nil)
	_ pb.PluginServer   = (*GRPCServer)(nil)
)

// GRPCServer implements GRPCPlugin.
func (p *GRPCPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	pb.RegisterPluginServer(s, &GRPCServer{Impl: p.Impl})
	return nil
}

// GRPCClient implements GRPCPlugin.
func (p *GRPCPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return &GRPCClient{client: pb.NewPluginClient(c)}, nil
}

// GRPCClient is the host's view of a plugin process.
type GRPCClient struct {
	client pb.PluginClient
}

// Describe implements Plugin.
func (c *GRPCClient) Describe(ctx context.Context) (Description, error) {
	resp, err := c.client.Describe(ctx, &pb.DescribeRequest{})
	if err != nil {
		return Description{}, fromStatus(err)
	}
	return descriptionFromProto(resp), nil
}

// Admit implements Plugin.
func (c *GRPCClient) Admit(ctx context.Context, req Request, hw device.Profile) ([]Admission, error) {
	resp, err := c.client.Admit(ctx, &pb.AdmitRequest{Request: requestToProto(req), Hardware: profileToProto(hw)})
	if err != nil {
		return nil, fromStatus(err)
	}
	out := make([]Admission, 0, len(resp.Admissions))
	for _, a := range resp.Admissions {
		out = append(out, Admission{Candidate: a.Candidate, Admitted: a.Admitted, Reason: a.Reason})
	}
	return out, nil
}

// Prepare implements Plugin.
func (c *GRPCClient) Prepare(ctx context.Context, req PrepareRequest) (PreparedInfo, error) {
	resp, err := c.client.Prepare(ctx, &pb.PrepareRequest{
		Candidate:    req.Candidate,
		Request:      requestToProto(req.Request),
		Hardware:     profileToProto(req.Hardware),
		Weights:      handlesToProto(req.Weights),
		KnownModules: req.KnownModules,
	})
	if err != nil {
		return PreparedInfo{}, fromStatus(err)
	}
	return PreparedInfo{ID: resp.PreparedId, WorkspaceBytes: resp.WorkspaceBytes, Launch: launchPlanFromProto(resp.Launch)}, nil
}

// Execute implements Plugin.
func (c *GRPCClient) Execute(ctx context.Context, req ExecuteRequest) (float64, error) {
	resp, err := c.client.Execute(ctx, &pb.ExecuteRequest{PreparedId: req.PreparedID, Buffers: handlesToProto(req.Buffers)})
	if err != nil {
		return 0, fromStatus(err)
	}
	return resp.DeviceUs, nil
}

// Benchmark implements Plugin.
func (c *GRPCClient) Benchmark(ctx context.Context, req BenchmarkRequest) (BenchmarkResult, error) {
	resp, err := c.client.Benchmark(ctx, &pb.BenchmarkRequest{
		PreparedId: req.PreparedID,
		Buffers:    handlesToProto(req.Buffers),
		Warmup:     int32(req.Warmup),
		Iterations: int32(req.Iterations),
	})
	if err != nil {
		return BenchmarkResult{}, fromStatus(err)
	}
	return BenchmarkResult{IterationMicros: resp.IterationUs, WallMicros: resp.WallUs}, nil
}

// Release implements Plugin.
func (c *GRPCClient) Release(ctx context.Context, id string, forget []device.Handle) error {
	req := &pb.ReleaseRequest{PreparedId: id}
	for _, h := range forget {
		req.Forget = append(req.Forget, handleToProto(h))
	}
	_, err := c.client.Release(ctx, req)
	return fromStatus(err)
}

// OpenChannel implements Plugin.
func (c *GRPCClient) OpenChannel(ctx context.Context, req ChannelRequest) error {
	_, err := c.client.OpenChannel(ctx, &pb.OpenChannelRequest{
		Page: handleToProto(req.Page), ReadyEvent: req.ReadyEvent, DoneEvent: req.DoneEvent, EventOwner: int64(req.EventOwner),
	})
	return fromStatus(err)
}

// GRPCServer serves a Plugin to the host.
type GRPCServer struct {
	pb.UnimplementedPluginServer
	Impl Plugin
}

// Describe implements pb.PluginServer.
func (s *GRPCServer) Describe(ctx context.Context, _ *pb.DescribeRequest) (*pb.DescribeResponse, error) {
	d, err := s.Impl.Describe(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	return descriptionToProto(d), nil
}

// Admit implements pb.PluginServer.
func (s *GRPCServer) Admit(ctx context.Context, req *pb.AdmitRequest) (*pb.AdmitResponse, error) {
	out, err := s.Impl.Admit(ctx, requestFromProto(req.Request), profileFromProto(req.Hardware))
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &pb.AdmitResponse{}
	for _, a := range out {
		resp.Admissions = append(resp.Admissions, &pb.Admission{Candidate: a.Candidate, Admitted: a.Admitted, Reason: a.Reason})
	}
	return resp, nil
}

// Prepare implements pb.PluginServer.
func (s *GRPCServer) Prepare(ctx context.Context, req *pb.PrepareRequest) (*pb.PrepareResponse, error) {
	weights, err := handlesFromProto("weights", req.Weights)
	if err != nil {
		return nil, toStatus(err)
	}
	info, err := s.Impl.Prepare(ctx, PrepareRequest{
		Candidate:    req.Candidate,
		Request:      requestFromProto(req.Request),
		Hardware:     profileFromProto(req.Hardware),
		Weights:      weights,
		KnownModules: req.KnownModules,
	})
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.PrepareResponse{PreparedId: info.ID, WorkspaceBytes: info.WorkspaceBytes, Launch: launchPlanToProto(info.Launch)}, nil
}

// Execute implements pb.PluginServer.
func (s *GRPCServer) Execute(ctx context.Context, req *pb.ExecuteRequest) (*pb.ExecuteResponse, error) {
	buffers, err := handlesFromProto("buffers", req.Buffers)
	if err != nil {
		return nil, toStatus(err)
	}
	us, err := s.Impl.Execute(ctx, ExecuteRequest{PreparedID: req.PreparedId, Buffers: buffers})
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.ExecuteResponse{DeviceUs: us}, nil
}

// Benchmark implements pb.PluginServer.
func (s *GRPCServer) Benchmark(ctx context.Context, req *pb.BenchmarkRequest) (*pb.BenchmarkResponse, error) {
	buffers, err := handlesFromProto("buffers", req.Buffers)
	if err != nil {
		return nil, toStatus(err)
	}
	res, err := s.Impl.Benchmark(ctx, BenchmarkRequest{
		PreparedID: req.PreparedId,
		Buffers:    buffers,
		Warmup:     int(req.Warmup),
		Iterations: int(req.Iterations),
	})
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.BenchmarkResponse{IterationUs: res.IterationMicros, WallUs: res.WallMicros}, nil
}

// Release implements pb.PluginServer.
func (s *GRPCServer) Release(ctx context.Context, req *pb.ReleaseRequest) (*pb.ReleaseResponse, error) {
	var forget []device.Handle
	for _, h := range req.Forget {
		forget = append(forget, handleFromProto(h))
	}
	if err := s.Impl.Release(ctx, req.PreparedId, forget); err != nil {
		return nil, toStatus(err)
	}
	return &pb.ReleaseResponse{}, nil
}

// OpenChannel implements pb.PluginServer.
func (s *GRPCServer) OpenChannel(ctx context.Context, req *pb.OpenChannelRequest) (*pb.OpenChannelResponse, error) {
	err := s.Impl.OpenChannel(ctx, ChannelRequest{
		Page: handleFromProto(req.Page), ReadyEvent: req.ReadyEvent, DoneEvent: req.DoneEvent, EventOwner: int(req.EventOwner),
	})
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.OpenChannelResponse{}, nil
}
