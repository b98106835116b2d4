//go:build !cgo

package cuda

// Without cgo NVRTC never loads; NewCompiler returns ErrNoNVRTC.

func nvrtcOpen(string) (string, bool) {
	return "built without cgo (CGO_ENABLED=0): cannot dlopen libnvrtc", false
}

func nvrtcErrorName(nvrtcResult) string     { return "" }
func nvrtcVersion() (int, int, nvrtcResult) { return 0, 0, nvrtcNotLoaded }
func nvrtcHasCUBIN() bool                   { return false }
func nvrtcSupportedArchs() ([]int, bool)    { return nil, false }
func nvrtcCompile(*Source, []string, bool) (nvrtcOutput, string, nvrtcResult) {
	return nvrtcOutput{}, "nvrtcCreateProgram", nvrtcNotLoaded
}
