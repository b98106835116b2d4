package cuda

import (
	"fmt"

	"github.com/kcand/kcand/sdk/errdefs"
)

// deviceAttribute is a CUdevice_attribute.
type deviceAttribute int

// The device attributes kcand reads (values from cuda.h).
const (
	attrMaxThreadsPerBlock           deviceAttribute = 1   // CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK
	attrMaxBlockDimX                 deviceAttribute = 2   // CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X
	attrMaxBlockDimY                 deviceAttribute = 3   // CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y
	attrMaxBlockDimZ                 deviceAttribute = 4   // CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z
	attrMaxGridDimX                  deviceAttribute = 5   // CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X
	attrMaxGridDimY                  deviceAttribute = 6   // CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y
	attrMaxGridDimZ                  deviceAttribute = 7   // CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z
	attrMaxSharedMemoryPerBlock      deviceAttribute = 8   // CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK
	attrWarpSize                     deviceAttribute = 10  // CU_DEVICE_ATTRIBUTE_WARP_SIZE
	attrMultiprocessorCount          deviceAttribute = 16  // CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
	attrPCIBusID                     deviceAttribute = 33  // CU_DEVICE_ATTRIBUTE_PCI_BUS_ID
	attrPCIDeviceID                  deviceAttribute = 34  // CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID
	attrL2CacheSize                  deviceAttribute = 38  // CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE
	attrMaxThreadsPerMultiprocessor  deviceAttribute = 39  // CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR
	attrPCIDomainID                  deviceAttribute = 50  // CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID
	attrComputeCapabilityMajor       deviceAttribute = 75  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
	attrComputeCapabilityMinor       deviceAttribute = 76  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR
	attrMaxSharedMemoryPerSM         deviceAttribute = 81  // CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR
	attrMaxRegistersPerSM            deviceAttribute = 82  // CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR
	attrMaxSharedMemoryPerBlockOptin deviceAttribute = 97  // CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
	attrMaxBlocksPerSM               deviceAttribute = 106 // CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR
)

// ComputeCapability is a GPU's architecture version, 9.0 for Hopper.
type ComputeCapability struct {
	Major, Minor int
}

// String formats the capability as "9.0".
func (c ComputeCapability) String() string { return fmt.Sprintf("%d.%d", c.Major, c.Minor) }

// Target is the NVRTC target for this capability; archSpecific asks for the
// "a" variant (sm_90a) whose instructions (wgmma, setmaxnreg) run on this
// exact architecture only.
func (c ComputeCapability) Target(archSpecific bool) Target {
	return Target{Major: c.Major, Minor: c.Minor, ArchSpecific: archSpecific}
}

// DeviceInfo describes one GPU: enough for device.Profile, admission and
// launch-plan validation.
type DeviceInfo struct {
	Ordinal           int
	Name              string
	UUID              string // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as nvidia-smi prints it
	PCIBusID          string // "0000:17:00.0"
	ComputeCapability ComputeCapability
	Multiprocessors   int
	MemoryBytes       int64
	L2CacheBytes      int64
	// DriverVersion is cuDriverGetVersion's value: 13000 for CUDA 13.0.
	DriverVersion int

	WarpSize                    int
	MaxThreadsPerBlock          int
	MaxBlockDim                 [3]int
	MaxGridDim                  [3]int
	MaxThreadsPerMultiprocessor int
	MaxBlocksPerMultiprocessor  int
	RegistersPerMultiprocessor  int
	// SharedMemoryPerBlock is the default limit (48 KB); a kernel may use up
	// to SharedMemoryPerBlockOptin after raising its own limit, which
	// Function.Launch does when asked for more.
	SharedMemoryPerBlock          int
	SharedMemoryPerBlockOptin     int
	SharedMemoryPerMultiprocessor int
}

// DriverVersionString formats the driver's CUDA version as "13.0".
func (i DeviceInfo) DriverVersionString() string { return formatDriverVersion(i.DriverVersion) }

func formatDriverVersion(v int) string { return fmt.Sprintf("%d.%d", v/1000, v%1000/10) }

// DriverVersion returns the CUDA version of the installed driver, such as
// 13000 for CUDA 13.0.
func DriverVersion() (int, error) {
	if err := Init(); err != nil {
		return 0, err
	}
	v, r := cuDriverGetVersion()
	return v, check("cuDriverGetVersion", r)
}

// DeviceCount returns the number of GPUs the driver sees.
func DeviceCount() (int, error) {
	if err := Init(); err != nil {
		return 0, err
	}
	n, r := cuDeviceGetCount()
	return n, check("cuDeviceGetCount", r)
}

// Describe queries the GPU with the given ordinal. It needs no context.
func Describe(ordinal int) (DeviceInfo, error) {
	dev, err := deviceByOrdinal(ordinal)
	if err != nil {
		return DeviceInfo{}, err
	}
	return describe(ordinal, dev)
}

// deviceByOrdinal checks ordinal against the device count and returns the
// driver's handle for it.
func deviceByOrdinal(ordinal int) (cuDevice, error) {
	count, err := DeviceCount()
	if err != nil {
		return 0, err
	}
	if ordinal < 0 || ordinal >= count {
		return 0, errdefs.Invalid("ordinal", ordinal, "have %d CUDA devices", count)
	}
	dev, r := cuDeviceGet(ordinal)
	return dev, check("cuDeviceGet", r)
}

func describe(ordinal int, dev cuDevice) (DeviceInfo, error) {
	info := DeviceInfo{Ordinal: ordinal}
	var r Result
	if info.Name, r = cuDeviceGetName(dev); r != ResultSuccess {
		return info, check("cuDeviceGetName", r)
	}
	uuid, r := cuDeviceGetUuid(dev)
	if r != ResultSuccess {
		return info, check("cuDeviceGetUuid_v2", r)
	}
	info.UUID = formatUUID(uuid)
	if info.MemoryBytes, r = cuDeviceTotalMem(dev); r != ResultSuccess {
		return info, check("cuDeviceTotalMem_v2", r)
	}
	if info.DriverVersion, r = cuDriverGetVersion(); r != ResultSuccess {
		return info, check("cuDriverGetVersion", r)
	}
	var l2, domain, bus, slot int
	attributes := []struct {
		attribute deviceAttribute
		into      *int
	}{
		{attrComputeCapabilityMajor, &info.ComputeCapability.Major},
		{attrComputeCapabilityMinor, &info.ComputeCapability.Minor},
		{attrMultiprocessorCount, &info.Multiprocessors},
		{attrL2CacheSize, &l2},
		{attrWarpSize, &info.WarpSize},
		{attrMaxThreadsPerBlock, &info.MaxThreadsPerBlock},
		{attrMaxBlockDimX, &info.MaxBlockDim[0]},
		{attrMaxBlockDimY, &info.MaxBlockDim[1]},
		{attrMaxBlockDimZ, &info.MaxBlockDim[2]},
		{attrMaxGridDimX, &info.MaxGridDim[0]},
		{attrMaxGridDimY, &info.MaxGridDim[1]},
		{attrMaxGridDimZ, &info.MaxGridDim[2]},
		{attrMaxThreadsPerMultiprocessor, &info.MaxThreadsPerMultiprocessor},
		{attrMaxBlocksPerSM, &info.MaxBlocksPerMultiprocessor},
		{attrMaxRegistersPerSM, &info.RegistersPerMultiprocessor},
		{attrMaxSharedMemoryPerBlock, &info.SharedMemoryPerBlock},
		{attrMaxSharedMemoryPerBlockOptin, &info.SharedMemoryPerBlockOptin},
		{attrMaxSharedMemoryPerSM, &info.SharedMemoryPerMultiprocessor},
		{attrPCIDomainID, &domain},
		{attrPCIBusID, &bus},
		{attrPCIDeviceID, &slot},
	}
	for _, a := range attributes {
		if *a.into, r = cuDeviceGetAttribute(a.attribute, dev); r != ResultSuccess {
			return info, &Error{Op: "cuDeviceGetAttribute", Code: r, Detail: fmt.Sprintf("attribute %d", a.attribute)}
		}
	}
	info.L2CacheBytes = int64(l2)
	info.PCIBusID = fmt.Sprintf("%04x:%02x:%02x.0", domain, bus, slot)
	return info, nil
}

// formatUUID prints a CUuuid the way nvidia-smi does.
func formatUUID(u [16]byte) string {
	return fmt.Sprintf("GPU-%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}
