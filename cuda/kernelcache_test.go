package cuda

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func TestKernelCacheKeyCoversEveryInput(t *testing.T) {
	base := Source{Name: "a.cu", Code: "code", Headers: map[string]string{"h.cuh": "x"}, NameExpressions: []string{"f<int>"}}
	key := func(src Source, options []string, arch, version string) string {
		return kernelCacheKey(&src, options, arch, version)
	}
	reference := key(base, []string{"-O3"}, "sm_90", "13.0")
	if reference != key(base, []string{"-O3"}, "sm_90", "13.0") {
		t.Fatal("the key is not deterministic")
	}
	changed := func(mutate func(*Source)) Source {
		s := base
		s.Headers = map[string]string{"h.cuh": "x"}
		mutate(&s)
		return s
	}
	variants := map[string]string{
		"code":            key(changed(func(s *Source) { s.Code = "code2" }), []string{"-O3"}, "sm_90", "13.0"),
		"name":            key(changed(func(s *Source) { s.Name = "b.cu" }), []string{"-O3"}, "sm_90", "13.0"),
		"header":          key(changed(func(s *Source) { s.Headers["h.cuh"] = "y" }), []string{"-O3"}, "sm_90", "13.0"),
		"name expression": key(changed(func(s *Source) { s.NameExpressions = []string{"f<float>"} }), []string{"-O3"}, "sm_90", "13.0"),
		"option":          key(base, []string{"-O2"}, "sm_90", "13.0"),
		"arch":            key(base, []string{"-O3"}, "sm_90a", "13.0"),
		"nvrtc":           key(base, []string{"-O3"}, "sm_90", "12.8"),
		// Moving bytes between fields must not collide.
		"shifted": key(base, []string{"-O", "3"}, "sm_90", "13.0"),
	}
	for what, k := range variants {
		if k == reference {
			t.Errorf("changing the %s kept the key", what)
		}
	}
}

func TestKernelCacheStoreLoad(t *testing.T) {
	c := &kernelCache{dir: filepath.Join(t.TempDir(), "nested", "kernels")}
	k := &Kernel{Image: []byte("\x7fELF..."), Format: FormatCUBIN, Arch: "sm_90", NVRTCVersion: "13.0", Key: "abc",
		LoweredNames: map[string]string{"f<int>": "_Z1fIiEvv"}, Log: "warning"}
	if _, ok := c.load("abc"); ok {
		t.Fatal("hit in an empty cache")
	}
	if err := c.store(k); err != nil {
		t.Fatal(err)
	}
	got, ok := c.load("abc")
	if !ok || !bytes.Equal(got.Image, k.Image) || got.Format != k.Format || got.Arch != k.Arch ||
		got.LoweredName("f<int>") != "_Z1fIiEvv" || got.Log != "warning" || got.NVRTCVersion != "13.0" {
		t.Fatalf("loaded %+v, %v", got, ok)
	}
	// An entry stored under another key (a renamed file) is not trusted.
	if err := os.Rename(c.path("abc"), c.path("def")); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.load("def"); ok {
		t.Fatal("an entry whose key does not match its name was used")
	}
}

func TestDefaultKernelCacheDir(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", "/tmp/xdg-cache")
	dir, err := defaultKernelCacheDir()
	if err != nil || dir != "/tmp/xdg-cache/kcand/kernels" {
		t.Fatalf("got %q, %v", dir, err)
	}
	t.Setenv("XDG_CACHE_HOME", "")
	t.Setenv("HOME", "/home/someone")
	if dir, err := defaultKernelCacheDir(); err != nil || dir != "/home/someone/.cache/kcand/kernels" {
		t.Fatalf("got %q, %v", dir, err)
	}
}
