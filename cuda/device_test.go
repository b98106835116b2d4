package cuda

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/kcand/kcand/sdk/device"
	"github.com/kcand/kcand/sdk/device/cpu"
	"github.com/kcand/kcand/sdk/errdefs"
)

// TestDeviceRejectsBadInputFirst checks, on a device with no GPU behind it,
// that bad arguments are typed errors found before any driver call: the
// same checks guard the real device.
func TestDeviceRejectsBadInputFirst(t *testing.T) {
	var d Device
	host := cpu.New()
	defer host.Close()
	hostBuf, err := host.Alloc(16)
	if err != nil {
		t.Fatal(err)
	}
	token := make([]byte, 64)
	valid := device.Handle{Kind: device.CUDA, Owner: os.Getpid() + 1, Allocation: 1, AllocationSize: 64, Token: token, Size: 64}
	own := valid
	own.Owner = os.Getpid()
	cpuKind := valid
	cpuKind.Kind = device.CPU
	shortToken := valid
	shortToken.Token = token[:10]
	outside := valid
	outside.Offset, outside.Size = 32, 64

	tests := []struct {
		name     string
		run      func() error
		mentions string
	}{
		{"alloc zero", func() error { _, err := d.Alloc(0); return err }, "positive"},
		{"alloc negative", func() error { _, err := d.Alloc(-5); return err }, "positive"},
		{"write cpu buffer", func() error { return d.Write(hostBuf, 0, []byte{1}) }, "not a CUDA buffer"},
		{"read cpu buffer", func() error { return d.Read(make([]byte, 1), hostBuf, 0) }, "not a CUDA buffer"},
		{"fill cpu buffer", func() error { return d.Fill(hostBuf, 0) }, "not a CUDA buffer"},
		{"free cpu buffer", func() error { return d.Free(hostBuf) }, "not a CUDA buffer"},
		{"slice cpu buffer", func() error { _, err := Slice(hostBuf, 0, 1); return err }, "not a CUDA buffer"},
		{"open own handle", func() error { _, err := d.Open(own); return err }, "exported by this process"},
		{"open cpu handle", func() error { _, err := d.Open(cpuKind); return err }, "only cuda handles"},
		{"open short token", func() error { _, err := d.Open(shortToken); return err }, "64 bytes"},
		{"open range outside", func() error { _, err := d.Open(outside); return err }, "exceeds allocation"},
		{"open own memory", func() error { _, err := (&Context{}).OpenMemory(os.Getpid(), IPCHandle{}); return err }, "exported by this process"},
		{"open own event", func() error { _, err := (&Context{}).OpenEvent(EventHandle{Owner: os.Getpid()}); return err }, "exported by this process"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.run()
			if !errors.Is(err, errdefs.ErrInvalidRequest) || !strings.Contains(err.Error(), tt.mentions) {
				t.Fatalf("got %v, want an invalid request mentioning %q", err, tt.mentions)
			}
		})
	}
	// A device that was never opened refuses work without crashing.
	if _, err := d.Alloc(1); !errors.Is(err, errdefs.ErrInternal) {
		t.Fatalf("Alloc on an unopened device = %v, want an internal error", err)
	}
	if err := d.Close(); err != nil {
		t.Fatalf("Close on an unopened device = %v", err)
	}
}

func TestEventHandleText(t *testing.T) {
	var h EventHandle
	h.Owner = 4242
	for i := range h.Token {
		h.Token[i] = byte(i * 3)
	}
	back, err := ParseEventHandle(h.String())
	if err != nil || back != h {
		t.Fatalf("round trip %v, %v", back, err)
	}
	for _, bad := range []string{"", "4242", "x:AAAA", "4242:AAAA", "-1:" + strings.Repeat("A", 86)} {
		if _, err := ParseEventHandle(bad); !errors.Is(err, errdefs.ErrInvalidRequest) {
			t.Fatalf("ParseEventHandle(%q) = %v, want an invalid request", bad, err)
		}
	}
}
