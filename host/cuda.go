package host

import (
	"github.com/kcand/kcand/cuda"
	"github.com/kcand/kcand/sdk/device"
)

// openCUDA opens GPU 0. Without a driver the error wraps cuda.ErrNoDriver.
func openCUDA() (device.Device, error) { return cuda.OpenDevice(0) }

// launcherFor returns the launcher of a device that can launch exported
// kernels, or nil.
func launcherFor(dev device.Device) launcher {
	if d, ok := dev.(*cuda.Device); ok {
		return newCUDALauncher(d)
	}
	return nil
}
