package cuda

import (
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/kcand/kcand/sdk/device"
	"github.com/kcand/kcand/sdk/errdefs"
)

// tensorMapPTX holds kcand_tma_copy (testdata/tensormap.cu says how it was
// made).
//
//go:embed testdata/tensormap.ptx
var tensorMapPTX []byte

// A tensor map encoded over a real buffer moves the box the description
// names: the right elements, zeros past the tensor's end on either side,
// and, with a swizzle, 16-byte chunks where the hardware puts them. The
// expected bytes are computed here, from the description alone.
func TestGPUTensorMapCopiesABox(t *testing.T) {
	d := requireDevice(t)
	if cc := d.Info().ComputeCapability; cc.Major < 9 {
		t.Skipf("tensor copies need compute capability 9.0, the GPU has %s", cc)
	}
	m, err := d.Context().LoadModule(tensorMapPTX)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Unload()
	copyBox, err := m.Function("kcand_tma_copy")
	if err != nil {
		t.Fatal(err)
	}
	// A tensor of 40 rows of 96 u16, rows 208 bytes apart (16 bytes of
	// padding each); element (c, r) holds 1000 r + c.
	const cols, rows, pitch = 96, 40, 208
	src := make([]byte, rows*pitch)
	for r := range rows {
		for c := range cols {
			binary.LittleEndian.PutUint16(src[r*pitch+2*c:], uint16(1000*r+c))
		}
	}
	tensor := allocBytes(t, d, len(src))
	if err := d.Write(tensor, 0, src); err != nil {
		t.Fatal(err)
	}
	out := allocBytes(t, d, 4096)
	base := DevicePtr(tensor.(device.DeviceMemory).DevicePointer())

	tests := []struct {
		name    string
		box     []uint32
		swizzle int
		c0, c1  int32
	}{
		{"inside", []uint32{32, 8}, 0, 16, 4},
		{"past the last row and column", []uint32{32, 8}, 0, 80, 36},
		{"before the first row and column", []uint32{16, 4}, 0, -8, -2},
		{"128-byte swizzle", []uint32{64, 8}, 128, 32, 8},
		{"64-byte swizzle", []uint32{32, 16}, 64, 8, 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			desc := TensorMapDesc{DataType: TensorU16, Dims: []uint64{cols, rows}, Strides: []uint64{pitch}, Box: tt.box, Swizzle: tt.swizzle, L2Promotion: 128}
			tm, err := d.Context().EncodeTensorMap(desc, base)
			if err != nil {
				t.Fatal(err)
			}
			bytes := desc.BoxBytes()
			if err := d.Fill(out, 0xAB); err != nil {
				t.Fatal(err)
			}
			cfg := LaunchConfig{Grid: Dim3{X: 1}, Block: Dim3{X: 1}, SharedMemoryBytes: bytes + 16}
			if err := copyBox.Launch(d.Stream(), cfg, NewArgs().TensorMap(&tm).Buffer(out).Uint32(uint32(bytes)).Int32(tt.c0).Int32(tt.c1)); err != nil {
				t.Fatal(err)
			}
			got := make([]byte, bytes)
			if err := d.Read(got, out, 0); err != nil {
				t.Fatal(err)
			}
			want := expectedBox(src, pitch, cols, rows, int(tt.box[0]), int(tt.box[1]), tt.swizzle, int(tt.c0), int(tt.c1))
			for o := range want {
				if got[o] != want[o] {
					t.Fatalf("byte %d of the box = %#x, want %#x (then % x…)", o, got[o], want[o], got[o&^15:min(len(got), o&^15+16)])
				}
			}
		})
	}

	t.Run("bad address and description", func(t *testing.T) {
		desc := TensorMapDesc{DataType: TensorU16, Dims: []uint64{cols, rows}, Strides: []uint64{pitch}, Box: []uint32{32, 8}}
		if _, err := d.Context().EncodeTensorMap(desc, base+8); !errors.Is(err, errdefs.ErrInvalidRequest) {
			t.Errorf("an address 8 bytes past a 16-byte boundary: %v, want an invalid request", err)
		}
		desc.Box = []uint32{4, 8} // an 8-byte box row
		if _, err := d.Context().EncodeTensorMap(desc, base); !errors.Is(err, errdefs.ErrInvalidRequest) {
			t.Errorf("an 8-byte box row: %v, want an invalid request", err)
		}
	})
}

// expectedBox is what a tensor copy of the u16 box (boxCols x boxRows) at
// (c0, c1) leaves in shared memory: zeros outside the tensor, and with a
// swizzle of span bytes the 16-byte chunk of each offset XORed with its
// 128-byte row (bits 7.. onto bits 4..; 128: 3 bits, 64: 2, 32: 1).
func expectedBox(src []byte, pitch, cols, rows, boxCols, boxRows, span, c0, c1 int) []byte {
	row := 2 * boxCols
	out := make([]byte, row*boxRows)
	mask := 0
	if span > 0 {
		mask = span/16 - 1
	}
	for r := range boxRows {
		for b := range row {
			x, y := c0+b/2, c1+r
			var v byte
			if x >= 0 && y >= 0 && x < cols && y < rows {
				v = src[y*pitch+2*x+b%2]
			}
			o := r*row + b
			out[o^(((o>>7)&mask)<<4)] = v
		}
	}
	return out
}

func allocBytes(t *testing.T, d *Device, n int) device.Buffer {
	t.Helper()
	b, err := d.Alloc(int64(n))
	if err != nil {
		t.Fatal(fmt.Errorf("alloc %d bytes: %w", n, err))
	}
	t.Cleanup(func() { d.Free(b) })
	return b
}

// Encoding follows the driver: it works from CUDA 12.0, and before that it
// is unsupported (errdefs.ErrUnsupported, naming the entry point), not a
// crash. TestFakeOldDriverLacksTensorMaps runs this against a fake CUDA
// 11.8 driver.
func TestGPUTensorMapEncodingFollowsTheDriver(t *testing.T) {
	d := requireDevice(t)
	b := allocBytes(t, d, 4096)
	desc := TensorMapDesc{DataType: TensorU32, Dims: []uint64{32, 32}, Strides: []uint64{128}, Box: []uint32{32, 8}}
	_, err := d.Context().EncodeTensorMap(desc, DevicePtr(b.(device.DeviceMemory).DevicePointer()))
	if v := d.Info().DriverVersion; v < 12000 {
		if !errors.Is(err, errdefs.ErrUnsupported) || !strings.Contains(err.Error(), "cuTensorMapEncodeTiled") {
			t.Fatalf("CUDA %s driver: %v, want unsupported naming cuTensorMapEncodeTiled", d.Info().DriverVersionString(), err)
		}
		t.Logf("CUDA %s driver: %v", d.Info().DriverVersionString(), err)
		return
	}
	if err != nil {
		t.Fatalf("CUDA %s driver: %v", d.Info().DriverVersionString(), err)
	}
}
