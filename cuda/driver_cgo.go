//go:build cgo

package cuda

// The Go face of kcand_driver.c: one small function per driver entry point,
// returning the raw Result. Everything above this file is plain Go, so the
// !cgo build only has to stub these functions.

/*
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "kcand_driver.h"
*/
import "C"

import (
	"unsafe"
)

// maxParamBytes and maxParams mirror the C storage kc_launch copies into.
const (
	maxParamBytes = C.KC_MAX_PARAM_BYTES
	maxParams     = C.KC_MAX_PARAMS
)

// resultMissingSymbol is what the wrapper of an optional entry point returns
// when the driver does not export it; see checkOptional.
const resultMissingSymbol = Result(C.KC_MISSING_SYMBOL)

// cuDevice is a CUdevice: an ordinal the driver hands back.
type cuDevice = C.kc_device

func driverOpen(path string) (message string, ok bool) {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var buf [512]C.char
	if C.kc_driver_open(cpath, &buf[0], C.size_t(len(buf))) != 0 {
		return C.GoString(&buf[0]), false
	}
	return "", true
}

func driverErrorName(r Result) string {
	if name := C.kc_error_name(C.kc_result(r)); name != nil {
		return C.GoString(name)
	}
	return ""
}

func cuInit() Result { return Result(C.kc_init()) }

func cuDriverGetVersion() (int, Result) {
	var v C.int
	r := C.kc_driver_version(&v)
	return int(v), Result(r)
}

func cuDeviceGetCount() (int, Result) {
	var n C.int
	r := C.kc_device_count(&n)
	return int(n), Result(r)
}

func cuDeviceGet(ordinal int) (cuDevice, Result) {
	var d C.kc_device
	r := C.kc_device_get(&d, C.int(ordinal))
	return d, Result(r)
}

func cuDeviceGetName(d cuDevice) (string, Result) {
	var buf [256]C.char
	r := C.kc_device_name(&buf[0], C.int(len(buf)), d)
	buf[len(buf)-1] = 0
	return C.GoString(&buf[0]), Result(r)
}

func cuDeviceGetUuid(d cuDevice) ([16]byte, Result) {
	var uuid [16]byte
	r := C.kc_device_uuid((*C.uchar)(unsafe.Pointer(&uuid[0])), d)
	return uuid, Result(r)
}

func cuDeviceTotalMem(d cuDevice) (int64, Result) {
	var n C.size_t
	r := C.kc_device_total_mem(&n, d)
	return int64(n), Result(r)
}

func cuDeviceGetAttribute(attribute deviceAttribute, d cuDevice) (int, Result) {
	var v C.int
	r := C.kc_device_attribute(&v, C.int(attribute), d)
	return int(v), Result(r)
}

func cuDevicePrimaryCtxRetain(d cuDevice) (uintptr, Result) {
	var ctx C.uintptr_t
	r := C.kc_primary_ctx_retain(&ctx, d)
	return uintptr(ctx), Result(r)
}

func cuDevicePrimaryCtxRelease(d cuDevice) Result { return Result(C.kc_primary_ctx_release(d)) }

// threadBind makes ctx current on the calling OS thread and marks the thread
// as bound to it. The caller must hold runtime.LockOSThread.
func threadBind(ctx uintptr) Result { return Result(C.kc_thread_bind(C.uintptr_t(ctx))) }

// threadRestore makes previous current again and clears the binding.
func threadRestore(previous uintptr) Result {
	return Result(C.kc_thread_restore(C.uintptr_t(previous)))
}

// threadBound reports the context the calling OS thread is bound to, or 0.
func threadBound() uintptr { return uintptr(C.kc_thread_bound()) }

func cuCtxSynchronize(ctx uintptr) Result { return Result(C.kc_ctx_synchronize(C.uintptr_t(ctx))) }

func cuMemGetInfo() (free, total int64, r Result) {
	var f, t C.size_t
	r = Result(C.kc_mem_get_info(&f, &t))
	return int64(f), int64(t), r
}

func cuMemAlloc(bytes int64) (DevicePtr, Result) {
	var p C.kc_deviceptr
	r := C.kc_mem_alloc(&p, C.size_t(bytes))
	return DevicePtr(p), Result(r)
}

func cuMemFree(p DevicePtr) Result { return Result(C.kc_mem_free(C.kc_deviceptr(p))) }

func cuMemAllocHost(bytes int64) (unsafe.Pointer, Result) {
	var p unsafe.Pointer
	r := C.kc_mem_alloc_host(&p, C.size_t(bytes))
	return p, Result(r)
}

func cuMemFreeHost(p unsafe.Pointer) Result { return Result(C.kc_mem_free_host(p)) }

func cuMemcpyHtoDAsync(ctx uintptr, dst DevicePtr, src unsafe.Pointer, bytes int64, stream uintptr) Result {
	return Result(C.kc_memcpy_htod_async(C.uintptr_t(ctx), C.kc_deviceptr(dst), src, C.size_t(bytes), C.uintptr_t(stream)))
}

func cuMemcpyDtoHAsync(ctx uintptr, dst unsafe.Pointer, src DevicePtr, bytes int64, stream uintptr) Result {
	return Result(C.kc_memcpy_dtoh_async(C.uintptr_t(ctx), dst, C.kc_deviceptr(src), C.size_t(bytes), C.uintptr_t(stream)))
}

func cuMemcpyDtoDAsync(ctx uintptr, dst, src DevicePtr, bytes int64, stream uintptr) Result {
	return Result(C.kc_memcpy_dtod_async(C.uintptr_t(ctx), C.kc_deviceptr(dst), C.kc_deviceptr(src), C.size_t(bytes), C.uintptr_t(stream)))
}

func cuMemsetD8Async(ctx uintptr, dst DevicePtr, value byte, bytes int64, stream uintptr) Result {
	return Result(C.kc_memset_d8_async(C.uintptr_t(ctx), C.kc_deviceptr(dst), C.uchar(value), C.size_t(bytes), C.uintptr_t(stream)))
}

// copyToDeviceAndWait copies Go memory and waits in one C call, so the
// driver is done with src before cgo's pointer rules stop protecting it.
func copyToDeviceAndWait(ctx uintptr, dst DevicePtr, src []byte, stream uintptr) Result {
	return Result(C.kc_memcpy_htod_wait(C.uintptr_t(ctx), C.kc_deviceptr(dst), unsafe.Pointer(&src[0]), C.size_t(len(src)), C.uintptr_t(stream)))
}

// copyFromDeviceAndWait is the reverse of copyToDeviceAndWait.
func copyFromDeviceAndWait(ctx uintptr, dst []byte, src DevicePtr, stream uintptr) Result {
	return Result(C.kc_memcpy_dtoh_wait(C.uintptr_t(ctx), unsafe.Pointer(&dst[0]), C.kc_deviceptr(src), C.size_t(len(dst)), C.uintptr_t(stream)))
}

func cuStreamCreate(flags StreamFlags) (uintptr, Result) {
	var s C.uintptr_t
	r := C.kc_stream_create(&s, C.uint(flags))
	return uintptr(s), Result(r)
}

func cuStreamDestroy(stream uintptr) Result { return Result(C.kc_stream_destroy(C.uintptr_t(stream))) }

func cuStreamSynchronize(ctx, stream uintptr) Result {
	return Result(C.kc_stream_synchronize(C.uintptr_t(ctx), C.uintptr_t(stream)))
}

func cuStreamQuery(ctx, stream uintptr) Result {
	return Result(C.kc_stream_query(C.uintptr_t(ctx), C.uintptr_t(stream)))
}

func cuStreamWaitEvent(ctx, stream, event uintptr) Result {
	return Result(C.kc_stream_wait_event(C.uintptr_t(ctx), C.uintptr_t(stream), C.uintptr_t(event)))
}

func cuEventCreate(flags EventFlags) (uintptr, Result) {
	var e C.uintptr_t
	r := C.kc_event_create(&e, C.uint(flags))
	return uintptr(e), Result(r)
}

func cuEventDestroy(event uintptr) Result { return Result(C.kc_event_destroy(C.uintptr_t(event))) }

func cuEventRecord(ctx, event, stream uintptr) Result {
	return Result(C.kc_event_record(C.uintptr_t(ctx), C.uintptr_t(event), C.uintptr_t(stream)))
}

func cuEventSynchronize(ctx, event uintptr) Result {
	return Result(C.kc_event_synchronize(C.uintptr_t(ctx), C.uintptr_t(event)))
}

func cuEventQuery(ctx, event uintptr) Result {
	return Result(C.kc_event_query(C.uintptr_t(ctx), C.uintptr_t(event)))
}

func cuEventElapsedTime(ctx, start, end uintptr) (float32, Result) {
	var ms C.float
	r := C.kc_event_elapsed(C.uintptr_t(ctx), &ms, C.uintptr_t(start), C.uintptr_t(end))
	return float32(ms), Result(r)
}

func cuIpcGetMemHandle(p DevicePtr) (IPCHandle, Result) {
	var h IPCHandle
	r := C.kc_ipc_get_mem_handle((*C.uchar)(unsafe.Pointer(&h[0])), C.kc_deviceptr(p))
	return h, Result(r)
}

func cuIpcOpenMemHandle(h IPCHandle, flags uint32) (DevicePtr, Result) {
	var p C.kc_deviceptr
	r := C.kc_ipc_open_mem_handle(&p, (*C.uchar)(unsafe.Pointer(&h[0])), C.uint(flags))
	return DevicePtr(p), Result(r)
}

func cuIpcCloseMemHandle(p DevicePtr) Result {
	return Result(C.kc_ipc_close_mem_handle(C.kc_deviceptr(p)))
}

func cuIpcGetEventHandle(event uintptr) (IPCHandle, Result) {
	var h IPCHandle
	r := C.kc_ipc_get_event_handle((*C.uchar)(unsafe.Pointer(&h[0])), C.uintptr_t(event))
	return h, Result(r)
}

func cuIpcOpenEventHandle(h IPCHandle) (uintptr, Result) {
	var e C.uintptr_t
	r := C.kc_ipc_open_event_handle(&e, (*C.uchar)(unsafe.Pointer(&h[0])))
	return uintptr(e), Result(r)
}

// cuModuleLoadData loads a cubin, fatbin or PTX image. The image is copied
// to C memory with a trailing NUL, which PTX text requires and binary
// images ignore. The JIT error log comes back as detail.
func cuModuleLoadData(image []byte) (module uintptr, jitLog string, r Result) {
	cimage := C.malloc(C.size_t(len(image) + 1))
	defer C.free(cimage)
	copy(unsafe.Slice((*byte)(cimage), len(image)+1), image)
	*(*byte)(unsafe.Add(cimage, len(image))) = 0
	var logBuf [8192]C.char
	var m C.uintptr_t
	r = Result(C.kc_module_load(&m, cimage, &logBuf[0], C.size_t(len(logBuf))))
	logBuf[len(logBuf)-1] = 0
	return uintptr(m), C.GoString(&logBuf[0]), r
}

func cuModuleUnload(module uintptr) Result { return Result(C.kc_module_unload(C.uintptr_t(module))) }

func cuModuleGetFunction(module uintptr, name string) (uintptr, Result) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var f C.uintptr_t
	r := C.kc_module_get_function(&f, C.uintptr_t(module), cname)
	return uintptr(f), Result(r)
}

func cuModuleGetGlobal(module uintptr, name string) (DevicePtr, int64, Result) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var p C.kc_deviceptr
	var n C.size_t
	r := C.kc_module_get_global(&p, &n, C.uintptr_t(module), cname)
	return DevicePtr(p), int64(n), Result(r)
}

func cuFuncGetAttribute(attribute functionAttribute, function uintptr) (int, Result) {
	var v C.int
	r := C.kc_func_get_attribute(&v, C.int(attribute), C.uintptr_t(function))
	return int(v), Result(r)
}

func cuFuncSetAttribute(function uintptr, attribute functionAttribute, value int) Result {
	return Result(C.kc_func_set_attribute(C.uintptr_t(function), C.int(attribute), C.int(value)))
}

func cuOccupancyMaxActiveBlocksPerMultiprocessor(function uintptr, blockSize, dynamicSharedBytes int) (int, Result) {
	var n C.int
	r := C.kc_occupancy_max_active_blocks(&n, C.uintptr_t(function), C.int(blockSize), C.size_t(dynamicSharedBytes))
	return int(n), Result(r)
}

func cuFuncGetParamInfo(function uintptr, index int) (offset, size int, r Result) {
	var o, n C.size_t
	r = Result(C.kc_func_get_param_info(&o, &n, C.uintptr_t(function), C.size_t(index)))
	return int(o), int(n), r
}

func cuTensorMapEncodeTiled(ctx uintptr, m *TensorMap, dataType, rank int, addr DevicePtr,
	dims, strides *[maxTensorRank]uint64, box, elementStrides *[maxTensorRank]uint32, swizzle, l2Promotion int) Result {
	return Result(C.kc_tensor_map_encode_tiled(C.uintptr_t(ctx), (*C.uchar)(unsafe.Pointer(&m[0])), C.int(dataType), C.uint(rank),
		C.kc_deviceptr(addr), (*C.ulonglong)(unsafe.Pointer(&dims[0])), (*C.ulonglong)(unsafe.Pointer(&strides[0])),
		(*C.uint)(unsafe.Pointer(&box[0])), (*C.uint)(unsafe.Pointer(&elementStrides[0])), C.int(swizzle), C.int(l2Promotion)))
}

func cuStreamBeginCapture(ctx, stream uintptr, mode CaptureMode) Result {
	return Result(C.kc_stream_begin_capture(C.uintptr_t(ctx), C.uintptr_t(stream), C.int(mode)))
}

func cuStreamEndCapture(ctx, stream uintptr) (uintptr, Result) {
	var g C.uintptr_t
	r := C.kc_stream_end_capture(C.uintptr_t(ctx), C.uintptr_t(stream), &g)
	return uintptr(g), Result(r)
}

func cuGraphInstantiate(graph uintptr) (uintptr, Result) {
	var e C.uintptr_t
	r := C.kc_graph_instantiate(&e, C.uintptr_t(graph))
	return uintptr(e), Result(r)
}

func cuGraphDestroy(graph uintptr) Result { return Result(C.kc_graph_destroy(C.uintptr_t(graph))) }

func cuGraphExecDestroy(exec uintptr) Result {
	return Result(C.kc_graph_exec_destroy(C.uintptr_t(exec)))
}

func cuGraphLaunch(ctx, exec, stream uintptr) Result {
	return Result(C.kc_graph_launch(C.uintptr_t(ctx), C.uintptr_t(exec), C.uintptr_t(stream)))
}

func boolInt(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

// cuLaunchKernel launches f repeat times with the packed parameters of args.
// cfg has been validated, so every dimension fits in a C unsigned int.
func cuLaunchKernel(ctx, function uintptr, cfg *LaunchConfig, stream uintptr, args *Args, repeat int) Result {
	var data unsafe.Pointer
	var offsets *C.uint32_t
	var size, count int
	if args != nil && len(args.offsets) > 0 {
		data = unsafe.Pointer(&args.data[0])
		offsets = (*C.uint32_t)(unsafe.Pointer(&args.offsets[0]))
		size, count = len(args.data), len(args.offsets)
	}
	return Result(C.kc_launch(C.uintptr_t(ctx), C.uintptr_t(function),
		C.uint(cfg.Grid.X), C.uint(cfg.Grid.Y), C.uint(cfg.Grid.Z),
		C.uint(cfg.Block.X), C.uint(cfg.Block.Y), C.uint(cfg.Block.Z),
		C.uint(cfg.SharedMemoryBytes), C.uintptr_t(stream),
		data, C.size_t(size), offsets, C.int(count), C.int(repeat), boolInt(cfg.Programmatic)))
}
