package cuda

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/kcand/kcand/sdk/errdefs"
)

func TestDriverLibraryCandidates(t *testing.T) {
	tests := []struct {
		name, explicit, env string
		want                []string
	}{
		{"explicit wins", "/opt/libcuda.so.1", "/env/libcuda.so.1", []string{"/opt/libcuda.so.1"}},
		{"environment", "", "/env/libcuda.so.1", []string{"/env/libcuda.so.1"}},
		{"search", "", "", defaultDriverLibraries},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := driverLibraryCandidates(tt.explicit, tt.env); !slices.Equal(got, tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
		})
	}
	if defaultDriverLibraries[0] != "libcuda.so.1" {
		t.Fatal("the loader's own search must come first")
	}
}

// TestNewDeviceWithoutDriver runs where no GPU is usable: every entry point
// must fail cleanly with ErrNoDriver, never panic or exit.
func TestNewDeviceWithoutDriver(t *testing.T) {
	d, err := NewDevice(0)
	if err == nil {
		d.Close()
		t.Skip("a CUDA driver and GPU are present; this test covers machines without them")
	}
	if !errors.Is(err, ErrNoDriver) || errdefs.Class(err) != errdefs.ErrUnsupported {
		t.Fatalf("NewDevice(0) = %v, want ErrNoDriver", err)
	}
	t.Logf("NewDevice(0): %v", err)
	if _, err := OpenDevice(0); !errors.Is(err, ErrNoDriver) {
		t.Fatalf("OpenDevice(0) = %v, want ErrNoDriver", err)
	}
	if _, err := DeviceCount(); !errors.Is(err, ErrNoDriver) {
		t.Fatalf("DeviceCount = %v, want ErrNoDriver", err)
	}
	if _, err := NewContext(0); !errors.Is(err, ErrNoDriver) {
		t.Fatalf("NewContext = %v, want ErrNoDriver", err)
	}
}

// TestInitNamesMissingLibrary points Init at a library that does not exist.
func TestInitNamesMissingLibrary(t *testing.T) {
	if loader.loaded.Load() {
		t.Skip("the driver is already loaded; Init ignores later paths")
	}
	err := Init(WithDriverLibrary("/nonexistent/libcuda.so.1"))
	if !errors.Is(err, ErrNoDriver) || !strings.Contains(err.Error(), "/nonexistent/libcuda.so.1") {
		t.Fatalf("Init = %v, want ErrNoDriver naming the path", err)
	}
}
