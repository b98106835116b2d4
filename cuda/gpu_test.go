package cuda

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/kcand/kcand/sdk/device"
	"github.com/kcand/kcand/sdk/device/cpu"
	"github.com/kcand/kcand/sdk/errdefs"
)

// These tests need a GPU; without one each skips, saying why.

func TestGPUDeviceProfile(t *testing.T) {
	d := requireDevice(t)
	p, info := d.Profile(), d.Info()
	if p.Kind != device.CUDA || p.Name == "" || !strings.HasPrefix(p.UUID, "GPU-") || p.Multiprocessors <= 0 ||
		p.MemoryBytes <= 0 || p.L2Bytes <= 0 || p.ComputeCapability == "" || p.Driver == "" {
		t.Fatalf("incomplete profile %+v", p)
	}
	if info.MaxThreadsPerBlock < 1024 || info.MaxGridDim[0] < 65535 || info.SharedMemoryPerBlockOptin < info.SharedMemoryPerBlock {
		t.Fatalf("implausible limits %+v", info)
	}
	// The profile carries the launch limits, for hosts that validate launch
	// plans without a cuda.Device (an H200: 1024 threads, grid x 2^31-1,
	// 232448 bytes of opt-in shared memory).
	l := p.Limits
	if l.MaxThreadsPerBlock != info.MaxThreadsPerBlock || l.MaxBlockDim != info.MaxBlockDim || l.MaxGridDim != info.MaxGridDim ||
		l.MaxSharedPerBlock != info.SharedMemoryPerBlockOptin {
		t.Fatalf("profile limits %+v do not match the device's %+v", l, info)
	}
	if l.MaxThreadsPerBlock < 1024 || l.MaxBlockDim[0] < 1024 || l.MaxBlockDim[2] < 64 || l.MaxGridDim[0] < 1<<31-1 ||
		l.MaxGridDim[1] < 65535 || l.MaxSharedPerBlock < 48<<10 {
		t.Fatalf("implausible profile limits %+v", l)
	}
	t.Logf("%s (%s) cc %s, %d SMs, %d MB, L2 %d MB, driver %s, opt-in shared %d",
		p.Name, p.UUID, p.ComputeCapability, p.Multiprocessors, p.MemoryBytes>>20, p.L2Bytes>>20, p.Driver, info.SharedMemoryPerBlockOptin)
}

func TestGPUMemoryRoundTrip(t *testing.T) {
	d := requireDevice(t)
	const size = 3<<20 + 5 // not a multiple of anything
	b, err := d.Alloc(size)
	if err != nil {
		t.Fatal(err)
	}
	got := bytes.Repeat([]byte{0xEE}, size)
	if err := d.Read(got, b, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, make([]byte, size)) {
		t.Fatal("Alloc did not zero the memory")
	}
	pattern := make([]byte, 1000)
	for i := range pattern {
		pattern[i] = byte(i * 7)
	}
	if err := d.Write(b, 12345, pattern); err != nil {
		t.Fatal(err)
	}
	part := make([]byte, len(pattern))
	if err := d.Read(part, b, 12345); err != nil || !bytes.Equal(part, pattern) {
		t.Fatalf("read back %v: mismatch", err)
	}
	// Device-to-device through a slice.
	dst, err := Slice(b, 1<<20, int64(len(pattern)))
	if err != nil {
		t.Fatal(err)
	}
	src := DevicePtr(b.(device.DeviceMemory).DevicePointer()) + 12345
	if err := d.Stream().CopyDevice(DevicePtr(dst.(device.DeviceMemory).DevicePointer()), src, int64(len(pattern))); err != nil {
		t.Fatal(err)
	}
	clear(part)
	if err := d.Read(part, dst, 0); err != nil || !bytes.Equal(part, pattern) {
		t.Fatalf("device copy %v: mismatch", err)
	}
	if err := d.Fill(b, 0x5A); err != nil {
		t.Fatal(err)
	}
	if err := d.Read(got, b, 0); err != nil || !bytes.Equal(got, bytes.Repeat([]byte{0x5A}, size)) {
		t.Fatalf("fill %v: mismatch", err)
	}
	if err := d.Free(b); err != nil {
		t.Fatal(err)
	}
}

func TestGPUBadSizes(t *testing.T) {
	d := requireDevice(t)
	b, err := d.Alloc(64)
	if err != nil {
		t.Fatal(err)
	}
	other := cpu.New()
	defer other.Close()
	cpuBuf, err := other.Alloc(64)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		run  func() error
	}{
		{"alloc zero", func() error { _, err := d.Alloc(0); return err }},
		{"alloc negative", func() error { _, err := d.Alloc(-1); return err }},
		{"alloc beyond memory", func() error { _, err := d.Alloc(d.Profile().MemoryBytes + 1); return err }},
		{"write past end", func() error { return d.Write(b, 60, make([]byte, 8)) }},
		{"write negative offset", func() error { return d.Write(b, -1, make([]byte, 1)) }},
		{"read past end", func() error { return d.Read(make([]byte, 65), b, 0) }},
		{"slice past end", func() error { _, err := Slice(b, 32, 33); return err }},
		{"cpu buffer", func() error { return d.Write(cpuBuf, 0, []byte{1}) }},
		{"launch block too large", func() error {
			fill := testFunction(t, loadTestKernels(t, d), "kcand_fill")
			return fill.Launch(d.Stream(), LaunchConfig{Grid: Dim3{X: 1}, Block: Dim3{X: 2048}}, NewArgs().Buffer(b).Uint32(16).Uint32(1))
		}},
		{"launch shared beyond opt-in", func() error {
			fill := testFunction(t, loadTestKernels(t, d), "kcand_fill")
			return fill.Launch(d.Stream(), LaunchConfig{Grid: Dim3{X: 1}, Block: Dim3{X: 32}, SharedMemoryBytes: 1 << 30}, NewArgs().Buffer(b).Uint32(16).Uint32(1))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.run(); !errors.Is(err, errdefs.ErrInvalidRequest) {
				t.Fatalf("got %v, want an invalid request", err)
			}
		})
	}
	if err := d.Free(b); err != nil {
		t.Fatal(err)
	}
	if err := d.Free(b); !errors.Is(err, errdefs.ErrInvalidRequest) {
		t.Fatalf("double free = %v, want an invalid request", err)
	}
	if err := d.Write(b, 0, []byte{1}); !errors.Is(err, errdefs.ErrInvalidRequest) {
		t.Fatalf("write after free = %v, want an invalid request", err)
	}
}

// fillAndCheck launches kcand_fill over n words of b and checks the result;
// the buffer is poisoned first so a launch that did nothing cannot pass.
func fillAndCheck(t *testing.T, d *Device, fill *Function, b device.Buffer, n int, seed uint32, launch func(LaunchConfig, *Args) error) {
	t.Helper()
	if err := d.Fill(b, 0xCD); err != nil {
		t.Fatal(err)
	}
	cfg := LaunchConfig{Grid: Dim3{X: (n + 127) / 128}, Block: Dim3{X: 128}}
	if err := launch(cfg, NewArgs().Buffer(b).Uint32(uint32(n)).Uint32(seed)); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 4*n)
	if err := d.Read(got, b, 0); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if w := binary.LittleEndian.Uint32(got[4*i:]); w != uint32(i)*seed+7 {
			t.Fatalf("word %d = %#x, want %#x", i, w, uint32(i)*seed+7)
		}
	}
}

// TestGPULaunchFromEveryThreadingMode launches the same kernel from a plain
// goroutine, inside Context.Do, after LockThread, and from many goroutines
// at once: every mode must reach the same context.
func TestGPULaunchFromEveryThreadingMode(t *testing.T) {
	d := requireDevice(t)
	fill := testFunction(t, loadTestKernels(t, d), "kcand_fill")
	const n = 10000
	b, err := d.Alloc(4 * n)
	if err != nil {
		t.Fatal(err)
	}
	stream := d.Stream()
	fillAndCheck(t, d, fill, b, n, 3, func(cfg LaunchConfig, a *Args) error { return fill.Launch(stream, cfg, a) })
	fillAndCheck(t, d, fill, b, n, 5, func(cfg LaunchConfig, a *Args) error {
		return d.Context().Do(func() error { return fill.Launch(stream, cfg, a) })
	})
	fillAndCheck(t, d, fill, b, n, 9, func(cfg LaunchConfig, a *Args) error {
		unlock, err := d.Context().LockThread()
		if err != nil {
			return err
		}
		defer unlock()
		return fill.Launch(stream, cfg, a)
	})
	fillAndCheck(t, d, fill, b, n, 11, func(cfg LaunchConfig, a *Args) error {
		return fill.LaunchRepeated(stream, cfg, a, 3)
	})

	// Many goroutines, each with its own buffer and stream.
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := range 16 {
		wg.Go(func() {
			errs <- concurrentFill(d, fill, g)
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

func concurrentFill(d *Device, fill *Function, g int) error {
	const n = 4096
	s, err := d.Context().NewStream(StreamNonBlocking)
	if err != nil {
		return err
	}
	defer s.Destroy()
	b, err := d.Alloc(4 * n)
	if err != nil {
		return err
	}
	defer d.Free(b)
	seed := uint32(100 + g)
	for range 20 {
		if err := fill.Launch(s, LaunchConfig{Grid: Dim3{X: n / 128}, Block: Dim3{X: 128}}, NewArgs().Buffer(b).Uint32(n).Uint32(seed)); err != nil {
			return err
		}
	}
	got := make([]byte, 4*n)
	if err := s.CopyFromDevice(got, DevicePtr(b.(device.DeviceMemory).DevicePointer())); err != nil {
		return err
	}
	for i := range n {
		if w := binary.LittleEndian.Uint32(got[4*i:]); w != uint32(i)*seed+7 {
			return errors.New("concurrent fill: wrong result")
		}
	}
	return nil
}

// TestGPUDynamicSharedMemoryAbove48KB launches with 100 KB of dynamic shared
// memory, which needs the kernel's opt-in raised first.
func TestGPUDynamicSharedMemoryAbove48KB(t *testing.T) {
	d := requireDevice(t)
	sum := testFunction(t, loadTestKernels(t, d), "kcand_shared_sum")
	const words = 25 << 10 // 100 KB
	if d.Info().SharedMemoryPerBlockOptin < 4*words {
		t.Skipf("GPU opts in to %d bytes of shared memory, need %d", d.Info().SharedMemoryPerBlockOptin, 4*words)
	}
	out, err := d.Alloc(4)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Fill(out, 0xFF); err != nil {
		t.Fatal(err)
	}
	cfg := LaunchConfig{Grid: Dim3{X: 1}, Block: Dim3{X: 256}, SharedMemoryBytes: 4 * words}
	if err := sum.Launch(d.Stream(), cfg, NewArgs().Buffer(out).Uint32(words)); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 4)
	if err := d.Read(got, out, 0); err != nil {
		t.Fatal(err)
	}
	if v, want := binary.LittleEndian.Uint32(got), uint32(words*(words-1)/2); v != want {
		t.Fatalf("sum = %d, want %d", v, want)
	}
	if a := sum.Attributes(); a.MaxDynamicSharedBytes < 4*words {
		t.Fatalf("dynamic shared limit %d after a %d-byte launch", a.MaxDynamicSharedBytes, 4*words)
	}
}

func TestGPUFunctionAttributesAndOccupancy(t *testing.T) {
	d := requireDevice(t)
	fill := testFunction(t, loadTestKernels(t, d), "kcand_fill")
	a := fill.Attributes()
	if a.Registers <= 0 || a.MaxThreadsPerBlock <= 0 || a.BinaryVersion <= 0 {
		t.Fatalf("implausible attributes %+v", a)
	}
	blocks, err := fill.MaxActiveBlocksPerMultiprocessor(256, 0)
	if err != nil || blocks <= 0 {
		t.Fatalf("occupancy = %d, %v", blocks, err)
	}
	if _, err := fill.MaxActiveBlocksPerMultiprocessor(0, 0); !errors.Is(err, errdefs.ErrInvalidRequest) {
		t.Fatalf("occupancy of 0 threads = %v, want invalid request", err)
	}
	t.Logf("kcand_fill: %+v, %d blocks of 256 per SM", a, blocks)
}

// TestGPUFunctionParamInfo reads the test kernels' parameter layouts from
// the driver and checks that Args packs the same layout. A driver older
// than CUDA 12.4 must say the query is unsupported instead.
func TestGPUFunctionParamInfo(t *testing.T) {
	d := requireDevice(t)
	m := loadTestKernels(t, d)
	if v := d.Info().DriverVersion; v < 12040 {
		_, err := testFunction(t, m, "kcand_fill").ParamInfo()
		if !errors.Is(err, errdefs.ErrUnsupported) {
			t.Fatalf("ParamInfo on a CUDA %s driver = %v, want errdefs.ErrUnsupported", formatDriverVersion(v), err)
		}
		t.Logf("CUDA %s driver: %v", formatDriverVersion(v), err)
		return
	}
	tests := []struct {
		name string
		args *Args
		want []ParamInfo
	}{
		{"kcand_fill", NewArgs().Pointer(0).Uint32(0).Uint32(0), []ParamInfo{{0, 8}, {8, 4}, {12, 4}}},
		{"kcand_spin_affine", NewArgs().Pointer(0).Uint64(0).Uint32(0).Uint32(0), []ParamInfo{{0, 8}, {8, 8}, {16, 4}, {20, 4}}},
		{"kcand_empty", NewArgs().Pointer(0).Int32(0), []ParamInfo{{0, 8}, {8, 4}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := testFunction(t, m, tt.name).ParamInfo()
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("parameters %v, want %v", got, tt.want)
			}
			for i, p := range got {
				if int(tt.args.offsets[i]) != p.Offset {
					t.Errorf("Args packs parameter %d at %d, the kernel expects it at %d", i, tt.args.offsets[i], p.Offset)
				}
			}
		})
	}
}

func TestGPUEventTimingAndTimer(t *testing.T) {
	d := requireDevice(t)
	spin := testFunction(t, loadTestKernels(t, d), "kcand_spin_affine")
	x, err := d.Alloc(4)
	if err != nil {
		t.Fatal(err)
	}
	us, err := device.NewTimer(d).Time(func() error {
		return spin.Launch(d.Stream(), LaunchConfig{Grid: Dim3{X: 1}, Block: Dim3{X: 1}}, NewArgs().Buffer(x).Uint64(2e6).Uint32(1).Uint32(1))
	})
	if err != nil {
		t.Fatal(err)
	}
	if us < 1500 || us > 500e3 {
		t.Fatalf("a 2 ms spin timed at %.1f µs", us)
	}
	done, err := d.Stream().Done()
	if err != nil || !done {
		t.Fatalf("stream done = %v, %v after the timer synchronised", done, err)
	}
	noTiming, err := d.Context().NewEvent(EventDisableTiming)
	if err != nil {
		t.Fatal(err)
	}
	defer noTiming.Destroy()
	if _, err := noTiming.Export(); !errors.Is(err, errdefs.ErrInvalidRequest) {
		t.Fatalf("export of a non-interprocess event = %v, want invalid request", err)
	}
	if _, err := d.Context().NewEvent(EventInterprocess); !errors.Is(err, errdefs.ErrInvalidRequest) {
		t.Fatalf("interprocess event with timing = %v, want invalid request", err)
	}
}

func TestGPUPinnedHostCopies(t *testing.T) {
	d := requireDevice(t)
	const size = 1 << 20
	host, err := d.Context().AllocHost(size)
	if err != nil {
		t.Fatal(err)
	}
	defer host.Free()
	for i, p := 0, host.Bytes(); i < size; i++ {
		p[i] = byte(i * 13)
	}
	b, err := d.Alloc(size)
	if err != nil {
		t.Fatal(err)
	}
	ptr := DevicePtr(b.(device.DeviceMemory).DevicePointer())
	s := d.Stream()
	if err := s.CopyToDeviceAsync(ptr, host, 0, size); err != nil {
		t.Fatal(err)
	}
	back, err := d.Context().AllocHost(size)
	if err != nil {
		t.Fatal(err)
	}
	defer back.Free()
	if err := s.CopyFromDeviceAsync(back, 0, ptr, size); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(back.Bytes(), host.Bytes()) {
		t.Fatal("pinned round trip mismatch")
	}
	if err := s.CopyToDeviceAsync(ptr, host, size-1, 2); !errors.Is(err, errdefs.ErrInvalidRequest) {
		t.Fatalf("copy past the host buffer = %v, want invalid request", err)
	}
}

// TestGPUNVRTCKernelRuns compiles a templated kernel for this GPU's exact
// architecture, loads the cubin and runs it through its lowered name.
func TestGPUNVRTCKernelRuns(t *testing.T) {
	d := requireDevice(t)
	c := requireCompiler(t, WithKernelCacheDir(t.TempDir()))
	k, err := c.Compile(Source{Name: "kernels.cu", Code: testKernelSource, NameExpressions: []string{"kcand_scale<float>"}},
		d.Info().ComputeCapability.Target(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("compiled %s (%s, %d bytes) with NVRTC %s", k.Arch, k.Format, len(k.Image), k.NVRTCVersion)
	m, err := k.Load(d.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Unload()
	scale, err := m.Function(k.LoweredName("kcand_scale<float>"))
	if err != nil {
		t.Fatal(err)
	}
	const n = 1000
	b, err := d.Alloc(4 * n)
	if err != nil {
		t.Fatal(err)
	}
	in := make([]byte, 4*n)
	for i := range n {
		binary.LittleEndian.PutUint32(in[4*i:], math.Float32bits(float32(i)))
	}
	if err := d.Write(b, 0, in); err != nil {
		t.Fatal(err)
	}
	cfg := LaunchConfig{Grid: Dim3{X: (n + 255) / 256}, Block: Dim3{X: 256}}
	if err := scale.Launch(d.Stream(), cfg, NewArgs().Buffer(b).Float32(2.5).Uint32(n)); err != nil {
		t.Fatal(err)
	}
	out := make([]byte, 4*n)
	if err := d.Read(out, b, 0); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if got, want := binary.LittleEndian.Uint32(out[4*i:]), math.Float32bits(float32(i)*2.5); got != want {
			t.Fatalf("element %d = %#x, want %#x", i, got, want)
		}
	}
}

// TestGPULaunchDoesNotAllocate guards the hot path: repacking arguments and
// launching allocate nothing, bound or not.
func TestGPULaunchDoesNotAllocate(t *testing.T) {
	d := requireDevice(t)
	empty := testFunction(t, loadTestKernels(t, d), "kcand_empty")
	target, err := d.Alloc(4)
	if err != nil {
		t.Fatal(err)
	}
	ptr := DevicePtr(target.(device.DeviceMemory).DevicePointer())
	stream, args := d.Stream(), NewArgs()
	cfg := LaunchConfig{Grid: Dim3{X: 1}, Block: Dim3{X: 32}}
	launch := func() {
		if err := empty.Launch(stream, cfg, args.Reset().Pointer(ptr).Int32(1)); err != nil {
			t.Fatal(err)
		}
	}
	if allocs := testing.AllocsPerRun(200, launch); allocs != 0 {
		t.Errorf("unbound launch allocates %.1f times", allocs)
	}
	unlock, err := d.Context().LockThread()
	if err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(200, launch)
	unlock()
	if allocs != 0 {
		t.Errorf("bound launch allocates %.1f times", allocs)
	}
	if err := d.Synchronize(); err != nil {
		t.Fatal(err)
	}
}

// TestGPULoadModuleReportsJITLog loads PTX that does not assemble: the error
// carries CUDA_ERROR_INVALID_PTX and the JIT's log.
func TestGPULoadModuleReportsJITLog(t *testing.T) {
	d := requireDevice(t)
	bad := []byte(".version 7.8\n.target sm_80\n.address_size 64\n.visible .entry bad()\n{\n\tFAKE_JIT_ERROR;\n}\n")
	_, err := d.Context().LoadModule(bad)
	var cudaErr *Error
	if !errors.As(err, &cudaErr) || !errors.Is(err, ResultInvalidPTX) || cudaErr.Detail == "" {
		t.Fatalf("got %v, want CUDA_ERROR_INVALID_PTX with the JIT log", err)
	}
	t.Logf("%v", err)
	if _, err := d.Context().LoadModule(nil); !errors.Is(err, errdefs.ErrInvalidRequest) {
		t.Fatalf("empty image = %v, want an invalid request", err)
	}
}

// TestGPUContextLifecycle covers Do's panic forwarding and use after Close.
func TestGPUContextLifecycle(t *testing.T) {
	requireDevice(t)
	ctx, err := NewContext(0)
	if err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() {
			if p := recover(); p == nil || !strings.Contains(fmt.Sprint(p), "boom") {
				t.Fatalf("recovered %v, want the panic from the context thread", p)
			}
		}()
		ctx.Do(func() error { panic("boom") })
	}()
	if err := ctx.Do(func() error { return nil }); err != nil {
		t.Fatalf("the context thread died with the panic: %v", err)
	}
	if err := ctx.Do(func() error { return ctx.Close() }); err == nil {
		t.Fatal("Close from the context thread should fail")
	}
	stream, err := ctx.NewStream(StreamDefault)
	if err != nil {
		t.Fatal(err)
	}
	if err := ctx.Close(); err != nil {
		t.Fatal(err)
	}
	if err := ctx.Close(); err != nil {
		t.Fatalf("second Close = %v", err)
	}
	if _, err := ctx.MemAlloc(16); !errors.Is(err, ErrClosed) {
		t.Fatalf("MemAlloc after Close = %v, want ErrClosed", err)
	}
	if err := stream.Synchronize(); !errors.Is(err, ErrClosed) {
		t.Fatalf("stream use after Close = %v, want ErrClosed", err)
	}
}

// TestGPULargeWritesGoThroughPinnedMemory: writes of stagedWriteMin bytes
// and more are staged through two pinned buffers; every byte must land,
// at an offset, over more chunks than buffers, and when a second write
// reuses the buffers.
func TestGPULargeWritesGoThroughPinnedMemory(t *testing.T) {
	d := requireDevice(t)
	const size = 3*stageBytes + 12345 // four chunks, the last partial
	b, err := d.Alloc(size + 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Free(b)
	for round, seed := range []byte{3, 11} {
		src := make([]byte, size)
		for i := range src {
			src[i] = byte(i*int(seed)) ^ byte(i>>13)
		}
		if err := d.Write(b, 4096, src); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, size)
		if err := d.Read(got, b, 4096); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, src) {
			for j := range got {
				if got[j] != src[j] {
					t.Fatalf("round %d: byte %d is %#x, want %#x", round, j, got[j], src[j])
				}
			}
		}
	}
	if d.stage.bufs[0] == nil {
		t.Fatal("a large write did not go through the pinned buffers")
	}
}
