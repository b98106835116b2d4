//go:build cgo

/*
 * kcand_driver.c loads libcuda.so.1 with dlopen and forwards calls to it.
 *
 * Every prototype below is the CUDA 13 driver ABI of the named symbol (the
 * _v2 names where the driver has them): handles are pointers, CUdeviceptr is
 * unsigned long long, IPC handles are 64-byte structs passed by value, enums
 * are ints.
 *
 * Most entry points are required: without one the driver does not load.
 * Newer ones are optional: their slot stays NULL on a driver that lacks them
 * and their wrapper returns KC_MISSING_SYMBOL, so one missing feature costs
 * only that feature.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "kcand_driver.h"

#include <stddef.h>

/* The layouts cuLaunchKernelEx reads (cuda.h, 64-bit). */
_Static_assert(sizeof(struct kc_launch_attribute) == 72, "CUlaunchAttribute is 72 bytes");
_Static_assert(offsetof(struct kc_launch_attribute, value) == 8, "CUlaunchAttribute.value at 8");
_Static_assert(offsetof(struct kc_launch_config, stream) == 32, "CUlaunchConfig.hStream at 32");
_Static_assert(offsetof(struct kc_launch_config, attrs) == 40, "CUlaunchConfig.attrs at 40");
_Static_assert(offsetof(struct kc_launch_config, attr_count) == 48, "CUlaunchConfig.numAttrs at 48");
_Static_assert(sizeof(struct kc_launch_config) == 56, "CUlaunchConfig is 56 bytes");

typedef struct { char reserved[KC_IPC_HANDLE_SIZE]; } kc_ipc_handle; /* CUipcMemHandle, CUipcEventHandle */
typedef struct { char bytes[16]; } kc_uuid;                          /* CUuuid */

static struct {
	int loaded;
	void *library;
	kc_result (*cuInit)(unsigned int flags);
	kc_result (*cuDriverGetVersion)(int *version);
	kc_result (*cuGetErrorName)(kc_result code, const char **name);
	kc_result (*cuGetErrorString)(kc_result code, const char **text);
	kc_result (*cuDeviceGetCount)(int *count);
	kc_result (*cuDeviceGet)(kc_device *device, int ordinal);
	kc_result (*cuDeviceGetName)(char *name, int length, kc_device device);
	kc_result (*cuDeviceGetUuid)(kc_uuid *uuid, kc_device device);
	kc_result (*cuDeviceTotalMem)(size_t *bytes, kc_device device);
	kc_result (*cuDeviceGetAttribute)(int *value, int attribute, kc_device device);
	kc_result (*cuDevicePrimaryCtxRetain)(void **context, kc_device device);
	kc_result (*cuDevicePrimaryCtxRelease)(kc_device device);
	kc_result (*cuCtxSetCurrent)(void *context);
	kc_result (*cuCtxGetCurrent)(void **context);
	kc_result (*cuCtxSynchronize)(void);
	kc_result (*cuMemGetInfo)(size_t *free_bytes, size_t *total_bytes);
	kc_result (*cuMemAlloc)(kc_deviceptr *pointer, size_t bytes);
	kc_result (*cuMemFree)(kc_deviceptr pointer);
	kc_result (*cuMemAllocHost)(void **pointer, size_t bytes);
	kc_result (*cuMemFreeHost)(void *pointer);
	kc_result (*cuMemcpyHtoDAsync)(kc_deviceptr dst, const void *src, size_t bytes, void *stream);
	kc_result (*cuMemcpyDtoHAsync)(void *dst, kc_deviceptr src, size_t bytes, void *stream);
	kc_result (*cuMemcpyDtoDAsync)(kc_deviceptr dst, kc_deviceptr src, size_t bytes, void *stream);
	kc_result (*cuMemsetD8Async)(kc_deviceptr dst, unsigned char value, size_t count, void *stream);
	kc_result (*cuStreamCreate)(void **stream, unsigned int flags);
	kc_result (*cuStreamDestroy)(void *stream);
	kc_result (*cuStreamSynchronize)(void *stream);
	kc_result (*cuStreamQuery)(void *stream);
	kc_result (*cuStreamWaitEvent)(void *stream, void *event, unsigned int flags);
	kc_result (*cuEventCreate)(void **event, unsigned int flags);
	kc_result (*cuEventDestroy)(void *event);
	kc_result (*cuEventRecord)(void *event, void *stream);
	kc_result (*cuEventSynchronize)(void *event);
	kc_result (*cuEventQuery)(void *event);
	kc_result (*cuEventElapsedTime)(float *milliseconds, void *start, void *end);
	kc_result (*cuIpcGetMemHandle)(kc_ipc_handle *handle, kc_deviceptr pointer);
	kc_result (*cuIpcOpenMemHandle)(kc_deviceptr *pointer, kc_ipc_handle handle, unsigned int flags);
	kc_result (*cuIpcCloseMemHandle)(kc_deviceptr pointer);
	kc_result (*cuIpcGetEventHandle)(kc_ipc_handle *handle, void *event);
	kc_result (*cuIpcOpenEventHandle)(void **event, kc_ipc_handle handle);
	kc_result (*cuModuleLoadDataEx)(void **module, const void *image, unsigned int option_count, int *options, void **option_values);
	kc_result (*cuModuleUnload)(void *module);
	kc_result (*cuModuleGetFunction)(void **function, void *module, const char *name);
	kc_result (*cuModuleGetGlobal)(kc_deviceptr *pointer, size_t *bytes, void *module, const char *name);
	kc_result (*cuFuncGetAttribute)(int *value, int attribute, void *function);
	kc_result (*cuFuncSetAttribute)(void *function, int attribute, int value);
	kc_result (*cuOccupancyMaxActiveBlocksPerMultiprocessor)(int *blocks, void *function, int block_size, size_t dynamic_shared_bytes);
	kc_result (*cuFuncGetParamInfo)(void *function, size_t index, size_t *offset, size_t *size);
	/* cuStreamBeginCapture_v2: the unsuffixed CUDA 10.0 symbol takes no mode. */
	kc_result (*cuStreamBeginCapture)(void *stream, int mode);
	kc_result (*cuStreamEndCapture)(void *stream, void **graph);
	kc_result (*cuGraphInstantiateWithFlags)(void **exec, void *graph, unsigned long long flags);
	kc_result (*cuGraphDestroy)(void *graph);
	kc_result (*cuGraphExecDestroy)(void *exec);
	kc_result (*cuGraphLaunch)(void *exec, void *stream);
	kc_result (*cuLaunchKernel)(void *function,
	                            unsigned int grid_x, unsigned int grid_y, unsigned int grid_z,
	                            unsigned int block_x, unsigned int block_y, unsigned int block_z,
	                            unsigned int shared_bytes, void *stream, void **params, void **extra);
	kc_result (*cuLaunchKernelEx)(const struct kc_launch_config *config, void *function, void **params, void **extra);
	kc_result (*cuTensorMapEncodeTiled)(void *map, int data_type, unsigned int rank, void *address,
	                                    const unsigned long long *dims, const unsigned long long *strides,
	                                    const unsigned int *box, const unsigned int *element_strides,
	                                    int interleave, int swizzle, int l2_promotion, int oob_fill);
} drv;

/* The context this thread was bound to by kc_thread_bind, or 0. */
static __thread uintptr_t bound_context;

/* symbol lists the names to try for one entry point, best first, and
 * whether the driver may lack it. */
typedef struct {
	void **slot;
	const char *names[3];
	int optional;
} symbol;

#define OPTIONAL 1

#define SLOT(field) ((void **)&drv.field)

int kc_driver_open(const char *path, char *message, size_t message_size) {
	if (drv.loaded) {
		return 0;
	}
	void *library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (library == NULL) {
		const char *why = dlerror();
		snprintf(message, message_size, "dlopen %s: %s", path, why ? why : "unknown error");
		return -1;
	}
	symbol symbols[] = {
		{SLOT(cuInit), {"cuInit"}},
		{SLOT(cuDriverGetVersion), {"cuDriverGetVersion"}},
		{SLOT(cuGetErrorName), {"cuGetErrorName"}},
		{SLOT(cuGetErrorString), {"cuGetErrorString"}},
		{SLOT(cuDeviceGetCount), {"cuDeviceGetCount"}},
		{SLOT(cuDeviceGet), {"cuDeviceGet"}},
		{SLOT(cuDeviceGetName), {"cuDeviceGetName"}},
		/* _v2 reports the MIG instance's UUID in MIG mode; CUDA 13's cuDeviceGetUuid is _v2. */
		{SLOT(cuDeviceGetUuid), {"cuDeviceGetUuid_v2", "cuDeviceGetUuid"}},
		{SLOT(cuDeviceTotalMem), {"cuDeviceTotalMem_v2"}},
		{SLOT(cuDeviceGetAttribute), {"cuDeviceGetAttribute"}},
		{SLOT(cuDevicePrimaryCtxRetain), {"cuDevicePrimaryCtxRetain"}},
		{SLOT(cuDevicePrimaryCtxRelease), {"cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease"}},
		{SLOT(cuCtxSetCurrent), {"cuCtxSetCurrent"}},
		{SLOT(cuCtxGetCurrent), {"cuCtxGetCurrent"}},
		{SLOT(cuCtxSynchronize), {"cuCtxSynchronize"}},
		{SLOT(cuMemGetInfo), {"cuMemGetInfo_v2"}},
		{SLOT(cuMemAlloc), {"cuMemAlloc_v2"}},
		{SLOT(cuMemFree), {"cuMemFree_v2"}},
		{SLOT(cuMemAllocHost), {"cuMemAllocHost_v2"}},
		{SLOT(cuMemFreeHost), {"cuMemFreeHost"}},
		{SLOT(cuMemcpyHtoDAsync), {"cuMemcpyHtoDAsync_v2"}},
		{SLOT(cuMemcpyDtoHAsync), {"cuMemcpyDtoHAsync_v2"}},
		{SLOT(cuMemcpyDtoDAsync), {"cuMemcpyDtoDAsync_v2"}},
		/* The async memsets were born with 64-bit CUdeviceptr and have no _v2. */
		{SLOT(cuMemsetD8Async), {"cuMemsetD8Async"}},
		{SLOT(cuStreamCreate), {"cuStreamCreate"}},
		{SLOT(cuStreamDestroy), {"cuStreamDestroy_v2", "cuStreamDestroy"}},
		{SLOT(cuStreamSynchronize), {"cuStreamSynchronize"}},
		{SLOT(cuStreamQuery), {"cuStreamQuery"}},
		{SLOT(cuStreamWaitEvent), {"cuStreamWaitEvent"}},
		{SLOT(cuEventCreate), {"cuEventCreate"}},
		{SLOT(cuEventDestroy), {"cuEventDestroy_v2", "cuEventDestroy"}},
		{SLOT(cuEventRecord), {"cuEventRecord"}},
		{SLOT(cuEventSynchronize), {"cuEventSynchronize"}},
		{SLOT(cuEventQuery), {"cuEventQuery"}},
		/* Same signature; _v2 (CUDA 12.8+) relaxes error checking and is CUDA 13's default. */
		{SLOT(cuEventElapsedTime), {"cuEventElapsedTime_v2", "cuEventElapsedTime"}},
		{SLOT(cuIpcGetMemHandle), {"cuIpcGetMemHandle"}},
		{SLOT(cuIpcOpenMemHandle), {"cuIpcOpenMemHandle_v2", "cuIpcOpenMemHandle"}},
		{SLOT(cuIpcCloseMemHandle), {"cuIpcCloseMemHandle"}},
		{SLOT(cuIpcGetEventHandle), {"cuIpcGetEventHandle"}},
		{SLOT(cuIpcOpenEventHandle), {"cuIpcOpenEventHandle"}},
		{SLOT(cuModuleLoadDataEx), {"cuModuleLoadDataEx"}},
		{SLOT(cuModuleUnload), {"cuModuleUnload"}},
		{SLOT(cuModuleGetFunction), {"cuModuleGetFunction"}},
		{SLOT(cuModuleGetGlobal), {"cuModuleGetGlobal_v2"}},
		{SLOT(cuFuncGetAttribute), {"cuFuncGetAttribute"}},
		{SLOT(cuFuncSetAttribute), {"cuFuncSetAttribute"}},
		{SLOT(cuOccupancyMaxActiveBlocksPerMultiprocessor), {"cuOccupancyMaxActiveBlocksPerMultiprocessor"}},
		{SLOT(cuLaunchKernel), {"cuLaunchKernel"}},
		{SLOT(cuFuncGetParamInfo), {"cuFuncGetParamInfo"}, OPTIONAL}, /* CUDA 12.4 */
		{SLOT(cuLaunchKernelEx), {"cuLaunchKernelEx"}, OPTIONAL}, /* CUDA 12.0 */
		{SLOT(cuTensorMapEncodeTiled), {"cuTensorMapEncodeTiled"}, OPTIONAL}, /* CUDA 12.0 */
		/* No fallback to cuStreamBeginCapture: it has another signature, and
		 * every driver with cuGraphInstantiateWithFlags (11.4) has _v2 (10.1). */
		{SLOT(cuStreamBeginCapture), {"cuStreamBeginCapture_v2"}, OPTIONAL},
		{SLOT(cuStreamEndCapture), {"cuStreamEndCapture"}, OPTIONAL},
		{SLOT(cuGraphInstantiateWithFlags), {"cuGraphInstantiateWithFlags"}, OPTIONAL}, /* CUDA 11.4 */
		{SLOT(cuGraphDestroy), {"cuGraphDestroy"}, OPTIONAL},
		{SLOT(cuGraphExecDestroy), {"cuGraphExecDestroy"}, OPTIONAL},
		{SLOT(cuGraphLaunch), {"cuGraphLaunch"}, OPTIONAL},
	};
	for (size_t i = 0; i < sizeof(symbols) / sizeof(symbols[0]); i++) {
		void *address = NULL;
		for (int n = 0; n < 3 && symbols[i].names[n] != NULL && address == NULL; n++) {
			address = dlsym(library, symbols[i].names[n]);
		}
		if (address == NULL && symbols[i].optional) {
			continue;
		}
		if (address == NULL) {
			snprintf(message, message_size, "%s: missing symbol %s (driver too old?)", path, symbols[i].names[0]);
			memset(&drv, 0, sizeof(drv));
			dlclose(library);
			return -1;
		}
		*symbols[i].slot = address;
	}
	drv.library = library;
	drv.loaded = 1;
	return 0;
}

const char *kc_error_name(kc_result code) {
	const char *name = NULL;
	if (!drv.loaded || drv.cuGetErrorName(code, &name) != 0) {
		return NULL;
	}
	return name;
}

const char *kc_error_string(kc_result code) {
	const char *text = NULL;
	if (!drv.loaded || drv.cuGetErrorString(code, &text) != 0) {
		return NULL;
	}
	return text;
}

/* CALL returns KC_NOT_LOADED instead of jumping through a null pointer. */
#define CALL(fn, ...) (drv.loaded ? drv.fn(__VA_ARGS__) : KC_NOT_LOADED)

/* REQUIRE starts the wrapper of an optional entry point. */
#define REQUIRE(fn)                               \
	do {                                          \
		if (drv.loaded && drv.fn == NULL) {       \
			return KC_MISSING_SYMBOL;             \
		}                                         \
	} while (0)

kc_result kc_init(void) { return CALL(cuInit, 0); }
kc_result kc_driver_version(int *version) { return CALL(cuDriverGetVersion, version); }
kc_result kc_device_count(int *count) { return CALL(cuDeviceGetCount, count); }
kc_result kc_device_get(kc_device *device, int ordinal) { return CALL(cuDeviceGet, device, ordinal); }
kc_result kc_device_name(char *name, int length, kc_device device) { return CALL(cuDeviceGetName, name, length, device); }
kc_result kc_device_uuid(unsigned char *uuid16, kc_device device) { return CALL(cuDeviceGetUuid, (kc_uuid *)uuid16, device); }
kc_result kc_device_total_mem(size_t *bytes, kc_device device) { return CALL(cuDeviceTotalMem, bytes, device); }
kc_result kc_device_attribute(int *value, int attribute, kc_device device) {
	return CALL(cuDeviceGetAttribute, value, attribute, device);
}

kc_result kc_primary_ctx_retain(uintptr_t *context, kc_device device) {
	void *handle = NULL;
	kc_result r = CALL(cuDevicePrimaryCtxRetain, &handle, device);
	*context = (uintptr_t)handle;
	return r;
}

kc_result kc_primary_ctx_release(kc_device device) { return CALL(cuDevicePrimaryCtxRelease, device); }

kc_result kc_thread_bind(uintptr_t context) {
	kc_result r = CALL(cuCtxSetCurrent, (void *)context);
	if (r == 0) {
		bound_context = context;
	}
	return r;
}

kc_result kc_thread_restore(uintptr_t previous) {
	bound_context = 0;
	return CALL(cuCtxSetCurrent, (void *)previous);
}

uintptr_t kc_thread_bound(void) { return bound_context; }

/*
 * enter makes context current on this thread unless it is already bound;
 * leave puts back what was current. Together they let one C call run
 * context work from any thread without leaving state behind.
 */
static kc_result enter(uintptr_t context, void **previous, int *switched) {
	*switched = 0;
	if (!drv.loaded) {
		return KC_NOT_LOADED;
	}
	if (bound_context == context) {
		return 0;
	}
	kc_result r = drv.cuCtxGetCurrent(previous);
	if (r != 0 || (uintptr_t)*previous == context) {
		return r;
	}
	r = drv.cuCtxSetCurrent((void *)context);
	*switched = r == 0;
	return r;
}

static void leave(void *previous, int switched) {
	if (switched) {
		drv.cuCtxSetCurrent(previous);
	}
}

#define IN_CONTEXT(context, fn, ...)                              \
	do {                                                          \
		void *previous_ = NULL;                                   \
		int switched_ = 0;                                        \
		kc_result r_ = enter((context), &previous_, &switched_);  \
		if (r_ == 0) {                                            \
			r_ = drv.fn(__VA_ARGS__);                             \
			leave(previous_, switched_);                          \
		}                                                         \
		return r_;                                                \
	} while (0)

kc_result kc_ctx_synchronize(uintptr_t context) {
	void *previous = NULL;
	int switched = 0;
	kc_result r = enter(context, &previous, &switched);
	if (r == 0) {
		r = drv.cuCtxSynchronize();
		leave(previous, switched);
	}
	return r;
}
kc_result kc_mem_get_info(size_t *free_bytes, size_t *total_bytes) { return CALL(cuMemGetInfo, free_bytes, total_bytes); }

kc_result kc_mem_alloc(kc_deviceptr *pointer, size_t bytes) { return CALL(cuMemAlloc, pointer, bytes); }
kc_result kc_mem_free(kc_deviceptr pointer) { return CALL(cuMemFree, pointer); }
kc_result kc_mem_alloc_host(void **pointer, size_t bytes) { return CALL(cuMemAllocHost, pointer, bytes); }
kc_result kc_mem_free_host(void *pointer) { return CALL(cuMemFreeHost, pointer); }

kc_result kc_memcpy_htod_async(uintptr_t context, kc_deviceptr dst, const void *src, size_t bytes, uintptr_t stream) {
	IN_CONTEXT(context, cuMemcpyHtoDAsync, dst, src, bytes, (void *)stream);
}

kc_result kc_memcpy_dtoh_async(uintptr_t context, void *dst, kc_deviceptr src, size_t bytes, uintptr_t stream) {
	IN_CONTEXT(context, cuMemcpyDtoHAsync, dst, src, bytes, (void *)stream);
}

kc_result kc_memcpy_dtod_async(uintptr_t context, kc_deviceptr dst, kc_deviceptr src, size_t bytes, uintptr_t stream) {
	IN_CONTEXT(context, cuMemcpyDtoDAsync, dst, src, bytes, (void *)stream);
}

kc_result kc_memset_d8_async(uintptr_t context, kc_deviceptr dst, unsigned char value, size_t bytes, uintptr_t stream) {
	IN_CONTEXT(context, cuMemsetD8Async, dst, value, bytes, (void *)stream);
}

static kc_result htod_wait(kc_deviceptr dst, const void *src, size_t bytes, void *stream) {
	kc_result r = drv.cuMemcpyHtoDAsync(dst, src, bytes, stream);
	return r != 0 ? r : drv.cuStreamSynchronize(stream);
}

static kc_result dtoh_wait(void *dst, kc_deviceptr src, size_t bytes, void *stream) {
	kc_result r = drv.cuMemcpyDtoHAsync(dst, src, bytes, stream);
	return r != 0 ? r : drv.cuStreamSynchronize(stream);
}

kc_result kc_memcpy_htod_wait(uintptr_t context, kc_deviceptr dst, const void *src, size_t bytes, uintptr_t stream) {
	void *previous = NULL;
	int switched = 0;
	kc_result r = enter(context, &previous, &switched);
	if (r == 0) {
		r = htod_wait(dst, src, bytes, (void *)stream);
		leave(previous, switched);
	}
	return r;
}

kc_result kc_memcpy_dtoh_wait(uintptr_t context, void *dst, kc_deviceptr src, size_t bytes, uintptr_t stream) {
	void *previous = NULL;
	int switched = 0;
	kc_result r = enter(context, &previous, &switched);
	if (r == 0) {
		r = dtoh_wait(dst, src, bytes, (void *)stream);
		leave(previous, switched);
	}
	return r;
}

kc_result kc_stream_create(uintptr_t *stream, unsigned int flags) {
	void *handle = NULL;
	kc_result r = CALL(cuStreamCreate, &handle, flags);
	*stream = (uintptr_t)handle;
	return r;
}

kc_result kc_stream_destroy(uintptr_t stream) { return CALL(cuStreamDestroy, (void *)stream); }
kc_result kc_stream_synchronize(uintptr_t context, uintptr_t stream) { IN_CONTEXT(context, cuStreamSynchronize, (void *)stream); }
kc_result kc_stream_query(uintptr_t context, uintptr_t stream) { IN_CONTEXT(context, cuStreamQuery, (void *)stream); }
kc_result kc_stream_wait_event(uintptr_t context, uintptr_t stream, uintptr_t event) {
	IN_CONTEXT(context, cuStreamWaitEvent, (void *)stream, (void *)event, 0);
}

kc_result kc_event_create(uintptr_t *event, unsigned int flags) {
	void *handle = NULL;
	kc_result r = CALL(cuEventCreate, &handle, flags);
	*event = (uintptr_t)handle;
	return r;
}

kc_result kc_event_destroy(uintptr_t event) { return CALL(cuEventDestroy, (void *)event); }
kc_result kc_event_record(uintptr_t context, uintptr_t event, uintptr_t stream) {
	IN_CONTEXT(context, cuEventRecord, (void *)event, (void *)stream);
}
kc_result kc_event_synchronize(uintptr_t context, uintptr_t event) { IN_CONTEXT(context, cuEventSynchronize, (void *)event); }
kc_result kc_event_query(uintptr_t context, uintptr_t event) { IN_CONTEXT(context, cuEventQuery, (void *)event); }
kc_result kc_event_elapsed(uintptr_t context, float *milliseconds, uintptr_t start, uintptr_t end) {
	IN_CONTEXT(context, cuEventElapsedTime, milliseconds, (void *)start, (void *)end);
}

kc_result kc_ipc_get_mem_handle(unsigned char *handle64, kc_deviceptr pointer) {
	return CALL(cuIpcGetMemHandle, (kc_ipc_handle *)handle64, pointer);
}

kc_result kc_ipc_open_mem_handle(kc_deviceptr *pointer, const unsigned char *handle64, unsigned int flags) {
	kc_ipc_handle handle;
	memcpy(&handle, handle64, sizeof(handle));
	return CALL(cuIpcOpenMemHandle, pointer, handle, flags);
}

kc_result kc_ipc_close_mem_handle(kc_deviceptr pointer) { return CALL(cuIpcCloseMemHandle, pointer); }

kc_result kc_ipc_get_event_handle(unsigned char *handle64, uintptr_t event) {
	return CALL(cuIpcGetEventHandle, (kc_ipc_handle *)handle64, (void *)event);
}

kc_result kc_ipc_open_event_handle(uintptr_t *event, const unsigned char *handle64) {
	kc_ipc_handle handle;
	void *opened = NULL;
	memcpy(&handle, handle64, sizeof(handle));
	kc_result r = CALL(cuIpcOpenEventHandle, &opened, handle);
	*event = (uintptr_t)opened;
	return r;
}

/* CUjit_option values from cuda.h. */
enum {
	KC_JIT_ERROR_LOG_BUFFER = 5,            /* CU_JIT_ERROR_LOG_BUFFER */
	KC_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6, /* CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES */
};

kc_result kc_module_load(uintptr_t *module, const void *image, char *error_log, size_t error_log_size) {
	int options[] = {KC_JIT_ERROR_LOG_BUFFER, KC_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
	/* Option values are pointer-sized slots; the size travels as an integer in one. */
	void *values[] = {error_log, (void *)(uintptr_t)error_log_size};
	void *handle = NULL;
	if (error_log_size > 0) {
		error_log[0] = 0;
	}
	kc_result r = CALL(cuModuleLoadDataEx, &handle, image, 2, options, values);
	*module = (uintptr_t)handle;
	return r;
}

kc_result kc_module_unload(uintptr_t module) { return CALL(cuModuleUnload, (void *)module); }

kc_result kc_module_get_function(uintptr_t *function, uintptr_t module, const char *name) {
	void *handle = NULL;
	kc_result r = CALL(cuModuleGetFunction, &handle, (void *)module, name);
	*function = (uintptr_t)handle;
	return r;
}

kc_result kc_module_get_global(kc_deviceptr *pointer, size_t *bytes, uintptr_t module, const char *name) {
	return CALL(cuModuleGetGlobal, pointer, bytes, (void *)module, name);
}

kc_result kc_func_get_attribute(int *value, int attribute, uintptr_t function) {
	return CALL(cuFuncGetAttribute, value, attribute, (void *)function);
}

kc_result kc_func_set_attribute(uintptr_t function, int attribute, int value) {
	return CALL(cuFuncSetAttribute, (void *)function, attribute, value);
}

kc_result kc_occupancy_max_active_blocks(int *blocks, uintptr_t function, int block_size, size_t dynamic_shared_bytes) {
	return CALL(cuOccupancyMaxActiveBlocksPerMultiprocessor, blocks, (void *)function, block_size, dynamic_shared_bytes);
}

kc_result kc_func_get_param_info(size_t *offset, size_t *size, uintptr_t function, size_t index) {
	REQUIRE(cuFuncGetParamInfo);
	return CALL(cuFuncGetParamInfo, (void *)function, index, offset, size);
}

kc_result kc_tensor_map_encode_tiled(uintptr_t context, unsigned char *map128, int data_type, unsigned int rank, kc_deviceptr address,
                                     const unsigned long long *dims, const unsigned long long *strides,
                                     const unsigned int *box, const unsigned int *element_strides, int swizzle, int l2_promotion) {
	REQUIRE(cuTensorMapEncodeTiled);
	if (!drv.loaded) {
		return KC_NOT_LOADED;
	}
	/* A CUtensorMap is 64-byte aligned; Go's array need not be. */
	_Alignas(64) unsigned char map[128];
	void *previous = NULL;
	int switched = 0;
	kc_result r = enter(context, &previous, &switched);
	if (r == 0) {
		/* No interleave; elements past the end read as zeros (no NaN fill). */
		r = drv.cuTensorMapEncodeTiled(map, data_type, rank, (void *)(uintptr_t)address, dims, strides, box, element_strides,
		                               0, swizzle, l2_promotion, 0);
		leave(previous, switched);
	}
	if (r == 0) {
		memcpy(map128, map, sizeof(map));
	}
	return r;
}

kc_result kc_stream_begin_capture(uintptr_t context, uintptr_t stream, int mode) {
	REQUIRE(cuStreamBeginCapture);
	IN_CONTEXT(context, cuStreamBeginCapture, (void *)stream, mode);
}

kc_result kc_stream_end_capture(uintptr_t context, uintptr_t stream, uintptr_t *graph) {
	REQUIRE(cuStreamEndCapture);
	void *previous = NULL;
	void *handle = NULL;
	int switched = 0;
	kc_result r = enter(context, &previous, &switched);
	if (r == 0) {
		r = drv.cuStreamEndCapture((void *)stream, &handle);
		leave(previous, switched);
	}
	*graph = (uintptr_t)handle;
	return r;
}

kc_result kc_graph_instantiate(uintptr_t *exec, uintptr_t graph) {
	REQUIRE(cuGraphInstantiateWithFlags);
	void *handle = NULL;
	kc_result r = CALL(cuGraphInstantiateWithFlags, &handle, (void *)graph, 0);
	*exec = (uintptr_t)handle;
	return r;
}

kc_result kc_graph_destroy(uintptr_t graph) {
	REQUIRE(cuGraphDestroy);
	return CALL(cuGraphDestroy, (void *)graph);
}

kc_result kc_graph_exec_destroy(uintptr_t exec) {
	REQUIRE(cuGraphExecDestroy);
	return CALL(cuGraphExecDestroy, (void *)exec);
}

kc_result kc_graph_launch(uintptr_t context, uintptr_t exec, uintptr_t stream) {
	REQUIRE(cuGraphLaunch);
	IN_CONTEXT(context, cuGraphLaunch, (void *)exec, (void *)stream);
}

kc_result kc_launch(uintptr_t context, uintptr_t function,
                    unsigned int grid_x, unsigned int grid_y, unsigned int grid_z,
                    unsigned int block_x, unsigned int block_y, unsigned int block_z,
                    unsigned int shared_bytes, uintptr_t stream,
                    const void *data, size_t data_size, const uint32_t *offsets, int count,
                    int repeat, int programmatic) {
	/* The driver copies parameter values during cuLaunchKernel, so storage
	 * on this C stack lives long enough, and kernelParams never points
	 * into Go memory. */
	_Alignas(16) unsigned char storage[KC_MAX_PARAM_BYTES];
	void *params[KC_MAX_PARAMS];
	if (data_size > sizeof(storage) || count < 0 || count > KC_MAX_PARAMS) {
		return 1; /* CUDA_ERROR_INVALID_VALUE; Go validates first */
	}
	if (data_size > 0) {
		memcpy(storage, data, data_size);
	}
	for (int i = 0; i < count; i++) {
		if (offsets[i] >= data_size) {
			return 1;
		}
		params[i] = storage + offsets[i];
	}
	void *previous = NULL;
	int switched = 0;
	kc_result r = enter(context, &previous, &switched);
	if (r != 0) {
		return r;
	}
	if (programmatic && drv.cuLaunchKernelEx != NULL) {
		struct kc_launch_attribute attribute;
		memset(&attribute, 0, sizeof(attribute));
		attribute.id = KC_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
		attribute.value.allowed = 1;
		struct kc_launch_config config = {grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes,
		                                  (void *)stream, &attribute, 1};
		for (int i = 0; i < repeat && r == 0; i++) {
			r = drv.cuLaunchKernelEx(&config, (void *)function, count > 0 ? params : NULL, NULL);
		}
	} else {
		for (int i = 0; i < repeat && r == 0; i++) {
			r = drv.cuLaunchKernel((void *)function, grid_x, grid_y, grid_z, block_x, block_y, block_z,
			                       shared_bytes, (void *)stream, count > 0 ? params : NULL, NULL);
		}
	}
	leave(previous, switched);
	return r;
}
