package cuda

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/kcand/kcand/sdk/device/cpu"
	"github.com/kcand/kcand/sdk/errdefs"
)

func TestArgsLayout(t *testing.T) {
	var a Args
	a.Uint32(7).Pointer(0x1000).Float32(1.5).Bytes([]byte{1, 2, 3}, 1).Bytes(bytes.Repeat([]byte{9}, 16), 16).Int64(-2).Float64(0.25)
	if err := a.Err(); err != nil {
		t.Fatal(err)
	}
	// u32 at 0, pointer aligned to 8, f32 at 16, 3 bytes at 20, 16-byte
	// struct aligned to 32, i64 at 48, f64 at 56.
	if want := []uint32{0, 8, 16, 20, 32, 48, 56}; !slices.Equal(a.offsets, want) {
		t.Fatalf("offsets %v, want %v", a.offsets, want)
	}
	if len(a.data) != 64 || a.Len() != 7 {
		t.Fatalf("%d bytes, %d params; want 64 and 7", len(a.data), a.Len())
	}
	le := binary.LittleEndian
	if le.Uint32(a.data[0:]) != 7 || le.Uint64(a.data[8:]) != 0x1000 || math.Float32frombits(le.Uint32(a.data[16:])) != 1.5 ||
		!bytes.Equal(a.data[20:23], []byte{1, 2, 3}) || int64(le.Uint64(a.data[48:])) != -2 || math.Float64frombits(le.Uint64(a.data[56:])) != 0.25 {
		t.Fatalf("values packed wrong: % x", a.data)
	}
	if !bytes.Equal(a.data[4:8], make([]byte, 4)) || !bytes.Equal(a.data[23:32], make([]byte, 9)) {
		t.Fatalf("padding not zero: % x", a.data)
	}
	// Reset keeps storage and clears stale padding on reuse.
	storage := &a.data[:1][0]
	a.Reset().Uint32(1).Uint64(2)
	if &a.data[:1][0] != storage || a.Len() != 2 || !bytes.Equal(a.data[4:8], make([]byte, 4)) {
		t.Fatalf("reset reused storage=%v, params %d, padding % x", &a.data[:1][0] == storage, a.Len(), a.data[4:8])
	}
}

func TestArgsErrors(t *testing.T) {
	host := cpu.New()
	defer host.Close()
	hostBuf, err := host.Alloc(8)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args *Args
	}{
		{"bad alignment", NewArgs().Bytes([]byte{1, 2, 3}, 3)},
		{"empty struct", NewArgs().Bytes(nil, 4)},
		{"host buffer", NewArgs().Buffer(hostBuf)},
		{"too many bytes", NewArgs().Bytes(make([]byte, maxParamBytes+1), 1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.args.check(); !errors.Is(err, errdefs.ErrInvalidRequest) {
				t.Fatalf("check = %v, want an invalid request", err)
			}
		})
	}
	// The first error sticks through later appends.
	a := NewArgs().Bytes(nil, 4).Uint32(1)
	if a.Err() == nil || a.Reset().Err() != nil {
		t.Fatal("an error should stick until Reset")
	}
}

func TestCheckLaunchConfig(t *testing.T) {
	maxGrid, maxBlock := [3]int{1<<31 - 1, 65535, 65535}, [3]int{1024, 1024, 64}
	tests := []struct {
		name  string
		cfg   LaunchConfig
		valid bool
	}{
		{"one dimensional", LaunchConfig{Grid: Dim3{X: 100}, Block: Dim3{X: 256}}, true},
		{"three dimensional", LaunchConfig{Grid: Dim3{X: 2, Y: 3, Z: 4}, Block: Dim3{X: 8, Y: 8, Z: 4}}, true},
		{"opt-in shared memory", LaunchConfig{Grid: Dim3{X: 1}, Block: Dim3{X: 32}, SharedMemoryBytes: 200 << 10}, true},
		{"zero grid", LaunchConfig{Grid: Dim3{}, Block: Dim3{X: 32}}, false},
		{"negative block", LaunchConfig{Grid: Dim3{X: 1}, Block: Dim3{X: -32}}, false},
		{"grid y too large", LaunchConfig{Grid: Dim3{X: 1, Y: 65536}, Block: Dim3{X: 32}}, false},
		{"block z too large", LaunchConfig{Grid: Dim3{X: 1}, Block: Dim3{X: 1, Y: 1, Z: 65}}, false},
		{"too many threads", LaunchConfig{Grid: Dim3{X: 1}, Block: Dim3{X: 64, Y: 32}}, false},
		{"shared beyond opt-in", LaunchConfig{Grid: Dim3{X: 1}, Block: Dim3{X: 32}, SharedMemoryBytes: 228<<10 + 1}, false},
		{"negative shared", LaunchConfig{Grid: Dim3{X: 1}, Block: Dim3{X: 32}, SharedMemoryBytes: -1}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			err := checkLaunchConfig(&cfg, maxGrid, maxBlock, 1024, 228<<10)
			if tt.valid && err != nil {
				t.Fatalf("rejected: %v", err)
			}
			if !tt.valid && !errors.Is(err, errdefs.ErrInvalidRequest) {
				t.Fatalf("got %v, want an invalid request", err)
			}
			if tt.valid && (cfg.Grid.Y < 1 || cfg.Grid.Z < 1 || cfg.Block.Y < 1 || cfg.Block.Z < 1) {
				t.Fatalf("zero dimensions not filled in: %v", cfg)
			}
		})
	}
}
