package cuda

import (
	"errors"
	"strings"
	"testing"

	"github.com/kcand/kcand/sdk/errdefs"
)

func TestTensorMapDescCheck(t *testing.T) {
	valid := func() TensorMapDesc {
		return TensorMapDesc{DataType: TensorU32, Dims: []uint64{1024, 300}, Strides: []uint64{4096}, Box: []uint32{32, 64}, Swizzle: 128}
	}
	tests := []struct {
		name  string
		edit  func(*TensorMapDesc)
		field string // empty: valid
	}{
		{"valid", func(*TensorMapDesc) {}, ""},
		{"one dimension", func(d *TensorMapDesc) { d.Dims, d.Strides, d.Box = []uint64{64}, nil, []uint32{16} }, ""},
		{"padded rows", func(d *TensorMapDesc) { d.Strides[0] = 4112 }, ""},
		{"unknown type", func(d *TensorMapDesc) { d.DataType = "f8" }, "m.dtype"},
		{"no dimensions", func(d *TensorMapDesc) { d.Dims, d.Strides, d.Box = nil, nil, nil }, "m.dims"},
		{"six dimensions", func(d *TensorMapDesc) { d.Dims = make([]uint64, 6) }, "m.dims"},
		{"strides short", func(d *TensorMapDesc) { d.Strides = nil }, "m.strides"},
		{"box short", func(d *TensorMapDesc) { d.Box = d.Box[:1] }, "m.box"},
		{"empty dimension", func(d *TensorMapDesc) { d.Dims[1] = 0 }, "m.dims[1]"},
		{"stride not a multiple of 16", func(d *TensorMapDesc) { d.Strides[0] = 4100 }, "m.strides[0]"},
		{"rows overlap", func(d *TensorMapDesc) { d.Strides[0] = 2048 }, "m.strides[0]"},
		{"empty box", func(d *TensorMapDesc) { d.Box[1] = 0 }, "m.box[1]"},
		{"box over 256", func(d *TensorMapDesc) { d.Box[1] = 257 }, "m.box[1]"},
		{"box row of 8 bytes", func(d *TensorMapDesc) { d.Box[0] = 2 }, "m.box[0]"},
		{"box row wider than the swizzle", func(d *TensorMapDesc) { d.Box[0] = 64 }, "m.box[0]"},
		{"odd swizzle", func(d *TensorMapDesc) { d.Swizzle = 96 }, "m.swizzle"},
		{"odd L2 promotion", func(d *TensorMapDesc) { d.L2Promotion = 32 }, "m.l2_promotion"},
		// Strides just under 2^40 across 2^25 rows would wrap a 64-bit size.
		{"rows past 2^63 bytes", func(d *TensorMapDesc) {
			d.Dims, d.Strides, d.Box, d.Swizzle = []uint64{4, 1<<25 + 1}, []uint64{1 << 39}, []uint32{4, 1}, 0
		}, "m.dims[1]"},
		{"extent past 2^63 bytes", func(d *TensorMapDesc) {
			d.Dims, d.Strides, d.Box, d.Swizzle = []uint64{4, 1 << 24}, []uint64{1<<40 - 16}, []uint32{4, 1}, 0
		}, "m.dims[1]"},
		{"planes past 2^63 bytes", func(d *TensorMapDesc) {
			d.Dims, d.Strides, d.Box, d.Swizzle = []uint64{4, 1 << 32, 1 << 32}, []uint64{16, 1 << 36}, []uint32{4, 1, 1}, 0
		}, "m.dims[2]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := valid()
			tt.edit(&d)
			err := d.Check("m")
			if tt.field == "" {
				if err != nil {
					t.Fatalf("Check = %v, want nil", err)
				}
				return
			}
			var fe *errdefs.FieldError
			if !errors.As(err, &fe) || fe.Field != tt.field {
				t.Fatalf("Check = %v, want an error naming %s", err, tt.field)
			}
			if !errors.Is(err, errdefs.ErrInvalidRequest) {
				t.Fatalf("Check = %v, want an invalid request", err)
			}
		})
	}
}

func TestTensorMapDescSizes(t *testing.T) {
	d := TensorMapDesc{DataType: TensorBF16, Dims: []uint64{100, 7, 3}, Strides: []uint64{208, 208 * 7}, Box: []uint32{64, 4, 2}}
	if err := d.Check("m"); err != nil {
		t.Fatal(err)
	}
	// The last element of the last row of the last plane ends at
	// 2*208*7 + 6*208 + 100*2 bytes.
	if got, want := d.Extent(), int64(2*208*7+6*208+200); got != want {
		t.Errorf("Extent = %d, want %d", got, want)
	}
	if got, want := d.BoxBytes(), 2*64*4*2; got != want {
		t.Errorf("BoxBytes = %d, want %d", got, want)
	}
}

// A tensor map lands on a 64-byte boundary of the parameter buffer, as the
// compiler lays out a CUtensorMap parameter, and alignments past 64 are
// refused.
func TestArgsTensorMapAlignment(t *testing.T) {
	var m TensorMap
	m[0], m[127] = 1, 2
	a := NewArgs().Uint32(7).TensorMap(&m).Uint32(9)
	if a.Err() != nil {
		t.Fatal(a.Err())
	}
	if a.offsets[1] != 64 || a.offsets[2] != 192 || a.data[64] != 1 || a.data[191] != 2 {
		t.Fatalf("offsets %v, map bytes %d and %d", a.offsets, a.data[64], a.data[191])
	}
	err := NewArgs().Bytes(m[:], 128).Err()
	if !errors.Is(err, errdefs.ErrInvalidRequest) || !strings.Contains(err.Error(), "64") {
		t.Fatalf("alignment 128: %v, want an invalid request", err)
	}
}
