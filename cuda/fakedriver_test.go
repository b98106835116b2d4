package cuda

import (
	_ "embed"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// fakeDriverSource is a stand-in libcuda.so.1 (see its header) that makes
// the GPU tests meaningful on machines without a GPU: it checks that every
// call runs with the context current, that copies stay inside allocations
// and that kernel parameters arrive with the right layout.
//
//go:embed testdata/fakecuda/fakecuda.c
var fakeDriverSource []byte

// fakeSuiteEnv marks the test process that runs against the fake driver.
const fakeSuiteEnv = "KCAND_CUDA_FAKE_SUITE"

// TestFakeDriverRunsGPUSuite builds the fake driver with the C compiler cgo
// uses and runs every TestGPU* test against it in a child process, which
// must pass all of them.
func TestFakeDriverRunsGPUSuite(t *testing.T) {
	library := buildFakeDriver(t)
	out := runGPUTests(t, library, "^TestGPU")
	passed := requirePassed(t, out, func(name string) bool {
		return strings.Contains(out, "--- SKIP: "+name+" ") && strings.Contains(out, "no libnvrtc") // NVRTC may be missing
	})
	if !t.Failed() {
		t.Logf("%d GPU tests passed on the fake driver", passed)
	}
}

// TestFakeOldDriverLacksParamInfo poses as a CUDA 12.0 driver, which has no
// cuFuncGetParamInfo: the driver must still load and run graphs, and
// TestGPUFunctionParamInfo must find ParamInfo unsupported.
func TestFakeOldDriverLacksParamInfo(t *testing.T) {
	library := buildFakeDriver(t, "-DFAKECUDA_DRIVER_VERSION=12000")
	out := runGPUTests(t, library, "^TestGPU(FunctionParamInfo|GraphReplayMatchesEagerLaunches)$")
	if requirePassed(t, out, func(string) bool { return false }) != 2 || !strings.Contains(out, "CUDA 12.0 driver: unsupported: cuda driver has no cuFuncGetParamInfo") {
		t.Errorf("want both tests to pass, ParamInfo as unsupported:\n%s", out)
	}
}

// TestFakeOldDriverLacksTensorMaps poses as a CUDA 11.8 driver, which has
// no cuTensorMapEncodeTiled: the driver must still load, and encoding must
// be unsupported rather than fail or crash.
func TestFakeOldDriverLacksTensorMaps(t *testing.T) {
	library := buildFakeDriver(t, "-DFAKECUDA_DRIVER_VERSION=11080")
	out := runGPUTests(t, library, "^TestGPU(TensorMapEncodingFollowsTheDriver|MemoryRoundTrip)$")
	if requirePassed(t, out, func(string) bool { return false }) != 2 || !strings.Contains(out, "no cuTensorMapEncodeTiled") {
		t.Errorf("want both tests to pass, encoding as unsupported:\n%s", out)
	}
}

// buildFakeDriver compiles the fake libcuda.so.1 with the given extra
// compiler flags, or skips the test, saying why it cannot.
func buildFakeDriver(t *testing.T, flags ...string) string {
	t.Helper()
	if os.Getenv(fakeSuiteEnv) != "" || os.Getenv(DriverLibraryEnv) != "" {
		t.Skip("this process already runs against a chosen driver library")
	}
	if !haveCgo {
		t.Skip("built without cgo: no driver can be loaded")
	}
	if testing.Short() {
		t.Skip("-short: not building the fake driver")
	}
	compiler, err := exec.LookPath("gcc")
	if err != nil {
		t.Skipf("no C compiler to build the fake driver: %v", err)
	}
	dir := t.TempDir()
	source, library := filepath.Join(dir, "fakecuda.c"), filepath.Join(dir, "libcuda.so.1")
	if err := os.WriteFile(source, fakeDriverSource, 0o644); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"-shared", "-fPIC", "-O1"}, flags...)
	args = append(args, "-o", library, source, "-lpthread")
	if out, err := exec.Command(compiler, args...).CombinedOutput(); err != nil {
		t.Fatalf("build the fake driver: %v\n%s", err, out)
	}
	return library
}

// runGPUTests runs the tests matching pattern in a child process against
// library and returns their verbose output; the child must succeed.
func runGPUTests(t *testing.T, library, pattern string) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-test.run="+pattern, "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), DriverLibraryEnv+"="+library, fakeSuiteEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("GPU tests on the fake driver: %v\n%s", err, out)
	}
	return string(out)
}

// requirePassed checks that every top-level test that started in out
// passed, or may skip, and returns how many started.
func requirePassed(t *testing.T, out string, maySkip func(name string) bool) int {
	t.Helper()
	started := regexp.MustCompile(`(?m)^=== RUN   (TestGPU\w+)$`).FindAllStringSubmatch(out, -1)
	if len(started) == 0 {
		t.Fatalf("no GPU test ran:\n%s", out)
	}
	for _, m := range started {
		if name := m[1]; !strings.Contains(out, "--- PASS: "+name+" ") && !maySkip(name) {
			t.Errorf("%s did not pass on the fake driver", name)
		}
	}
	if t.Failed() {
		t.Logf("output:\n%s", out)
	}
	return len(started)
}
