package plugintest

import (
	"strconv"
	"strings"
	"testing"

	"github.com/kcand/kcand/cuda"
	"github.com/kcand/kcand/sdk"
	"github.com/kcand/kcand/sdk/gpukernel"
)

// Choice is what a GPU plugin decides for a request: the kernel variant and
// its launch. OK false means the plugin does not serve the request.
type Choice struct {
	OK          bool
	Source      *gpukernel.Source // when set, the variant's source (else CompileVariants' src)
	Variant     gpukernel.Variant
	Grid, Block [3]uint32
	SharedBytes uint32
	// MinNVRTC is the NVRTC major version the source needs, when its inline
	// PTX is newer than what older compilers assemble (12 for the PTX ISA
	// 8.0 tensor copies); CompileVariants skips it with older ones.
	MinNVRTC int
}

// h100Limits are the launch limits of an H100/H200 (132 SMs, 227 KiB of
// opt-in shared memory per block).
const (
	h100SMs          = 132
	h100SharedOptIn  = 232448
	h100MaxThreads   = 1024
	compileTargetMaj = 9
)

// CompileVariants compiles, with NVRTC for sm_90 (sm_90a for an
// architecture-specific variant), the variant choose picks
// for every request of GPURequests, and checks that its launch fits an
// H100/H200. It needs only NVRTC, no GPU, and skips without one.
func CompileVariants(t *testing.T, src gpukernel.Source, choose func(req sdk.Request, sms int) Choice) {
	comp, err := cuda.NewCompiler(cuda.WithoutKernelCache())
	if err != nil {
		t.Skipf("no NVRTC: %v", err)
	}
	seen := map[string]bool{}
	compiled, tooOld := 0, 0
	for _, req := range GPURequests() {
		c := choose(req, h100SMs)
		if !c.OK {
			continue
		}
		if c.SharedBytes > h100SharedOptIn || c.Block[0] > h100MaxThreads || c.Grid[0] == 0 {
			t.Errorf("%s: launch grid %v block %v shared %d does not fit", req.Key(), c.Grid, c.Block, c.SharedBytes)
		}
		vs := src
		if c.Source != nil {
			vs = *c.Source
		}
		name := vs.Name + " " + c.Variant.String()
		if seen[name] {
			continue
		}
		seen[name] = true
		if c.Variant.ArchSpecific && nvrtcMajor(comp.Version()) < 12 {
			t.Logf("%s: %s not compiled: NVRTC %s has no sm_90a (needs 12.0 or newer)", req.Key(), name, comp.Version())
			tooOld++
			continue
		}
		if major := nvrtcMajor(comp.Version()); major < c.MinNVRTC {
			t.Logf("%s: %s not compiled: its PTX needs NVRTC %d.0 or newer, this is %s", req.Key(), name, c.MinNVRTC, comp.Version())
			tooOld++
			continue
		}
		target := cuda.ComputeCapability{Major: compileTargetMaj, Minor: 0}.Target(c.Variant.ArchSpecific)
		out, err := comp.Compile(cuda.Source{Name: vs.Name, Code: vs.Code, Options: gpukernel.Options(c.Variant)}, target)
		if err != nil {
			t.Errorf("%s: %v", req.Key(), err)
			continue
		}
		compiled++
		t.Logf("%s: %s compiled (%d bytes, %s)", req.Key(), name, len(out.Image), out.Format)
	}
	if compiled == 0 && tooOld > 0 {
		t.Skipf("NVRTC %s cannot compile any of the %d variants (sm_90a, or PTX newer than it knows)", comp.Version(), tooOld)
	}
}

// nvrtcMajor is the major number of an NVRTC version such as "13.0".
func nvrtcMajor(v string) int {
	major, _, _ := strings.Cut(v, ".")
	n, err := strconv.Atoi(major)
	if err != nil {
		return 0
	}
	return n
}
