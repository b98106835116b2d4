package cuda

import (
	"encoding/binary"
	"testing"

	"github.com/kcand/kcand/sdk/device"
)

// pdlSource has a producer that releases its dependents at once and then
// spins before writing, and a consumer that waits for it
// (griddepcontrol.wait) before reading; the consumer also notes the time it
// started, before its wait.
const pdlSource = `
extern "C" __global__ void kc_pdl_producer(unsigned* p, unsigned long long spin_ns, unsigned v, unsigned long long* done) {
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < spin_ns);
    p[threadIdx.x] = v + threadIdx.x;
    if (threadIdx.x == 0) *done = t;
}
extern "C" __global__ void kc_pdl_consumer(const unsigned* p, unsigned* q, unsigned long long* started) {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    if (threadIdx.x == 0) *started = t;
    asm volatile("griddepcontrol.wait;" ::: "memory");
    q[threadIdx.x] = p[threadIdx.x] * 3;
}
`

// A consumer launched with Programmatic after a producer reads what the
// producer wrote, eagerly and replayed from a captured graph: the launch
// attribute reaches the driver in a form it accepts, and griddepcontrol.wait
// orders the consumer after the producer. Whether the consumer started
// before the producer finished (the point of an early start) is logged, not
// asserted: the hardware may schedule it later.
func TestGPUProgrammaticLaunchWaitsForTheKernelAhead(t *testing.T) {
	d := requireDevice(t)
	cc := d.Info().ComputeCapability
	if cc.Major < 9 {
		t.Skipf("griddepcontrol needs compute capability 9.0, the GPU has %s", cc)
	}
	c := requireCompiler(t, WithKernelCacheDir(t.TempDir()))
	k, err := c.Compile(Source{Name: "pdl.cu", Code: pdlSource}, cc.Target(false))
	if err != nil {
		t.Fatal(err)
	}
	m, err := k.Load(d.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Unload()
	producer, err := m.Function("kc_pdl_producer")
	if err != nil {
		t.Fatal(err)
	}
	consumer, err := m.Function("kc_pdl_consumer")
	if err != nil {
		t.Fatal(err)
	}
	const n = 64
	p, q, times := wordsOf(t, d, n), wordsOf(t, d, n), wordsOf(t, d, 4)
	run := func(s *Stream, v uint32) error {
		if err := producer.Launch(s, LaunchConfig{Grid: Dim3{X: 1}, Block: Dim3{X: n}},
			NewArgs().Buffer(p).Uint64(20000).Uint32(v).Pointer(devicePtr(times))); err != nil {
			return err
		}
		return consumer.Launch(s, LaunchConfig{Grid: Dim3{X: 1}, Block: Dim3{X: n}, Programmatic: true},
			NewArgs().Buffer(p).Buffer(q).Pointer(devicePtr(times)+8))
	}
	check := func(what string, v uint32) {
		t.Helper()
		if err := d.Synchronize(); err != nil {
			t.Fatal(err)
		}
		got := readWords(t, d, q, n)
		for i, w := range got {
			if want := (v + uint32(i)) * 3; w != want {
				t.Fatalf("%s: q[%d] = %d, want %d (the consumer did not wait for the producer)", what, i, w, want)
			}
		}
		ts := readWords(t, d, times, 4)
		done, started := uint64(ts[0])|uint64(ts[1])<<32, uint64(ts[2])|uint64(ts[3])<<32
		t.Logf("%s: consumer started %d ns before the producer finished", what, int64(done-started))
	}
	s := d.Stream()
	if err := run(s, 100); err != nil {
		t.Fatal(err)
	}
	check("eager", 100)

	if err := s.BeginCapture(CaptureRelaxed); err != nil {
		t.Skipf("no graph capture: %v", err)
	}
	if err := run(s, 200); err != nil {
		t.Fatal(err)
	}
	g, err := s.EndCapture()
	if err != nil {
		t.Fatal(err)
	}
	defer g.Destroy()
	exec, err := g.Instantiate()
	if err != nil {
		t.Fatal(err)
	}
	defer exec.Destroy()
	if err := d.Fill(q, 0); err != nil {
		t.Fatal(err)
	}
	if err := exec.Launch(s); err != nil {
		t.Fatal(err)
	}
	check("graph replay", 200)
}

func wordsOf(t *testing.T, d *Device, n int) device.Buffer {
	t.Helper()
	b, err := d.Alloc(int64(4 * n))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Free(b) })
	if err := d.Fill(b, 0); err != nil {
		t.Fatal(err)
	}
	return b
}

func readWords(t *testing.T, d *Device, b device.Buffer, n int) []uint32 {
	t.Helper()
	raw := make([]byte, 4*n)
	if err := d.Read(raw, b, 0); err != nil {
		t.Fatal(err)
	}
	out := make([]uint32, n)
	for i := range out {
		out[i] = binary.LittleEndian.Uint32(raw[4*i:])
	}
	return out
}

func devicePtr(b device.Buffer) DevicePtr {
	return DevicePtr(b.(device.DeviceMemory).DevicePointer())
}
