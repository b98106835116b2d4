package host

import (
	"os"
	"path/filepath"
)

// MPSStatus says whether processes on this machine share the GPU through
// NVIDIA MPS: faster cross-process round trips, but a fatal fault in any
// client reaches every client (DESIGN.md, "Isolation versus speed").
func MPSStatus() string {
	if MPSRunning() {
		return "running (pipe " + mpsPipeDir() + "): remote round trips are fast, but a faulting plugin kernel reaches every client"
	}
	return "not running: each process has its own GPU context (isolated; remote round trips pay a context switch)"
}

// MPSRunning reports whether an MPS control daemon answers on the pipe
// directory this process would use.
func MPSRunning() bool {
	_, err := os.Stat(filepath.Join(mpsPipeDir(), "control"))
	return err == nil
}

func mpsPipeDir() string {
	if dir := os.Getenv("CUDA_MPS_PIPE_DIRECTORY"); dir != "" {
		return dir
	}
	return "/tmp/nvidia-mps"
}
