package cuda

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/kcand/kcand/sdk/device"
	"github.com/kcand/kcand/sdk/errdefs"
)

// affineStep is one launch of kcand_spin_affine in the graph tests:
// word = word*mul + add on one word of a small buffer. Steps differ in word,
// multiplier and addend and do not commute, so the result shows that every
// launch ran, in order, with its own arguments.
type affineStep struct {
	word     int
	mul, add uint32
}

func affineSteps(count, words int) []affineStep {
	steps := make([]affineStep, count)
	for i := range steps {
		steps[i] = affineStep{word: i % words, mul: uint32(3 + 2*i), add: uint32(7*i + 1)}
	}
	return steps
}

// applyOnHost is what the steps compute, as the GPU must compute it.
func applyOnHost(words []uint32, steps []affineStep) {
	for _, s := range steps {
		words[s.word] = words[s.word]*s.mul + s.add
	}
}

// launchSteps launches the steps on s against the words at base. It reuses
// one Args, so a capture that kept a pointer to the arguments instead of
// copying them would replay the last step's arguments every time.
func launchSteps(spin *Function, s *Stream, base DevicePtr, steps []affineStep) error {
	args := NewArgs()
	cfg := LaunchConfig{Grid: Dim3{X: 1}, Block: Dim3{X: 1}}
	for _, step := range steps {
		args.Reset().Pointer(base + DevicePtr(4*step.word)).Uint64(0).Uint32(step.mul).Uint32(step.add)
		if err := spin.Launch(s, cfg, args); err != nil {
			return err
		}
	}
	return nil
}

// wordsBuffer allocates a buffer holding words.
func wordsBuffer(t *testing.T, d *Device, words []uint32) (device.Buffer, DevicePtr) {
	t.Helper()
	b, err := d.Alloc(int64(4 * len(words)))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Write(b, 0, encodeWords(words)); err != nil {
		t.Fatal(err)
	}
	return b, DevicePtr(b.(device.DeviceMemory).DevicePointer())
}

func encodeWords(words []uint32) []byte {
	out := make([]byte, 4*len(words))
	for i, w := range words {
		binary.LittleEndian.PutUint32(out[4*i:], w)
	}
	return out
}

func readBack(t *testing.T, d *Device, b device.Buffer) []byte {
	t.Helper()
	got := make([]byte, b.Size())
	if err := d.Read(got, b, 0); err != nil {
		t.Fatal(err)
	}
	return got
}

func newTestStream(t *testing.T, d *Device) *Stream {
	t.Helper()
	s, err := d.Context().NewStream(StreamNonBlocking)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Destroy() })
	return s
}

// TestGPUGraphReplayMatchesEagerLaunches captures 32 launches, checks that
// capturing ran none of them, and replays the graph twice: the buffer must
// match, bit for bit, the same 32 launches made eagerly twice.
func TestGPUGraphReplayMatchesEagerLaunches(t *testing.T) {
	d := requireDevice(t)
	spin := testFunction(t, loadTestKernels(t, d), "kcand_spin_affine")
	initial := []uint32{1, 2, 3, 4}
	steps := affineSteps(32, len(initial))
	eager, eagerPtr := wordsBuffer(t, d, initial)
	graphed, graphedPtr := wordsBuffer(t, d, initial)
	for range 2 {
		if err := launchSteps(spin, d.Stream(), eagerPtr, steps); err != nil {
			t.Fatal(err)
		}
	}

	stream := newTestStream(t, d)
	if err := stream.BeginCapture(CaptureRelaxed); err != nil {
		t.Fatal(err)
	}
	if err := launchSteps(spin, stream, graphedPtr, steps); err != nil {
		t.Fatal(err)
	}
	graph, err := stream.EndCapture()
	if err != nil {
		t.Fatal(err)
	}
	if got := readBack(t, d, graphed); !bytes.Equal(got, encodeWords(initial)) {
		t.Fatalf("capturing ran the launches: % x", got)
	}
	exec, err := graph.Instantiate()
	if err != nil {
		t.Fatal(err)
	}
	if err := graph.Destroy(); err != nil { // the executable graph outlives it
		t.Fatal(err)
	}
	for range 2 {
		if err := exec.Launch(stream); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.Synchronize(); err != nil {
		t.Fatal(err)
	}

	want := append([]uint32(nil), initial...)
	applyOnHost(want, steps)
	applyOnHost(want, steps)
	got, eagerGot := readBack(t, d, graphed), readBack(t, d, eager)
	if !bytes.Equal(eagerGot, encodeWords(want)) {
		t.Fatalf("eager launches gave % x, want % x", eagerGot, encodeWords(want))
	}
	if !bytes.Equal(got, eagerGot) {
		t.Fatalf("replays gave % x, eager launches % x", got, eagerGot)
	}

	if allocs := testing.AllocsPerRun(50, func() {
		if err := exec.Launch(stream); err != nil {
			t.Fatal(err)
		}
	}); allocs != 0 {
		t.Errorf("graph launch allocates %.1f times", allocs)
	}
	if err := stream.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if err := exec.Destroy(); err != nil {
		t.Fatal(err)
	}
}

// TestGPUGraphCaptureModes captures in each mode from the goroutines the
// mode allows: relaxed from any, the strict modes only from one bound to
// the context, since they must end on the thread that began them.
func TestGPUGraphCaptureModes(t *testing.T) {
	d := requireDevice(t)
	spin := testFunction(t, loadTestKernels(t, d), "kcand_spin_affine")
	unbound := func(fn func() error) error { return fn() }
	locked := func(fn func() error) error {
		unlock, err := d.Context().LockThread()
		if err != nil {
			return err
		}
		defer unlock()
		return fn()
	}
	insideDo := func(fn func() error) error { return d.Context().Do(fn) }
	tests := []struct {
		name string
		mode CaptureMode
		run  func(func() error) error
	}{
		{"relaxed, unbound goroutine", CaptureRelaxed, unbound},
		{"relaxed, LockThread", CaptureRelaxed, locked},
		{"thread-local, LockThread", CaptureThreadLocal, locked},
		{"thread-local, inside Do", CaptureThreadLocal, insideDo},
		{"global, LockThread", CaptureGlobal, locked},
		{"global, inside Do", CaptureGlobal, insideDo},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			initial := []uint32{5, 6}
			steps := affineSteps(8, len(initial))
			b, ptr := wordsBuffer(t, d, initial)
			stream := newTestStream(t, d)
			err := tt.run(func() error {
				if err := stream.BeginCapture(tt.mode); err != nil {
					return err
				}
				if err := launchSteps(spin, stream, ptr, steps); err != nil {
					return err
				}
				graph, err := stream.EndCapture()
				if err != nil {
					return err
				}
				defer graph.Destroy()
				exec, err := graph.Instantiate()
				if err != nil {
					return err
				}
				defer exec.Destroy()
				if err := exec.Launch(stream); err != nil {
					return err
				}
				return stream.Synchronize()
			})
			if err != nil {
				t.Fatal(err)
			}
			want := append([]uint32(nil), initial...)
			applyOnHost(want, steps)
			if got := readBack(t, d, b); !bytes.Equal(got, encodeWords(want)) {
				t.Fatalf("got % x, want % x", got, encodeWords(want))
			}
		})
	}
}

// TestGPUGraphCaptureErrors covers misuse: each case fails with a typed
// error, and the stream is usable again afterwards.
func TestGPUGraphCaptureErrors(t *testing.T) {
	d := requireDevice(t)
	spin := testFunction(t, loadTestKernels(t, d), "kcand_spin_affine")
	_, ptr := wordsBuffer(t, d, []uint32{1})
	oneStep := affineSteps(1, 1)
	tests := []struct {
		name string
		run  func(t *testing.T, s *Stream)
	}{
		{"end without begin", func(t *testing.T, s *Stream) {
			g, err := s.EndCapture()
			var cudaErr *Error
			if g != nil || !errors.As(err, &cudaErr) {
				t.Fatalf("got graph %v, error %v; want no graph and a *cuda.Error", g, err)
			}
			t.Log(err)
		}},
		{"begin twice", func(t *testing.T, s *Stream) {
			if err := s.BeginCapture(CaptureRelaxed); err != nil {
				t.Fatal(err)
			}
			err := s.BeginCapture(CaptureRelaxed)
			var cudaErr *Error
			if !errors.As(err, &cudaErr) {
				t.Errorf("second BeginCapture = %v, want a *cuda.Error", err)
			}
			if g, err := s.EndCapture(); err == nil {
				g.Destroy()
			}
		}},
		{"strict modes need a bound goroutine", func(t *testing.T, s *Stream) {
			for _, mode := range []CaptureMode{CaptureGlobal, CaptureThreadLocal} {
				if err := s.BeginCapture(mode); !errors.Is(err, errdefs.ErrInvalidRequest) {
					t.Errorf("%v capture from an unbound goroutine = %v, want an invalid request", mode, err)
				}
			}
		}},
		{"unknown mode", func(t *testing.T, s *Stream) {
			if err := s.BeginCapture(CaptureMode(7)); !errors.Is(err, errdefs.ErrInvalidRequest) {
				t.Fatalf("got %v, want an invalid request", err)
			}
		}},
		{"waiting for a capturing stream invalidates the capture", func(t *testing.T, s *Stream) {
			if err := s.BeginCapture(CaptureRelaxed); err != nil {
				t.Fatal(err)
			}
			if err := launchSteps(spin, s, ptr, oneStep); err != nil {
				t.Fatal(err)
			}
			if err := s.Synchronize(); !errors.Is(err, ResultStreamCaptureUnsupported) {
				t.Errorf("Synchronize during capture = %v, want %v", err, ResultStreamCaptureUnsupported)
			}
			g, err := s.EndCapture()
			if g != nil || !errors.Is(err, ResultStreamCaptureInvalidated) {
				t.Fatalf("EndCapture = %v, %v; want no graph and %v", g, err, ResultStreamCaptureInvalidated)
			}
		}},
		{"global capture forbids allocation", func(t *testing.T, s *Stream) {
			unlock, err := d.Context().LockThread()
			if err != nil {
				t.Fatal(err)
			}
			defer unlock()
			if err := s.BeginCapture(CaptureGlobal); err != nil {
				t.Fatal(err)
			}
			p, err := d.Context().MemAlloc(256)
			if !errors.Is(err, ResultStreamCaptureUnsupported) {
				t.Errorf("MemAlloc during a global capture = %v, want %v", err, ResultStreamCaptureUnsupported)
			}
			if err == nil {
				defer d.Context().MemFree(p)
			}
			g, err := s.EndCapture()
			if g != nil {
				g.Destroy()
			}
			t.Logf("EndCapture after the forbidden allocation: %v", err)
		}},
		{"relaxed capture allows allocation", func(t *testing.T, s *Stream) {
			if err := s.BeginCapture(CaptureRelaxed); err != nil {
				t.Fatal(err)
			}
			p, allocErr := d.Context().MemAlloc(256)
			g, err := s.EndCapture()
			if err != nil {
				t.Fatal(err)
			}
			g.Destroy()
			if allocErr != nil {
				t.Fatalf("MemAlloc during a relaxed capture: %v", allocErr)
			}
			if err := d.Context().MemFree(p); err != nil {
				t.Fatal(err)
			}
		}},
		{"use after destroy", func(t *testing.T, s *Stream) {
			if err := s.BeginCapture(CaptureRelaxed); err != nil {
				t.Fatal(err)
			}
			if err := launchSteps(spin, s, ptr, oneStep); err != nil {
				t.Fatal(err)
			}
			g, err := s.EndCapture()
			if err != nil {
				t.Fatal(err)
			}
			exec, err := g.Instantiate()
			if err != nil {
				t.Fatal(err)
			}
			if err := errors.Join(g.Destroy(), g.Destroy(), exec.Destroy(), exec.Destroy()); err != nil {
				t.Fatalf("destroy twice: %v", err)
			}
			if _, err := g.Instantiate(); !errors.Is(err, ErrClosed) {
				t.Errorf("Instantiate after Destroy = %v, want ErrClosed", err)
			}
			if err := exec.Launch(s); !errors.Is(err, ErrClosed) {
				t.Errorf("Launch after Destroy = %v, want ErrClosed", err)
			}
		}},
		{"nil graphs", func(t *testing.T, s *Stream) {
			var g *Graph
			var exec *GraphExec
			if _, err := g.Instantiate(); !errors.Is(err, errdefs.ErrInvalidRequest) {
				t.Errorf("nil Graph.Instantiate = %v, want an invalid request", err)
			}
			if err := exec.Launch(s); !errors.Is(err, errdefs.ErrInvalidRequest) {
				t.Errorf("nil GraphExec.Launch = %v, want an invalid request", err)
			}
			if err := errors.Join(g.Destroy(), exec.Destroy()); err != nil {
				t.Errorf("destroying nil graphs: %v", err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newTestStream(t, d)
			tt.run(t, s)
			// Whatever happened, the stream must be out of capture mode and
			// run work again.
			if err := launchSteps(spin, s, ptr, oneStep); err != nil {
				t.Fatalf("launch after the case: %v", err)
			}
			if err := s.Synchronize(); err != nil {
				t.Fatalf("synchronize after the case: %v", err)
			}
		})
	}
}
