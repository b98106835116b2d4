package host

import (
	"os"
	"path/filepath"
)

// MPSStatus says whether processes on this machine share the GPU through
// NVIDIA MPS: faster cross-process round trips, but a fatal fault in any
// client reaches every client (DESIGN.md, "Isolation versus speed").
func MPSStatus() string {
	dir := os.Getenv("CUDA_MPS_PIPE_DIRECTORY")
	if dir == "" {
		dir = "/tmp/nvidia-mps"
	}
	if _, err := os.Stat(filepath.Join(dir, "control")); err == nil {
		return "running (pipe " + dir + "): remote round trips are fast, but a faulting plugin kernel reaches every client"
	}
	return "not running: each process has its own GPU context (isolated; remote round trips pay a context switch)"
}
