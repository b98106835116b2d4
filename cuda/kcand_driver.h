/*
 * kcand_driver.h declares the small C layer between Go and libcuda.so.1.
 *
 * No CUDA header is needed: the few driver types are declared here with the
 * layout cuda.h gives them (CUresult is an int enum, CUdeviceptr an unsigned
 * long long, every handle a pointer, IPC handles 64-byte structs), and the
 * driver is reached only through function pointers that kcand_driver.c
 * resolves with dlsym. Handles cross into Go as uintptr_t so that Go never
 * converts integers to unsafe.Pointer.
 */
#ifndef KCAND_DRIVER_H
#define KCAND_DRIVER_H

#include <stddef.h>
#include <stdint.h>

typedef int kc_result;                   /* CUresult */
typedef unsigned long long kc_deviceptr; /* CUdeviceptr */
typedef int kc_device;                   /* CUdevice */

/* CUDA_ERROR_NOT_INITIALIZED: returned by every wrapper before the driver is loaded. */
#define KC_NOT_LOADED 3

/* Not a CUresult (those are never negative): returned by the wrapper of an
 * optional entry point that this driver does not export. */
#define KC_MISSING_SYMBOL (-1)

/* CU_IPC_HANDLE_SIZE */
#define KC_IPC_HANDLE_SIZE 64

/* Kernel parameters are copied into C stack storage of this size; CUDA
 * 12.1+ accepts up to 32764 bytes of parameters on Volta and newer. */
#define KC_MAX_PARAM_BYTES 32764
#define KC_MAX_PARAMS 1024

/* Loading. kc_driver_open returns 0 on success, or -1 with a message. */
int kc_driver_open(const char *path, char *message, size_t message_size);
const char *kc_error_name(kc_result code);
const char *kc_error_string(kc_result code);
kc_result kc_init(void);
kc_result kc_driver_version(int *version);

/* Devices: these need no context. */
kc_result kc_device_count(int *count);
kc_result kc_device_get(kc_device *device, int ordinal);
kc_result kc_device_name(char *name, int length, kc_device device);
kc_result kc_device_uuid(unsigned char *uuid16, kc_device device);
kc_result kc_device_total_mem(size_t *bytes, kc_device device);
kc_result kc_device_attribute(int *value, int attribute, kc_device device);

/* Contexts and threads. A thread is "bound" to a context when kcand made
 * the context current on it and remembers so in thread-local storage. */
kc_result kc_primary_ctx_retain(uintptr_t *context, kc_device device);
kc_result kc_primary_ctx_release(kc_device device);
kc_result kc_thread_bind(uintptr_t context);
kc_result kc_thread_restore(uintptr_t previous);
uintptr_t kc_thread_bound(void);
kc_result kc_ctx_synchronize(uintptr_t context);
kc_result kc_mem_get_info(size_t *free_bytes, size_t *total_bytes);

/* Memory management: run on a bound thread. */
kc_result kc_mem_alloc(kc_deviceptr *pointer, size_t bytes);
kc_result kc_mem_free(kc_deviceptr pointer);
kc_result kc_mem_alloc_host(void **pointer, size_t bytes);
kc_result kc_mem_free_host(void *pointer);

/* Stream-ordered work: each call makes context current for its own
 * duration when the calling thread is not bound to it. */
kc_result kc_memcpy_htod_async(uintptr_t context, kc_deviceptr dst, const void *src, size_t bytes, uintptr_t stream);
kc_result kc_memcpy_dtoh_async(uintptr_t context, void *dst, kc_deviceptr src, size_t bytes, uintptr_t stream);
kc_result kc_memcpy_dtod_async(uintptr_t context, kc_deviceptr dst, kc_deviceptr src, size_t bytes, uintptr_t stream);
kc_result kc_memset_d8_async(uintptr_t context, kc_deviceptr dst, unsigned char value, size_t bytes, uintptr_t stream);
/* Copy with pageable (Go) memory: enqueue and wait in one call, so the
 * driver never touches Go memory after the call returns. */
kc_result kc_memcpy_htod_wait(uintptr_t context, kc_deviceptr dst, const void *src, size_t bytes, uintptr_t stream);
kc_result kc_memcpy_dtoh_wait(uintptr_t context, void *dst, kc_deviceptr src, size_t bytes, uintptr_t stream);

/* Streams and events. */
kc_result kc_stream_create(uintptr_t *stream, unsigned int flags);
kc_result kc_stream_destroy(uintptr_t stream);
kc_result kc_stream_synchronize(uintptr_t context, uintptr_t stream);
kc_result kc_stream_query(uintptr_t context, uintptr_t stream);
kc_result kc_stream_wait_event(uintptr_t context, uintptr_t stream, uintptr_t event);
kc_result kc_event_create(uintptr_t *event, unsigned int flags);
kc_result kc_event_destroy(uintptr_t event);
kc_result kc_event_record(uintptr_t context, uintptr_t event, uintptr_t stream);
kc_result kc_event_synchronize(uintptr_t context, uintptr_t event);
kc_result kc_event_query(uintptr_t context, uintptr_t event);
kc_result kc_event_elapsed(uintptr_t context, float *milliseconds, uintptr_t start, uintptr_t end);

/* Interprocess memory and events. */
kc_result kc_ipc_get_mem_handle(unsigned char *handle64, kc_deviceptr pointer);
kc_result kc_ipc_open_mem_handle(kc_deviceptr *pointer, const unsigned char *handle64, unsigned int flags);
kc_result kc_ipc_close_mem_handle(kc_deviceptr pointer);
kc_result kc_ipc_get_event_handle(unsigned char *handle64, uintptr_t event);
kc_result kc_ipc_open_event_handle(uintptr_t *event, const unsigned char *handle64);

/* Modules and functions. */
kc_result kc_module_load(uintptr_t *module, const void *image, char *error_log, size_t error_log_size);
kc_result kc_module_unload(uintptr_t module);
kc_result kc_module_get_function(uintptr_t *function, uintptr_t module, const char *name);
kc_result kc_module_get_global(kc_deviceptr *pointer, size_t *bytes, uintptr_t module, const char *name);
kc_result kc_func_get_attribute(int *value, int attribute, uintptr_t function);
kc_result kc_func_set_attribute(uintptr_t function, int attribute, int value);
kc_result kc_occupancy_max_active_blocks(int *blocks, uintptr_t function, int block_size, size_t dynamic_shared_bytes);
/* Optional (CUDA 12.4+): KC_MISSING_SYMBOL on older drivers. */
kc_result kc_func_get_param_info(size_t *offset, size_t *size, uintptr_t function, size_t index);

/* Optional (CUDA 12.0+): encodes a tiled tensor map (CUtensorMap, 128
 * bytes written to map128 on success) over the tensor at address, with the
 * context current for the call. rank arrays of dims,
 * box and element strides, rank-1 strides in bytes; data_type, swizzle
 * and l2_promotion are the driver's enum values. */
kc_result kc_tensor_map_encode_tiled(uintptr_t context, unsigned char *map128, int data_type, unsigned int rank, kc_deviceptr address,
                                     const unsigned long long *dims, const unsigned long long *strides,
                                     const unsigned int *box, const unsigned int *element_strides, int swizzle, int l2_promotion);

/* Graphs, all optional. Capture and graph launch are stream-ordered (the
 * context is made current for the call when needed); instantiating and
 * destroying run on a bound thread. mode is a CUstreamCaptureMode. */
kc_result kc_stream_begin_capture(uintptr_t context, uintptr_t stream, int mode);
kc_result kc_stream_end_capture(uintptr_t context, uintptr_t stream, uintptr_t *graph);
kc_result kc_graph_instantiate(uintptr_t *exec, uintptr_t graph);
kc_result kc_graph_destroy(uintptr_t graph);
kc_result kc_graph_exec_destroy(uintptr_t exec);
kc_result kc_graph_launch(uintptr_t context, uintptr_t exec, uintptr_t stream);

/* CUlaunchAttribute and CUlaunchConfig of cuda.h (CUDA 12.0+), written out
 * so that building needs no CUDA header: an attribute is its id, padding to
 * 8 bytes, and a 64-byte value union; the configuration is the launch
 * shape, the stream, and the attribute array. */
#define KC_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION 6
struct kc_launch_attribute {
	int id;
	char pad[4];
	union {
		char bytes[64];
		void *align; /* the union holds pointers in cuda.h */
		int allowed; /* programmaticStreamSerializationAllowed */
	} value;
};
struct kc_launch_config {
	unsigned int grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes;
	void *stream;
	struct kc_launch_attribute *attrs;
	unsigned int attr_count;
};

/* kc_launch copies the packed parameters (data, with each parameter's
 * offset) into C storage, points kernelParams at it, and calls
 * cuLaunchKernel repeat times (repeat > 1 only to measure the launch floor).
 * With programmatic set and a driver that has cuLaunchKernelEx (CUDA 12.0+),
 * the launch allows programmatic stream serialization: the kernel may start
 * before the previous work in the stream has finished, and waits for it
 * with griddepcontrol.wait; on older drivers it is a plain launch. */
kc_result kc_launch(uintptr_t context, uintptr_t function,
                    unsigned int grid_x, unsigned int grid_y, unsigned int grid_z,
                    unsigned int block_x, unsigned int block_y, unsigned int block_z,
                    unsigned int shared_bytes, uintptr_t stream,
                    const void *data, size_t data_size, const uint32_t *offsets, int count,
                    int repeat, int programmatic);

#endif
