package cuda

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/kcand/kcand/sdk/errdefs"
)

// TestGPUIPCSharedBuffer: this process allocates and poisons a buffer and
// exports a range of it; a second process opens the range, runs kcand_fill
// on it, and exits; this process reads back exactly the pattern inside the
// range and the poison outside it.
func TestGPUIPCSharedBuffer(t *testing.T) {
	d := requireDevice(t)
	const size, offset, length, seed = 1 << 20, 4096, 64 << 10, 2654435761
	whole, err := d.Alloc(size)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Fill(whole, 0xAB); err != nil {
		t.Fatal(err)
	}
	shared, err := Slice(whole, offset, length)
	if err != nil {
		t.Fatal(err)
	}
	h, err := shared.Handle()
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Token) != 64 || h.Offset != offset || h.Size != length || h.AllocationSize != size {
		t.Fatalf("handle %v: want a 64-byte token and range [%d,+%d) of %d bytes", h, offset, length, size)
	}

	child := startChild(t, "fill")
	child.send(t, childMessage{Step: "fill", Handle: &h, Seed: seed})
	child.receive(t) // filled
	child.finish(t)

	got := make([]byte, size)
	if err := d.Read(got, whole, 0); err != nil {
		t.Fatal(err)
	}
	for i := int64(0); i < size; i += 4 {
		word := binary.LittleEndian.Uint32(got[i:])
		want := uint32(0xABABABAB)
		if i >= offset && i < offset+length {
			want = uint32((i-offset)/4)*seed + 7
		}
		if word != want {
			t.Fatalf("word at byte %d = %#x, want %#x", i, word, want)
		}
	}
}

// TestGPUIPCEventsOrderStreams chains three kernels across two processes with
// interprocess events: parent x=5 (after 50 ms), child x=x*3+1 (after 50
// ms), parent x=x*2. Only that order gives 32.
func TestGPUIPCEventsOrderStreams(t *testing.T) {
	d := requireDevice(t)
	spin := testFunction(t, loadTestKernels(t, d), "kcand_spin_affine")
	x, err := d.Alloc(4)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Fill(x, 0xAA); err != nil {
		t.Fatal(err)
	}
	h, err := x.Handle()
	if err != nil {
		t.Fatal(err)
	}
	mine, myHandle, err := d.NewIPCEvent()
	if err != nil {
		t.Fatal(err)
	}
	defer mine.Destroy()

	child := startChild(t, "events")
	child.send(t, childMessage{Step: "setup", Handle: &h, Event: myHandle.String()})
	ready := child.receive(t)
	childHandle, err := ParseEventHandle(ready.Event)
	if err != nil {
		t.Fatal(err)
	}
	childEvent, err := d.OpenIPCEvent(childHandle)
	if err != nil {
		t.Fatal(err)
	}
	defer childEvent.Destroy()

	stream, one := d.Stream(), LaunchConfig{Grid: Dim3{X: 1}, Block: Dim3{X: 1}}
	if err := spin.Launch(stream, one, NewArgs().Buffer(x).Uint64(50e6).Uint32(0).Uint32(5)); err != nil {
		t.Fatal(err)
	}
	if err := stream.Record(mine); err != nil {
		t.Fatal(err)
	}
	child.send(t, childMessage{Step: "go"})
	child.receive(t) // recorded
	if err := stream.Wait(childEvent); err != nil {
		t.Fatal(err)
	}
	if err := spin.Launch(stream, one, NewArgs().Buffer(x).Uint64(0).Uint32(2).Uint32(0)); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 4)
	if err := d.Read(got, x, 0); err != nil {
		t.Fatal(err)
	}
	child.finish(t)
	if v := binary.LittleEndian.Uint32(got); v != 32 {
		t.Fatalf("x = %d, want 32 (10 or 31 mean the streams ran out of order)", v)
	}
}

// TestGPUOpenOwnHandleIsError exports a real handle and opens it in the same
// process: a clear invalid-request error, no driver call, no crash.
func TestGPUOpenOwnHandleIsError(t *testing.T) {
	d := requireDevice(t)
	b, err := d.Alloc(256)
	if err != nil {
		t.Fatal(err)
	}
	h, err := b.Handle()
	if err != nil {
		t.Fatal(err)
	}
	_, err = d.Open(h)
	if !errors.Is(err, errdefs.ErrInvalidRequest) || !strings.Contains(err.Error(), "exported by this process") {
		t.Fatalf("Open(own handle) = %v, want an invalid request naming the cause", err)
	}
	e, eh, err := d.NewIPCEvent()
	if err != nil {
		t.Fatal(err)
	}
	defer e.Destroy()
	if _, err := d.OpenIPCEvent(eh); !errors.Is(err, errdefs.ErrInvalidRequest) {
		t.Fatalf("OpenIPCEvent(own handle) = %v, want an invalid request", err)
	}
	// The device still works afterwards.
	if err := d.Write(b, 0, bytes.Repeat([]byte{1}, 256)); err != nil {
		t.Fatal(err)
	}
}
