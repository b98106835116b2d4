package host

import (
	"github.com/kcand/kcand/cuda"
	"github.com/kcand/kcand/sdk/device"
)

// openCUDA opens GPU 0. Without a driver the error wraps cuda.ErrNoDriver.
func openCUDA() (device.Device, error) { return cuda.OpenDevice(0) }

// wantsCUDA reports whether the host will try a CUDA device: asked for by
// name, or "auto" on a machine whose driver reports a GPU.
func wantsCUDA(kind string) bool {
	switch kind {
	case string(device.CUDA):
		return true
	case "", "auto":
		n, err := cuda.DeviceCount()
		return err == nil && n > 0
	}
	return false
}

// launcherFor returns the launcher of a device that can launch exported
// kernels, or nil.
func launcherFor(dev device.Device) launcher {
	if d, ok := dev.(*cuda.Device); ok {
		return newCUDALauncher(d)
	}
	return nil
}
