//go:build !cgo

package cuda

// Without cgo there is no dlopen: the driver never loads, Init returns
// ErrNoDriver, and no code path reaches the stubs below except through
// that error. They exist so that the package builds with CGO_ENABLED=0.

import "unsafe"

const (
	maxParamBytes = 32764
	maxParams     = 1024
)

type cuDevice = int32

const stubResult = ResultNotInitialized

const resultMissingSymbol Result = -1 // KC_MISSING_SYMBOL

func driverOpen(path string) (string, bool) {
	return path + ": built without cgo (CGO_ENABLED=0): cannot dlopen libcuda", false
}

func driverErrorName(Result) string { return "" }

func cuInit() Result                              { return stubResult }
func cuDriverGetVersion() (int, Result)           { return 0, stubResult }
func cuDeviceGetCount() (int, Result)             { return 0, stubResult }
func cuDeviceGet(int) (cuDevice, Result)          { return 0, stubResult }
func cuDeviceGetName(cuDevice) (string, Result)   { return "", stubResult }
func cuDeviceGetUuid(cuDevice) ([16]byte, Result) { return [16]byte{}, stubResult }
func cuDeviceTotalMem(cuDevice) (int64, Result)   { return 0, stubResult }
func cuDeviceGetAttribute(deviceAttribute, cuDevice) (int, Result) {
	return 0, stubResult
}
func cuDevicePrimaryCtxRetain(cuDevice) (uintptr, Result) { return 0, stubResult }
func cuDevicePrimaryCtxRelease(cuDevice) Result           { return stubResult }
func threadBind(uintptr) Result                           { return stubResult }
func threadRestore(uintptr) Result                        { return stubResult }
func threadBound() uintptr                                { return 0 }
func cuCtxSynchronize(uintptr) Result                     { return stubResult }
func cuMemGetInfo() (int64, int64, Result)                { return 0, 0, stubResult }
func cuMemAlloc(int64) (DevicePtr, Result)                { return 0, stubResult }
func cuMemFree(DevicePtr) Result                          { return stubResult }
func cuMemAllocHost(int64) (unsafe.Pointer, Result)       { return nil, stubResult }
func cuMemFreeHost(unsafe.Pointer) Result                 { return stubResult }
func cuMemcpyHtoDAsync(uintptr, DevicePtr, unsafe.Pointer, int64, uintptr) Result {
	return stubResult
}
func cuMemcpyDtoHAsync(uintptr, unsafe.Pointer, DevicePtr, int64, uintptr) Result {
	return stubResult
}
func cuMemcpyDtoDAsync(uintptr, DevicePtr, DevicePtr, int64, uintptr) Result { return stubResult }
func cuMemsetD8Async(uintptr, DevicePtr, byte, int64, uintptr) Result        { return stubResult }
func copyToDeviceAndWait(uintptr, DevicePtr, []byte, uintptr) Result         { return stubResult }
func copyFromDeviceAndWait(uintptr, []byte, DevicePtr, uintptr) Result       { return stubResult }
func cuStreamCreate(StreamFlags) (uintptr, Result)                           { return 0, stubResult }
func cuStreamDestroy(uintptr) Result                                         { return stubResult }
func cuStreamSynchronize(uintptr, uintptr) Result                            { return stubResult }
func cuStreamQuery(uintptr, uintptr) Result                                  { return stubResult }
func cuStreamWaitEvent(uintptr, uintptr, uintptr) Result                     { return stubResult }
func cuEventCreate(EventFlags) (uintptr, Result)                             { return 0, stubResult }
func cuEventDestroy(uintptr) Result                                          { return stubResult }
func cuEventRecord(uintptr, uintptr, uintptr) Result                         { return stubResult }
func cuEventSynchronize(uintptr, uintptr) Result                             { return stubResult }
func cuEventQuery(uintptr, uintptr) Result                                   { return stubResult }
func cuEventElapsedTime(uintptr, uintptr, uintptr) (float32, Result)         { return 0, stubResult }
func cuIpcGetMemHandle(DevicePtr) (IPCHandle, Result)                        { return IPCHandle{}, stubResult }
func cuIpcOpenMemHandle(IPCHandle, uint32) (DevicePtr, Result)               { return 0, stubResult }
func cuIpcCloseMemHandle(DevicePtr) Result                                   { return stubResult }
func cuIpcGetEventHandle(uintptr) (IPCHandle, Result)                        { return IPCHandle{}, stubResult }
func cuIpcOpenEventHandle(IPCHandle) (uintptr, Result)                       { return 0, stubResult }
func cuModuleLoadData([]byte) (uintptr, string, Result)                      { return 0, "", stubResult }
func cuModuleUnload(uintptr) Result                                          { return stubResult }
func cuModuleGetFunction(uintptr, string) (uintptr, Result)                  { return 0, stubResult }
func cuModuleGetGlobal(uintptr, string) (DevicePtr, int64, Result)           { return 0, 0, stubResult }
func cuFuncGetAttribute(functionAttribute, uintptr) (int, Result)            { return 0, stubResult }
func cuFuncSetAttribute(uintptr, functionAttribute, int) Result              { return stubResult }
func cuOccupancyMaxActiveBlocksPerMultiprocessor(uintptr, int, int) (int, Result) {
	return 0, stubResult
}
func cuLaunchKernel(uintptr, uintptr, *LaunchConfig, uintptr, *Args, int) Result { return stubResult }
func cuFuncGetParamInfo(uintptr, int) (int, int, Result)                         { return 0, 0, stubResult }
func cuStreamBeginCapture(uintptr, uintptr, CaptureMode) Result                  { return stubResult }
func cuStreamEndCapture(uintptr, uintptr) (uintptr, Result)                      { return 0, stubResult }
func cuGraphInstantiate(uintptr) (uintptr, Result)                               { return 0, stubResult }
func cuGraphDestroy(uintptr) Result                                              { return stubResult }
func cuGraphExecDestroy(uintptr) Result                                          { return stubResult }
func cuGraphLaunch(uintptr, uintptr, uintptr) Result                             { return stubResult }

func cuTensorMapEncodeTiled(uintptr, *TensorMap, int, int, DevicePtr, *[maxTensorRank]uint64, *[maxTensorRank]uint64,
	*[maxTensorRank]uint32, *[maxTensorRank]uint32, int, int) Result {
	return stubResult
}
