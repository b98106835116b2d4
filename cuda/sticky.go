package cuda

import "errors"

// stickyResults are the errors after which a CUDA context is unusable:
// every later call in the process fails, and only a new process recovers.
var stickyResults = map[Result]bool{
	700: true, // CUDA_ERROR_ILLEGAL_ADDRESS
	702: true, // CUDA_ERROR_LAUNCH_TIMEOUT
	714: true, // CUDA_ERROR_HARDWARE_STACK_ERROR
	715: true, // CUDA_ERROR_ILLEGAL_INSTRUCTION
	716: true, // CUDA_ERROR_MISALIGNED_ADDRESS
	717: true, // CUDA_ERROR_INVALID_ADDRESS_SPACE
	718: true, // CUDA_ERROR_INVALID_PC
	719: true, // CUDA_ERROR_LAUNCH_FAILED
}

// IsContextLost reports whether err is a sticky CUDA error: a kernel fault
// that leaves the process's context unusable.
func IsContextLost(err error) bool {
	var r Result
	return errors.As(err, &r) && stickyResults[r]
}
