package cuda

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kcand/kcand/sdk/errdefs"
)

// These tests need libnvrtc but no GPU; without it each skips, saying why.

// requireCompiler loads NVRTC or skips the test.
func requireCompiler(t *testing.T, opts ...CompilerOption) *Compiler {
	t.Helper()
	c, err := NewCompiler(opts...)
	if errors.Is(err, ErrNoNVRTC) {
		t.Skipf("no libnvrtc: %v", err)
	}
	if err != nil {
		t.Fatalf("NewCompiler: %v", err)
	}
	return c
}

var elfMagic = []byte("\x7fELF")

func TestCompileCUBIN(t *testing.T) {
	c := requireCompiler(t, WithoutKernelCache())
	t.Logf("NVRTC %s from %s knows %v", c.Version(), c.Library(), c.SupportedArchitectures())
	for _, target := range []Target{{Major: 8, Minor: 0}, {Major: 9, Minor: 0}} {
		t.Run(target.String(), func(t *testing.T) {
			if archs := c.SupportedArchitectures(); archs != nil && !slices.Contains(archs, target.Major*10+target.Minor) {
				t.Skipf("NVRTC %s does not know %s", c.Version(), target)
			}
			k, err := c.Compile(Source{
				Name:            "kernels.cu",
				Code:            testKernelSource,
				Options:         []string{"--use_fast_math", "--std=c++14"},
				NameExpressions: []string{"kcand_scale<float>", "kcand_fill"},
			}, target)
			if err != nil {
				t.Fatal(err)
			}
			if k.Format != FormatCUBIN || k.Arch != target.String() || !bytes.HasPrefix(k.Image, elfMagic) {
				t.Fatalf("got %s for %s starting %q, want an ELF cubin", k.Format, k.Arch, k.Image[:min(4, len(k.Image))])
			}
			if k.CacheHit {
				t.Fatal("cache hit with the cache disabled")
			}
			if lowered := k.LoweredName("kcand_scale<float>"); !strings.HasPrefix(lowered, "_Z") || !strings.Contains(lowered, "kcand_scale") {
				t.Fatalf("lowered name %q is not a mangled kcand_scale", lowered)
			}
			if lowered := k.LoweredName("kcand_fill"); lowered != "kcand_fill" {
				t.Fatalf("extern C name lowered to %q", lowered)
			}
		})
	}
}

func TestCompileErrorReturnsLog(t *testing.T) {
	c := requireCompiler(t, WithoutKernelCache())
	_, err := c.Compile(Source{Name: "broken.cu", Code: `extern "C" __global__ void broken(int *p) { p[0] = undeclared_name; }`}, Target{Major: 8, Minor: 0})
	var compileErr *CompileError
	if !errors.As(err, &compileErr) {
		t.Fatalf("got %v, want a *CompileError", err)
	}
	if !strings.Contains(compileErr.Log, "undeclared_name") || !strings.Contains(err.Error(), "undeclared_name") {
		t.Fatalf("the log should name the undeclared identifier, error:\n%v", err)
	}
	if compileErr.Name != "NVRTC_ERROR_COMPILATION" || !strings.HasPrefix(err.Error(), "nvrtc compile broken.cu for sm_80") {
		t.Fatalf("error %q (%s) should name the program, arch and NVRTC error", err, compileErr.Name)
	}
}

func TestKernelCacheHitOnSecondCompile(t *testing.T) {
	dir := t.TempDir()
	src := Source{Name: "kernels.cu", Code: testKernelSource, NameExpressions: []string{"kcand_scale<float>"}}
	target := Target{Major: 8, Minor: 0}

	first, err := requireCompiler(t, WithKernelCacheDir(dir)).Compile(src, target)
	if err != nil {
		t.Fatal(err)
	}
	if first.CacheHit || first.CacheError != nil {
		t.Fatalf("first compile: hit=%v, store error %v; want a stored miss", first.CacheHit, first.CacheError)
	}
	// A new Compiler stands for the plugin's second start.
	second, err := requireCompiler(t, WithKernelCacheDir(dir)).Compile(src, target)
	if err != nil {
		t.Fatal(err)
	}
	if !second.CacheHit || !bytes.Equal(second.Image, first.Image) || second.Key != first.Key ||
		second.LoweredName("kcand_scale<float>") != first.LoweredName("kcand_scale<float>") {
		t.Fatalf("second compile: hit=%v, same image %v; want an identical hit", second.CacheHit, bytes.Equal(second.Image, first.Image))
	}
	// Any change to what shapes the image is a miss.
	src.Options = []string{"-DTILE=64"}
	third, err := requireCompiler(t, WithKernelCacheDir(dir)).Compile(src, target)
	if err != nil {
		t.Fatal(err)
	}
	if third.CacheHit || third.Key == first.Key {
		t.Fatal("a new option hit the old entry")
	}
	entries, _ := filepath.Glob(filepath.Join(dir, "*"))
	for _, e := range entries {
		if strings.HasSuffix(e, ".tmp") {
			t.Fatalf("temporary file %s left behind", e)
		}
	}
}

func TestCorruptCacheEntryIsAMiss(t *testing.T) {
	dir := t.TempDir()
	c := requireCompiler(t, WithKernelCacheDir(dir))
	src := Source{Name: "kernels.cu", Code: testKernelSource}
	k, err := c.Compile(src, Target{Major: 8, Minor: 0})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, k.Key+".json"), []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	again, err := c.Compile(src, Target{Major: 8, Minor: 0})
	if err != nil {
		t.Fatal(err)
	}
	if again.CacheHit || !bytes.Equal(again.Image, k.Image) {
		t.Fatal("a corrupt entry should be recompiled and replaced")
	}
	if hit, err := c.Compile(src, Target{Major: 8, Minor: 0}); err != nil || !hit.CacheHit {
		t.Fatalf("the replaced entry should hit: %v", err)
	}
}

// TestCompileFallsBackToPTX asks for an architecture newer than any NVRTC
// knows: the result is PTX for the newest one it does know.
func TestCompileFallsBackToPTX(t *testing.T) {
	c := requireCompiler(t, WithoutKernelCache())
	if c.SupportedArchitectures() == nil {
		t.Skip("this NVRTC cannot list its architectures")
	}
	k, err := c.Compile(Source{Code: testKernelSource}, Target{Major: 99, Minor: 0})
	if err != nil {
		t.Fatal(err)
	}
	if k.Format != FormatPTX || !strings.HasPrefix(k.Arch, "compute_") || !bytes.Contains(k.Image, []byte(".entry kcand_fill")) {
		t.Fatalf("got %s for %s, want PTX with kcand_fill", k.Format, k.Arch)
	}
	if bytes.IndexByte(k.Image, 0) >= 0 {
		t.Fatal("PTX text contains a NUL")
	}
}

func TestArchSpecificTarget(t *testing.T) {
	c := requireCompiler(t, WithoutKernelCache())
	k, err := c.Compile(Source{Code: testKernelSource}, Target{Major: 9, Minor: 0, ArchSpecific: true})
	if strings.HasPrefix(c.Version(), "11.") {
		if !errors.Is(err, errdefs.ErrUnsupported) {
			t.Fatalf("NVRTC %s compiling sm_90a: %v, want unsupported", c.Version(), err)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if k.Arch != "sm_90a" || !bytes.HasPrefix(k.Image, elfMagic) {
		t.Fatalf("got %s %s, want an sm_90a cubin", k.Format, k.Arch)
	}
}

// TestCompileRejectsBadInput needs no NVRTC: input is checked first.
func TestCompileRejectsBadInput(t *testing.T) {
	c := &Compiler{}
	tests := []struct {
		name   string
		src    Source
		target Target
	}{
		{"empty source", Source{Code: "  "}, Target{Major: 8}},
		{"arch option", Source{Code: testKernelSource, Options: []string{"-arch=sm_70"}}, Target{Major: 8}},
		{"long arch option", Source{Code: testKernelSource, Options: []string{"--gpu-architecture=sm_70"}}, Target{Major: 8}},
		{"no target", Source{Code: testKernelSource}, Target{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := c.Compile(tt.src, tt.target); !errors.Is(err, errdefs.ErrInvalidRequest) {
				t.Fatalf("got %v, want an invalid request", err)
			}
		})
	}
}
