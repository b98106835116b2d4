package cuda

import (
	"errors"
	"fmt"
	"testing"

	"github.com/kcand/kcand/sdk/errdefs"
)

func TestCheck(t *testing.T) {
	if err := check("cuMemAlloc_v2", ResultSuccess); err != nil {
		t.Fatalf("success became %v", err)
	}
	err := fmt.Errorf("alloc 1024 bytes: %w", check("cuMemAlloc_v2", ResultOutOfMemory))
	if got, want := err.Error(), "alloc 1024 bytes: cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY"; got != want {
		t.Fatalf("message %q, want %q", got, want)
	}
	if !errors.Is(err, ResultOutOfMemory) || errors.Is(err, ResultInvalidValue) {
		t.Fatal("errors.Is should match the CUresult and only it")
	}
	var cudaErr *Error
	if !errors.As(err, &cudaErr) || cudaErr.Op != "cuMemAlloc_v2" || cudaErr.Code != ResultOutOfMemory {
		t.Fatalf("errors.As found %+v", cudaErr)
	}
}

func TestErrorDetailAndUnknownCode(t *testing.T) {
	err := &Error{Op: "cuModuleLoadDataEx", Code: ResultInvalidPTX, Detail: "ptxas fatal: bad"}
	if got, want := err.Error(), "cuModuleLoadDataEx: CUDA_ERROR_INVALID_PTX: ptxas fatal: bad"; got != want {
		t.Fatalf("message %q, want %q", got, want)
	}
	if name := Result(123456).Name(); name != "CUresult(123456)" {
		t.Fatalf("unknown code named %q", name)
	}
}

// TestMissingEntryPointIsUnsupported: an optional driver entry point that
// the driver lacks is errdefs.ErrUnsupported, naming the call; its other
// results are driver errors as usual.
func TestMissingEntryPointIsUnsupported(t *testing.T) {
	err := checkOptional("cuFuncGetParamInfo", "12.4", resultMissingSymbol)
	if !errors.Is(err, errdefs.ErrUnsupported) || errdefs.Class(err) != errdefs.ErrUnsupported {
		t.Fatalf("%v should be errdefs.ErrUnsupported", err)
	}
	if got, want := err.Error(), "unsupported: cuda driver has no cuFuncGetParamInfo (added in CUDA 12.4)"; got != want {
		t.Fatalf("message %q, want %q", got, want)
	}
	if err := checkOptional("cuGraphLaunch", "10.0", ResultSuccess); err != nil {
		t.Fatalf("success became %v", err)
	}
	if err := checkOptional("cuGraphLaunch", "10.0", ResultInvalidHandle); !errors.Is(err, ResultInvalidHandle) || errors.Is(err, errdefs.ErrUnsupported) {
		t.Fatalf("a driver error became %v", err)
	}
}

func TestUnavailableErrorsAreUnsupported(t *testing.T) {
	for _, sentinel := range []error{ErrNoDriver, ErrNoNVRTC} {
		wrapped := fmt.Errorf("%w: dlopen libcuda.so.1: not found", sentinel)
		if !errors.Is(wrapped, sentinel) || !errors.Is(wrapped, errdefs.ErrUnsupported) || errdefs.Class(wrapped) != errdefs.ErrUnsupported {
			t.Fatalf("%v should be itself and errdefs.ErrUnsupported", wrapped)
		}
	}
	if errors.Is(ErrNoDriver, ErrNoNVRTC) {
		t.Fatal("the two sentinels must differ")
	}
}
