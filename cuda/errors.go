package cuda

import (
	"errors"
	"fmt"

	"github.com/kcand/kcand/sdk/errdefs"
)

// Result is a CUresult, the status code of every CUDA driver call. It is an
// error so that errors.Is(err, cuda.ResultOutOfMemory) finds the code inside
// an *Error however deeply it is wrapped.
type Result int

// The driver codes callers commonly test for (values from cuda.h).
const (
	ResultSuccess                  Result = 0   // CUDA_SUCCESS
	ResultInvalidValue             Result = 1   // CUDA_ERROR_INVALID_VALUE
	ResultOutOfMemory              Result = 2   // CUDA_ERROR_OUT_OF_MEMORY
	ResultNotInitialized           Result = 3   // CUDA_ERROR_NOT_INITIALIZED
	ResultNoDevice                 Result = 100 // CUDA_ERROR_NO_DEVICE
	ResultInvalidDevice            Result = 101 // CUDA_ERROR_INVALID_DEVICE
	ResultInvalidImage             Result = 200 // CUDA_ERROR_INVALID_IMAGE
	ResultInvalidContext           Result = 201 // CUDA_ERROR_INVALID_CONTEXT
	ResultNoBinaryForGPU           Result = 209 // CUDA_ERROR_NO_BINARY_FOR_GPU
	ResultInvalidPTX               Result = 218 // CUDA_ERROR_INVALID_PTX
	ResultUnsupportedPTXVersion    Result = 222 // CUDA_ERROR_UNSUPPORTED_PTX_VERSION
	ResultInvalidHandle            Result = 400 // CUDA_ERROR_INVALID_HANDLE
	ResultIllegalState             Result = 401 // CUDA_ERROR_ILLEGAL_STATE
	ResultNotFound                 Result = 500 // CUDA_ERROR_NOT_FOUND
	ResultNotReady                 Result = 600 // CUDA_ERROR_NOT_READY
	ResultIllegalAddress           Result = 700 // CUDA_ERROR_ILLEGAL_ADDRESS
	ResultLaunchOutOfResources     Result = 701 // CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES
	ResultLaunchFailed             Result = 719 // CUDA_ERROR_LAUNCH_FAILED
	ResultNotSupported             Result = 801 // CUDA_ERROR_NOT_SUPPORTED
	ResultStreamCaptureUnsupported Result = 900 // CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
	ResultStreamCaptureInvalidated Result = 901 // CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
	ResultStreamCaptureWrongThread Result = 908 // CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD
)

// knownResultNames names codes when the driver cannot (it is not loaded).
var knownResultNames = map[Result]string{
	ResultSuccess:                  "CUDA_SUCCESS",
	ResultInvalidValue:             "CUDA_ERROR_INVALID_VALUE",
	ResultOutOfMemory:              "CUDA_ERROR_OUT_OF_MEMORY",
	ResultNotInitialized:           "CUDA_ERROR_NOT_INITIALIZED",
	ResultNoDevice:                 "CUDA_ERROR_NO_DEVICE",
	ResultInvalidDevice:            "CUDA_ERROR_INVALID_DEVICE",
	ResultInvalidImage:             "CUDA_ERROR_INVALID_IMAGE",
	ResultInvalidContext:           "CUDA_ERROR_INVALID_CONTEXT",
	ResultNoBinaryForGPU:           "CUDA_ERROR_NO_BINARY_FOR_GPU",
	ResultInvalidPTX:               "CUDA_ERROR_INVALID_PTX",
	ResultUnsupportedPTXVersion:    "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
	ResultInvalidHandle:            "CUDA_ERROR_INVALID_HANDLE",
	ResultIllegalState:             "CUDA_ERROR_ILLEGAL_STATE",
	ResultNotFound:                 "CUDA_ERROR_NOT_FOUND",
	ResultNotReady:                 "CUDA_ERROR_NOT_READY",
	ResultIllegalAddress:           "CUDA_ERROR_ILLEGAL_ADDRESS",
	ResultLaunchOutOfResources:     "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
	ResultLaunchFailed:             "CUDA_ERROR_LAUNCH_FAILED",
	ResultNotSupported:             "CUDA_ERROR_NOT_SUPPORTED",
	ResultStreamCaptureUnsupported: "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
	ResultStreamCaptureInvalidated: "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
	ResultStreamCaptureWrongThread: "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD",
}

// Name is the driver's name for the code (cuGetErrorName), such as
// CUDA_ERROR_OUT_OF_MEMORY.
func (r Result) Name() string {
	if name := driverErrorName(r); name != "" {
		return name
	}
	if name, ok := knownResultNames[r]; ok {
		return name
	}
	return fmt.Sprintf("CUresult(%d)", int(r))
}

// Error implements error.
func (r Result) Error() string { return r.Name() }

// Error is a failed driver call: the operation and the CUDA result.
type Error struct {
	// Op names the driver call, e.g. "cuMemAlloc_v2".
	Op string
	// Code is the CUresult the call returned.
	Code Result
	// Detail holds extra text from the driver, such as a JIT error log.
	Detail string
}

// Error implements error.
func (e *Error) Error() string {
	msg := fmt.Sprintf("%s: %s", e.Op, e.Code.Name())
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	return msg
}

// Unwrap exposes the Result so errors.Is can match it.
func (e *Error) Unwrap() error { return e.Code }

// check turns a driver status into an error: nil on success.
func check(op string, r Result) error {
	if r == ResultSuccess {
		return nil
	}
	return &Error{Op: op, Code: r}
}

// checkOptional is check for an entry point that older drivers lack: there
// the error names the call and the CUDA version that added it, and wraps
// errdefs.ErrUnsupported rather than a Result.
func checkOptional(op, since string, r Result) error {
	if r == resultMissingSymbol {
		return errdefs.Unsupported("cuda driver has no %s (added in CUDA %s)", op, since)
	}
	return check(op, r)
}

// unavailableError is a library that cannot be used: missing, too old, or
// without a device. It is errdefs.ErrUnsupported so that the class survives
// the plugin wire.
type unavailableError struct{ what string }

// Error implements error.
func (e *unavailableError) Error() string { return "no " + e.what }

// Is makes every unavailable library an errdefs.ErrUnsupported.
func (e *unavailableError) Is(target error) bool { return target == errdefs.ErrUnsupported }

// ErrNoDriver says no usable CUDA driver is present: libcuda.so.1 cannot be
// loaded, lacks an entry point, or cuInit fails (no GPU). Test with errors.Is.
var ErrNoDriver error = &unavailableError{what: "cuda driver"}

// ErrNoNVRTC says libnvrtc cannot be loaded. Test with errors.Is.
var ErrNoNVRTC error = &unavailableError{what: "nvrtc library"}

// ErrClosed reports use of a Context, Device or resource after Close.
var ErrClosed = errors.New("cuda: use after close")
