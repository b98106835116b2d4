/*
 * fakecuda.c is a stand-in libcuda.so.1 for machines without a GPU. It lets
 * the package's GPU tests (and cudabench) run through the real dlopen, cgo
 * and threading code; it cannot check the real driver's ABI.
 *
 * It is strict where kcand could go wrong:
 *   - every call that needs a context fails with CUDA_ERROR_INVALID_CONTEXT
 *     unless the fake context is current on the calling thread;
 *   - copies, memsets and kernels must stay inside a known allocation;
 *   - kernel parameters are read from kernelParams with the types and
 *     alignment the real kernels declare;
 *   - dynamic shared memory above the function's limit fails the launch;
 *   - stream capture keeps the real driver's rules: waiting for a capturing
 *     stream or the context fails and invalidates the capture, cuMemAlloc
 *     fails (and invalidates) under a GLOBAL capture on any thread or a
 *     THREAD_LOCAL one on the calling thread, and a strict capture must end
 *     on the thread that began it.
 * Memory is memfd-backed so another process can map it through an "IPC
 * handle" (/proc/<pid>/fd/<fd>). Kernels run on the CPU, synchronously; a
 * capture records kernel launches only (other work on a capturing stream
 * fails with CUDA_ERROR_NOT_SUPPORTED) and a graph launch replays them.
 *
 * Build: gcc -shared -fPIC -o libcuda.so.1 fakecuda.c -lpthread
 * With -DFAKECUDA_DRIVER_VERSION=12000 it poses as a CUDA 12.0 driver,
 * which lacks cuFuncGetParamInfo.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#ifndef FAKECUDA_DRIVER_VERSION
#define FAKECUDA_DRIVER_VERSION 13000
#endif

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef struct { char reserved[64]; } CUipcHandle;

enum {
	OK = 0,
	INVALID_VALUE = 1,
	OUT_OF_MEMORY = 2,
	NOT_INITIALIZED = 3,
	INVALID_DEVICE = 101,
	INVALID_IMAGE = 200,
	INVALID_CONTEXT = 201,
	INVALID_PTX = 218,
	INVALID_HANDLE = 400,
	ILLEGAL_STATE = 401,
	NOT_FOUND = 500,
	ILLEGAL_ADDRESS = 700,
	NOT_SUPPORTED = 801,
	CAPTURE_UNSUPPORTED = 900,
	CAPTURE_INVALIDATED = 901,
	CAPTURE_WRONG_THREAD = 908,
};

static int initialized;
static int context_storage;
#define FAKE_CONTEXT ((void *)&context_storage)
static __thread void *current;

#define NEED_CONTEXT()                   \
	do {                                 \
		if (!initialized)                \
			return NOT_INITIALIZED;      \
		if (current != FAKE_CONTEXT)     \
			return INVALID_CONTEXT;      \
	} while (0)

/* Defined with stream capture below: whether a capture forbids waiting for
 * the whole context, or a potentially unsafe call on this thread. Both
 * invalidate the captures that forbid the call. */
static CUresult capture_allows_context_wait(void);
static CUresult capture_allows_unsafe_call(void);

/* ---- errors, versions, devices ---- */

CUresult cuInit(unsigned int flags) {
	if (flags != 0)
		return INVALID_VALUE;
	initialized = 1;
	return OK;
}

CUresult cuDriverGetVersion(int *v) { *v = FAKECUDA_DRIVER_VERSION; return OK; }

static const char *name_of(CUresult e) {
	switch (e) {
	case OK: return "CUDA_SUCCESS";
	case INVALID_VALUE: return "CUDA_ERROR_INVALID_VALUE";
	case OUT_OF_MEMORY: return "CUDA_ERROR_OUT_OF_MEMORY";
	case NOT_INITIALIZED: return "CUDA_ERROR_NOT_INITIALIZED";
	case INVALID_DEVICE: return "CUDA_ERROR_INVALID_DEVICE";
	case INVALID_IMAGE: return "CUDA_ERROR_INVALID_IMAGE";
	case INVALID_CONTEXT: return "CUDA_ERROR_INVALID_CONTEXT";
	case INVALID_PTX: return "CUDA_ERROR_INVALID_PTX";
	case INVALID_HANDLE: return "CUDA_ERROR_INVALID_HANDLE";
	case ILLEGAL_STATE: return "CUDA_ERROR_ILLEGAL_STATE";
	case NOT_FOUND: return "CUDA_ERROR_NOT_FOUND";
	case ILLEGAL_ADDRESS: return "CUDA_ERROR_ILLEGAL_ADDRESS";
	case NOT_SUPPORTED: return "CUDA_ERROR_NOT_SUPPORTED";
	case CAPTURE_UNSUPPORTED: return "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED";
	case CAPTURE_INVALIDATED: return "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED";
	case CAPTURE_WRONG_THREAD: return "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD";
	}
	return NULL;
}

CUresult cuGetErrorName(CUresult e, const char **s) {
	*s = name_of(e);
	return *s ? OK : INVALID_VALUE;
}

CUresult cuGetErrorString(CUresult e, const char **s) { return cuGetErrorName(e, s); }

CUresult cuDeviceGetCount(int *n) {
	if (!initialized)
		return NOT_INITIALIZED;
	*n = 1;
	return OK;
}

CUresult cuDeviceGet(int *d, int ordinal) {
	if (!initialized)
		return NOT_INITIALIZED;
	if (ordinal != 0)
		return INVALID_DEVICE;
	*d = 0;
	return OK;
}

CUresult cuDeviceGetName(char *name, int length, int dev) {
	if (dev != 0)
		return INVALID_DEVICE;
	snprintf(name, length, "Fake H200 (kcand test driver)");
	return OK;
}

CUresult cuDeviceGetUuid_v2(unsigned char *uuid, int dev) {
	if (dev != 0)
		return INVALID_DEVICE;
	for (int i = 0; i < 16; i++)
		uuid[i] = (unsigned char)(i * 17);
	return OK;
}

CUresult cuDeviceTotalMem_v2(size_t *bytes, int dev) {
	if (dev != 0)
		return INVALID_DEVICE;
	*bytes = (size_t)1 << 30;
	return OK;
}

CUresult cuDeviceGetAttribute(int *v, int attribute, int dev) {
	if (dev != 0)
		return INVALID_DEVICE;
	switch (attribute) {
	case 1: *v = 1024; break;         /* MAX_THREADS_PER_BLOCK */
	case 2: case 3: *v = 1024; break; /* MAX_BLOCK_DIM_X, Y */
	case 4: *v = 64; break;           /* MAX_BLOCK_DIM_Z */
	case 5: *v = 2147483647; break;   /* MAX_GRID_DIM_X */
	case 6: case 7: *v = 65535; break;
	case 8: *v = 49152; break;        /* MAX_SHARED_MEMORY_PER_BLOCK */
	case 10: *v = 32; break;          /* WARP_SIZE */
	case 16: *v = 132; break;         /* MULTIPROCESSOR_COUNT */
	case 33: *v = 0x17; break;        /* PCI_BUS_ID */
	case 34: *v = 0; break;           /* PCI_DEVICE_ID */
	case 38: *v = 60 << 20; break;    /* L2_CACHE_SIZE */
	case 39: *v = 2048; break;        /* MAX_THREADS_PER_MULTIPROCESSOR */
	case 50: *v = 0; break;           /* PCI_DOMAIN_ID */
	case 75: *v = 9; break;           /* COMPUTE_CAPABILITY_MAJOR */
	case 76: *v = 0; break;           /* COMPUTE_CAPABILITY_MINOR */
	case 81: *v = 233472; break;      /* MAX_SHARED_MEMORY_PER_MULTIPROCESSOR */
	case 82: *v = 65536; break;       /* MAX_REGISTERS_PER_MULTIPROCESSOR */
	case 97: *v = 232448; break;      /* MAX_SHARED_MEMORY_PER_BLOCK_OPTIN */
	case 106: *v = 32; break;         /* MAX_BLOCKS_PER_MULTIPROCESSOR */
	default: return INVALID_VALUE;
	}
	return OK;
}

/* ---- contexts ---- */

static int context_refs;

CUresult cuDevicePrimaryCtxRetain(void **ctx, int dev) {
	if (!initialized)
		return NOT_INITIALIZED;
	if (dev != 0)
		return INVALID_DEVICE;
	__sync_fetch_and_add(&context_refs, 1);
	*ctx = FAKE_CONTEXT;
	return OK;
}

CUresult cuDevicePrimaryCtxRelease_v2(int dev) {
	if (dev != 0)
		return INVALID_DEVICE;
	return __sync_fetch_and_sub(&context_refs, 1) > 0 ? OK : INVALID_CONTEXT;
}

CUresult cuCtxSetCurrent(void *ctx) {
	if (ctx != NULL && ctx != FAKE_CONTEXT)
		return INVALID_CONTEXT;
	current = ctx;
	return OK;
}

CUresult cuCtxGetCurrent(void **ctx) {
	*ctx = current;
	return OK;
}

CUresult cuCtxSynchronize(void) { NEED_CONTEXT(); return capture_allows_context_wait(); }

/* ---- memory: memfd-backed so that another process can map it ---- */

typedef struct {
	char *base;
	size_t size;
	int fd;     /* -1 for a mapping of another process's memory */
	int in_use;
} region;

#define MAX_REGIONS 4096
static region regions[MAX_REGIONS];
static pthread_mutex_t regions_lock = PTHREAD_MUTEX_INITIALIZER;

static region *region_at(CUdeviceptr p) {
	for (int i = 0; i < MAX_REGIONS; i++)
		if (regions[i].in_use && (CUdeviceptr)(uintptr_t)regions[i].base == p)
			return &regions[i];
	return NULL;
}

/* inside reports whether [p, p+n) lies in one known region. */
static int inside(CUdeviceptr p, size_t n) {
	pthread_mutex_lock(&regions_lock);
	int ok = 0;
	for (int i = 0; i < MAX_REGIONS && !ok; i++) {
		region *r = &regions[i];
		CUdeviceptr base = (CUdeviceptr)(uintptr_t)r->base;
		ok = r->in_use && p >= base && n <= r->size && p - base <= r->size - n;
	}
	pthread_mutex_unlock(&regions_lock);
	return ok;
}

static CUresult add_region(char *base, size_t size, int fd) {
	pthread_mutex_lock(&regions_lock);
	for (int i = 0; i < MAX_REGIONS; i++) {
		if (!regions[i].in_use) {
			regions[i] = (region){base, size, fd, 1};
			pthread_mutex_unlock(&regions_lock);
			return OK;
		}
	}
	pthread_mutex_unlock(&regions_lock);
	return OUT_OF_MEMORY;
}

static CUresult drop_region(CUdeviceptr p, int want_owned) {
	pthread_mutex_lock(&regions_lock);
	region *r = region_at(p);
	if (r == NULL || (want_owned != (r->fd >= 0))) {
		pthread_mutex_unlock(&regions_lock);
		return INVALID_VALUE;
	}
	munmap(r->base, r->size);
	if (r->fd >= 0)
		close(r->fd);
	r->in_use = 0;
	pthread_mutex_unlock(&regions_lock);
	return OK;
}

CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total) {
	NEED_CONTEXT();
	*free_bytes = (size_t)1 << 29;
	*total = (size_t)1 << 30;
	return OK;
}

CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t bytes) {
	NEED_CONTEXT();
	CUresult allowed = capture_allows_unsafe_call();
	if (allowed != OK)
		return allowed;
	if (bytes == 0)
		return INVALID_VALUE;
	int fd = memfd_create("fakecuda", 0);
	if (fd < 0 || ftruncate(fd, (off_t)bytes) != 0)
		return OUT_OF_MEMORY;
	char *base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (base == MAP_FAILED) {
		close(fd);
		return OUT_OF_MEMORY;
	}
	memset(base, 0xEE, bytes); /* real device memory starts as garbage */
	CUresult r = add_region(base, bytes, fd);
	if (r != OK) {
		munmap(base, bytes);
		close(fd);
		return r;
	}
	*p = (CUdeviceptr)(uintptr_t)base;
	return OK;
}

CUresult cuMemFree_v2(CUdeviceptr p) { NEED_CONTEXT(); return drop_region(p, 1); }

CUresult cuMemAllocHost_v2(void **p, size_t bytes) {
	NEED_CONTEXT();
	*p = malloc(bytes);
	return *p ? OK : OUT_OF_MEMORY;
}

CUresult cuMemFreeHost(void *p) { NEED_CONTEXT(); free(p); return OK; }

/* ---- streams and events ---- */

#define STREAM_MAGIC 0x57524541u
#define EVENT_MAGIC 0x45564e54u

typedef struct graph graph;
enum capture_state { NOT_CAPTURING, CAPTURING, INVALIDATED };
enum { MODE_GLOBAL, MODE_THREAD_LOCAL, MODE_RELAXED }; /* CUstreamCaptureMode */

typedef struct {
	unsigned magic, flags;
	enum capture_state capture;
	int mode;
	pthread_t thread; /* that began the capture */
	graph *graph;     /* being captured */
} stream;
typedef struct { unsigned magic, flags; int recorded; struct timespec when; } event;

static int valid_stream(void *s) { return s == NULL || ((stream *)s)->magic == STREAM_MAGIC; }
static int valid_event(void *e) { return e != NULL && ((event *)e)->magic == EVENT_MAGIC; }
static int capturing(void *s) { return s != NULL && ((stream *)s)->capture != NOT_CAPTURING; }

/* stream_takes_work admits copies, memsets and events: the fake captures
 * kernel launches only. */
static CUresult stream_takes_work(void *s) {
	if (!valid_stream(s))
		return INVALID_HANDLE;
	return capturing(s) ? NOT_SUPPORTED : OK;
}

static void end_capture(stream *st);

CUresult cuStreamCreate(void **s, unsigned int flags) {
	NEED_CONTEXT();
	if (flags > 1)
		return INVALID_VALUE;
	stream *st = calloc(1, sizeof(stream));
	st->flags = flags;
	st->magic = STREAM_MAGIC;
	*s = st;
	return OK;
}

CUresult cuStreamDestroy_v2(void *s) {
	NEED_CONTEXT();
	if (s == NULL || !valid_stream(s))
		return INVALID_HANDLE;
	end_capture(s);
	((stream *)s)->magic = 0;
	free(s);
	return OK;
}

/* stream_wait is what waiting for a stream does to its capture: a wait
 * cannot be captured, so it fails and spoils the capture. */
static CUresult stream_wait(void *s) {
	if (!valid_stream(s))
		return INVALID_HANDLE;
	if (capturing(s)) {
		((stream *)s)->capture = INVALIDATED;
		return CAPTURE_UNSUPPORTED;
	}
	return OK;
}

CUresult cuStreamSynchronize(void *s) { NEED_CONTEXT(); return stream_wait(s); }
CUresult cuStreamQuery(void *s) { NEED_CONTEXT(); return stream_wait(s); }

CUresult cuStreamWaitEvent(void *s, void *e, unsigned int flags) {
	NEED_CONTEXT();
	if (!valid_event(e))
		return INVALID_HANDLE;
	CUresult r = stream_takes_work(s);
	if (r != OK)
		return r;
	return flags == 0 ? OK : INVALID_VALUE;
}

CUresult cuEventCreate(void **e, unsigned int flags) {
	NEED_CONTEXT();
	if (flags & ~7u)
		return INVALID_VALUE;
	if ((flags & 4) && !(flags & 2)) /* INTERPROCESS needs DISABLE_TIMING */
		return INVALID_VALUE;
	event *ev = calloc(1, sizeof(event));
	ev->magic = EVENT_MAGIC;
	ev->flags = flags;
	*e = ev;
	return OK;
}

CUresult cuEventDestroy_v2(void *e) {
	NEED_CONTEXT();
	if (!valid_event(e))
		return INVALID_HANDLE;
	((event *)e)->magic = 0;
	free(e);
	return OK;
}

CUresult cuEventRecord(void *e, void *s) {
	NEED_CONTEXT();
	if (!valid_event(e))
		return INVALID_HANDLE;
	CUresult r = stream_takes_work(s);
	if (r != OK)
		return r;
	event *ev = e;
	ev->recorded = 1;
	clock_gettime(CLOCK_MONOTONIC, &ev->when);
	return OK;
}

CUresult cuEventSynchronize(void *e) { NEED_CONTEXT(); return valid_event(e) ? OK : INVALID_HANDLE; }
CUresult cuEventQuery(void *e) { NEED_CONTEXT(); return valid_event(e) ? OK : INVALID_HANDLE; }

CUresult cuEventElapsedTime_v2(float *ms, void *start, void *end) {
	NEED_CONTEXT();
	if (!valid_event(start) || !valid_event(end))
		return INVALID_HANDLE;
	event *a = start, *b = end;
	if ((a->flags | b->flags) & 2 || !a->recorded || !b->recorded)
		return INVALID_HANDLE;
	*ms = (float)((b->when.tv_sec - a->when.tv_sec) * 1e3 + (b->when.tv_nsec - a->when.tv_nsec) / 1e6);
	return OK;
}

/* ---- IPC ---- */

#define IPC_MAGIC 0x4b43414eu

typedef struct {
	unsigned magic;
	int pid, fd;
	unsigned long long size;
} ipc_payload;

CUresult cuIpcGetMemHandle(CUipcHandle *h, CUdeviceptr p) {
	NEED_CONTEXT();
	pthread_mutex_lock(&regions_lock);
	region *r = region_at(p);
	if (r == NULL || r->fd < 0) {
		pthread_mutex_unlock(&regions_lock);
		return INVALID_VALUE;
	}
	ipc_payload payload = {IPC_MAGIC, getpid(), r->fd, r->size};
	pthread_mutex_unlock(&regions_lock);
	memset(h, 0, sizeof(*h));
	memcpy(h, &payload, sizeof(payload));
	return OK;
}

CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *p, CUipcHandle h, unsigned int flags) {
	NEED_CONTEXT();
	ipc_payload payload;
	memcpy(&payload, &h, sizeof(payload));
	if (flags != 1 || payload.magic != IPC_MAGIC) /* kcand always asks for lazy peer access */
		return INVALID_VALUE;
	if (payload.pid == getpid())
		return INVALID_CONTEXT; /* what the real driver does in the exporting process */
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/fd/%d", payload.pid, payload.fd);
	int fd = open(path, O_RDWR);
	if (fd < 0)
		return INVALID_HANDLE;
	char *base = mmap(NULL, payload.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (base == MAP_FAILED)
		return INVALID_HANDLE;
	CUresult r = add_region(base, payload.size, -1);
	if (r != OK) {
		munmap(base, payload.size);
		return r;
	}
	*p = (CUdeviceptr)(uintptr_t)base;
	return OK;
}

CUresult cuIpcCloseMemHandle(CUdeviceptr p) { NEED_CONTEXT(); return drop_region(p, 0); }

CUresult cuIpcGetEventHandle(CUipcHandle *h, void *e) {
	NEED_CONTEXT();
	if (!valid_event(e) || !(((event *)e)->flags & 4))
		return INVALID_VALUE;
	ipc_payload payload = {IPC_MAGIC ^ 1, getpid(), 0, 0};
	memset(h, 0, sizeof(*h));
	memcpy(h, &payload, sizeof(payload));
	return OK;
}

CUresult cuIpcOpenEventHandle(void **e, CUipcHandle h) {
	NEED_CONTEXT();
	ipc_payload payload;
	memcpy(&payload, &h, sizeof(payload));
	if (payload.magic != (IPC_MAGIC ^ 1))
		return INVALID_VALUE;
	if (payload.pid == getpid())
		return INVALID_CONTEXT;
	return cuEventCreate(e, 2 | 4);
}

/* ---- copies ---- */

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, void *s) {
	NEED_CONTEXT();
	CUresult r = stream_takes_work(s);
	if (r != OK)
		return r;
	if (!inside(dst, n))
		return INVALID_VALUE;
	memcpy((void *)(uintptr_t)dst, src, n);
	return OK;
}

CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, void *s) {
	NEED_CONTEXT();
	CUresult r = stream_takes_work(s);
	if (r != OK)
		return r;
	if (!inside(src, n))
		return INVALID_VALUE;
	memcpy(dst, (void *)(uintptr_t)src, n);
	return OK;
}

CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, void *s) {
	NEED_CONTEXT();
	CUresult r = stream_takes_work(s);
	if (r != OK)
		return r;
	if (!inside(dst, n) || !inside(src, n))
		return INVALID_VALUE;
	memmove((void *)(uintptr_t)dst, (void *)(uintptr_t)src, n);
	return OK;
}

CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, void *s) {
	NEED_CONTEXT();
	CUresult r = stream_takes_work(s);
	if (r != OK)
		return r;
	if (!inside(dst, n))
		return INVALID_VALUE;
	memset((void *)(uintptr_t)dst, v, n);
	return OK;
}

/* ---- modules and kernels ---- */

enum kernel_kind { FILL, SPIN_AFFINE, SHARED_SUM, EMPTY, ADD, SCALE_FLOAT, PDL_PRODUCER, PDL_CONSUMER, TMA_COPY };

/* The parameter sizes each test kernel declares, in order; each parameter
 * lies at its natural alignment, as the compiler lays them out (a
 * CUtensorMap, 128 bytes, at 64). */
#define MAX_KERNEL_PARAMS 5
typedef struct {
	int count;
	int sizes[MAX_KERNEL_PARAMS];
} param_layout;

static const param_layout layouts[] = {
	[FILL] = {3, {8, 4, 4}},           /* unsigned *out, unsigned n, unsigned seed */
	[SPIN_AFFINE] = {4, {8, 8, 4, 4}}, /* unsigned *x, unsigned long long ns, unsigned mul, unsigned add */
	[SHARED_SUM] = {2, {8, 4}},        /* unsigned *out, unsigned words */
	[EMPTY] = {2, {8, 4}},             /* float *p, int n */
	[ADD] = {2, {8, 4}},               /* unsigned *x, unsigned delta */
	[SCALE_FLOAT] = {3, {8, 4, 4}},    /* float *data, float factor, unsigned n */
	[PDL_PRODUCER] = {4, {8, 8, 4, 8}}, /* unsigned *p, unsigned long long ns, unsigned v, unsigned long long *done */
	[PDL_CONSUMER] = {3, {8, 8, 8}},    /* const unsigned *p, unsigned *q, unsigned long long *started */
	[TMA_COPY] = {5, {128, 8, 4, 4, 4}}, /* CUtensorMap map, unsigned char *out, unsigned bytes, int c0, int c1 */
};

static size_t param_align(int size) { return size > 8 ? 64 : (size_t)size; }

static size_t param_offset(const param_layout *layout, int index) {
	size_t offset = 0;
	for (int i = 0;; i++) {
		size_t align = param_align(layout->sizes[i]);
		offset = (offset + align - 1) & ~(align - 1);
		if (i == index)
			return offset;
		offset += (size_t)layout->sizes[i];
	}
}

typedef struct {
	enum kernel_kind kind;
	int max_dynamic_shared;
} function;

typedef struct { unsigned magic; } module;
#define MODULE_MAGIC 0x4d4f444cu

CUresult cuModuleLoadDataEx(void **m, const void *image, unsigned int n, int *options, void **values) {
	NEED_CONTEXT();
	/* kcand passes exactly the error log buffer and its size. */
	if (n != 2 || options[0] != 5 || options[1] != 6 || values[0] == NULL || (uintptr_t)values[1] < 16)
		return INVALID_VALUE;
	const char *text = image;
	int elf = memcmp(image, "\x7f" "ELF", 4) == 0;
	if (!elf && strstr(text, ".version") == NULL) {
		snprintf(values[0], (size_t)(uintptr_t)values[1], "fake jit: not a cubin or PTX");
		return INVALID_IMAGE;
	}
	if (!elf && strstr(text, "FAKE_JIT_ERROR") != NULL) {
		snprintf(values[0], (size_t)(uintptr_t)values[1], "ptxas fatal   : fake syntax error");
		return INVALID_PTX;
	}
	module *mod = calloc(1, sizeof(module));
	mod->magic = MODULE_MAGIC;
	*m = mod;
	return OK;
}

CUresult cuModuleUnload(void *m) {
	NEED_CONTEXT();
	if (m == NULL || ((module *)m)->magic != MODULE_MAGIC)
		return INVALID_HANDLE;
	((module *)m)->magic = 0;
	free(m);
	return OK;
}

CUresult cuModuleGetFunction(void **f, void *m, const char *name) {
	NEED_CONTEXT();
	if (m == NULL || ((module *)m)->magic != MODULE_MAGIC)
		return INVALID_HANDLE;
	enum kernel_kind kind;
	if (strcmp(name, "kcand_fill") == 0)
		kind = FILL;
	else if (strcmp(name, "kcand_spin_affine") == 0)
		kind = SPIN_AFFINE;
	else if (strcmp(name, "kcand_shared_sum") == 0)
		kind = SHARED_SUM;
	else if (strcmp(name, "kcand_empty") == 0)
		kind = EMPTY;
	else if (strcmp(name, "kcand_add") == 0)
		kind = ADD;
	else if (strcmp(name, "_Z11kcand_scaleIfEvPT_S0_j") == 0)
		kind = SCALE_FLOAT;
	else if (strcmp(name, "kc_pdl_producer") == 0)
		kind = PDL_PRODUCER;
	else if (strcmp(name, "kc_pdl_consumer") == 0)
		kind = PDL_CONSUMER;
	else if (strcmp(name, "kcand_tma_copy") == 0)
		kind = TMA_COPY;
	else
		return NOT_FOUND;
	function *fn = calloc(1, sizeof(function));
	fn->kind = kind;
	fn->max_dynamic_shared = 48 << 10;
	*f = fn;
	return OK;
}

CUresult cuModuleGetGlobal_v2(CUdeviceptr *p, size_t *bytes, void *m, const char *name) {
	NEED_CONTEXT();
	return NOT_FOUND;
}

CUresult cuFuncGetAttribute(int *v, int attribute, void *f) {
	NEED_CONTEXT();
	switch (attribute) {
	case 0: *v = 1024; break; /* MAX_THREADS_PER_BLOCK */
	case 1: case 2: case 3: *v = 0; break;
	case 4: *v = 16; break;   /* NUM_REGS */
	case 5: *v = 80; break;   /* PTX_VERSION */
	case 6: *v = 90; break;   /* BINARY_VERSION */
	case 8: *v = ((function *)f)->max_dynamic_shared; break;
	default: return INVALID_VALUE;
	}
	return OK;
}

CUresult cuFuncSetAttribute(void *f, int attribute, int value) {
	NEED_CONTEXT();
	if (attribute != 8 || value < 0 || value > 232448)
		return INVALID_VALUE;
	((function *)f)->max_dynamic_shared = value;
	return OK;
}

CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *n, void *f, int block_size, size_t smem) {
	NEED_CONTEXT();
	if (block_size <= 0)
		return INVALID_VALUE;
	*n = 2048 / block_size;
	return OK;
}

#if FAKECUDA_DRIVER_VERSION >= 12040
CUresult cuFuncGetParamInfo(void *f, size_t index, size_t *offset, size_t *size) {
	NEED_CONTEXT();
	if (f == NULL)
		return INVALID_HANDLE;
	const param_layout *layout = &layouts[((function *)f)->kind];
	if (offset == NULL || index >= (size_t)layout->count)
		return INVALID_VALUE;
	*offset = param_offset(layout, (int)index);
	if (size != NULL)
		*size = (size_t)layout->sizes[index];
	return OK;
}
#endif

/* A launch as a graph holds it: the parameter values are copied when the
 * launch is captured, as the real driver copies them. */
#define PARAM_STORAGE 256
typedef struct {
	function *fn;
	unsigned grid[3], block[3], shared;
	unsigned char storage[PARAM_STORAGE];
} launch_record;

/* check_args insists that each parameter pointer is set and aligned for
 * its size (up to 16 bytes: the driver copies larger ones bytewise). */
#define ALIGNED(p, a) (((uintptr_t)(p) & ((a) - 1)) == 0)

static CUresult check_args(void **params, const param_layout *layout) {
	if (params == NULL)
		return layout->count == 0 ? OK : INVALID_VALUE;
	for (int i = 0; i < layout->count; i++)
		if (params[i] == NULL || !ALIGNED(params[i], layout->sizes[i] > 16 ? 16 : layout->sizes[i]))
			return INVALID_VALUE;
	return OK;
}

/* ARG reads parameter i as type T; check_args has vouched for it. */
#define ARG(T, i) (*(T *)params[i])

/* A tensor map as the fake encodes it into the 128 opaque bytes: the
 * geometry kcand_tma_copy needs, behind a magic number. */
#define TENSOR_MAP_MAGIC 0x544d4150u
typedef struct {
	unsigned magic;
	int data_type, swizzle;
	unsigned rank;
	CUdeviceptr address;
	unsigned long long dims[5], strides[4];
	unsigned box[5];
} tensor_map;
_Static_assert(sizeof(tensor_map) <= 128, "a tensor map is 128 bytes");

static const int tensor_type_sizes[] = {1, 2, 4, 4, 8, 8, 2, 4, 8, 2}; /* CUtensorMapDataType 0..9 */

#if FAKECUDA_DRIVER_VERSION >= 12000
/* cuTensorMapEncodeTiled with the rules the driver documents; the fake
 * needs no context for it either. */
CUresult cuTensorMapEncodeTiled(void *map, int data_type, unsigned rank, void *address, const unsigned long long *dims,
                                const unsigned long long *strides, const unsigned *box, const unsigned *element_strides,
                                int interleave, int swizzle, int l2_promotion, int oob_fill) {
	if (map == NULL || !ALIGNED(map, 64) || data_type < 0 || data_type > 9 || rank < 1 || rank > 5 || address == NULL ||
	    !ALIGNED(address, 16) || interleave != 0 || swizzle < 0 || swizzle > 3 || l2_promotion < 0 || l2_promotion > 3 ||
	    oob_fill < 0 || oob_fill > 1)
		return INVALID_VALUE;
	int size = tensor_type_sizes[data_type];
	for (unsigned i = 0; i < rank; i++) {
		if (dims[i] == 0 || dims[i] > (1ull << 32) || box[i] == 0 || box[i] > 256 || element_strides[i] != 1)
			return INVALID_VALUE;
		if (i + 1 < rank && (strides[i] % 16 != 0 || strides[i] >= (1ull << 40)))
			return INVALID_VALUE;
	}
	unsigned row = box[0] * (unsigned)size;
	if (row % 16 != 0 || (swizzle != 0 && row > (16u << swizzle)))
		return INVALID_VALUE;
	tensor_map t = {TENSOR_MAP_MAGIC, data_type, swizzle, rank, (CUdeviceptr)(uintptr_t)address, {0}, {0}, {0}};
	for (unsigned i = 0; i < rank; i++) {
		t.dims[i] = dims[i];
		t.box[i] = box[i];
		if (i + 1 < rank)
			t.strides[i] = strides[i];
	}
	memset(map, 0, 128);
	memcpy(map, &t, sizeof(t));
	return OK;
}
#endif

/* tma_copy is kcand_tma_copy on the CPU: the box of a 2D map at (c0, c1)
 * into out as shared memory would hold it, zeros past the tensor's end,
 * 16-byte chunks swizzled as the hardware does (chunk bits 4.. of an
 * offset XORed with its 128-byte row bits 7..). */
static CUresult tma_copy(void *const *params, unsigned shared) {
	tensor_map t;
	memcpy(&t, params[0], sizeof(t));
	unsigned char *out = (unsigned char *)(uintptr_t)ARG(CUdeviceptr, 1);
	unsigned bytes = ARG(unsigned, 2);
	int c0 = ARG(int, 3), c1 = ARG(int, 4);
	if (t.magic != TENSOR_MAP_MAGIC || t.rank != 2)
		return ILLEGAL_ADDRESS; /* not a map this fake encoded, or not 2D */
	size_t size = (size_t)tensor_type_sizes[t.data_type], row = t.box[0] * size;
	if (bytes != row * t.box[1] || (size_t)bytes + 8 > shared || !inside((CUdeviceptr)(uintptr_t)out, bytes))
		return ILLEGAL_ADDRESS; /* the barrier would wait forever, or the box overruns */
	size_t mask = ((size_t)1 << t.swizzle) - 1; /* none: 0, 32 B: 1, 64 B: 3, 128 B: 7 */
	for (size_t r = 0; r < t.box[1]; r++)
		for (size_t b = 0; b < row; b++) {
			long long x = c0 + (long long)(b / size), y = c1 + (long long)r;
			unsigned char v = 0;
			if (x >= 0 && y >= 0 && (unsigned long long)x < t.dims[0] && (unsigned long long)y < t.dims[1]) {
				CUdeviceptr p = t.address + (CUdeviceptr)y * t.strides[0] + (CUdeviceptr)x * size + b % size;
				if (!inside(p, 1))
					return ILLEGAL_ADDRESS;
				v = *(unsigned char *)(uintptr_t)p;
			}
			size_t o = r * row + b;
			out[o ^ (((o >> 7) & mask) << 4)] = v;
		}
	return OK;
}

/* run_kernel executes a checked launch on the CPU. */
static CUresult run_kernel(const function *fn, const unsigned grid[3], const unsigned block[3], unsigned shared, void **params) {
	unsigned long threads = (unsigned long)grid[0] * grid[1] * grid[2] * block[0] * block[1] * block[2];
	switch (fn->kind) {
	case FILL: {
		unsigned *out = (unsigned *)(uintptr_t)ARG(CUdeviceptr, 0);
		unsigned n = ARG(unsigned, 1), seed = ARG(unsigned, 2);
		unsigned long count = n < threads ? n : threads;
		if (count > 0 && !inside((CUdeviceptr)(uintptr_t)out, count * 4))
			return ILLEGAL_ADDRESS;
		for (unsigned long i = 0; i < count; i++)
			out[i] = (unsigned)i * seed + 7u;
		return OK;
	}
	case SPIN_AFFINE: {
		unsigned *x = (unsigned *)(uintptr_t)ARG(CUdeviceptr, 0);
		unsigned long long ns = ARG(unsigned long long, 1);
		if (!inside((CUdeviceptr)(uintptr_t)x, 4))
			return ILLEGAL_ADDRESS;
		struct timespec wait = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
		nanosleep(&wait, NULL);
		x[0] = x[0] * ARG(unsigned, 2) + ARG(unsigned, 3);
		return OK;
	}
	case SHARED_SUM: {
		unsigned *out = (unsigned *)(uintptr_t)ARG(CUdeviceptr, 0);
		unsigned words = ARG(unsigned, 1);
		if ((unsigned long)words * 4 > shared || !inside((CUdeviceptr)(uintptr_t)out, (size_t)grid[0] * 4))
			return ILLEGAL_ADDRESS;
		for (unsigned b = 0; b < grid[0]; b++) {
			unsigned sum = 0;
			for (unsigned i = 0; i < words; i++)
				sum += i;
			out[b] = sum;
		}
		return OK;
	}
	case EMPTY:
		return OK;
	case ADD: {
		unsigned *x = (unsigned *)(uintptr_t)ARG(CUdeviceptr, 0);
		if (!inside((CUdeviceptr)(uintptr_t)x, 4))
			return ILLEGAL_ADDRESS;
		x[0] += ARG(unsigned, 1);
		return OK;
	}
	case PDL_PRODUCER: {
		unsigned *out = (unsigned *)(uintptr_t)ARG(CUdeviceptr, 0);
		unsigned long long *done = (unsigned long long *)(uintptr_t)ARG(CUdeviceptr, 3);
		if (!inside((CUdeviceptr)(uintptr_t)out, (size_t)block[0] * 4) || !inside((CUdeviceptr)(uintptr_t)done, 8))
			return ILLEGAL_ADDRESS;
		for (unsigned i = 0; i < block[0]; i++)
			out[i] = ARG(unsigned, 2) + i;
		*done = 2000;
		return OK;
	}
	case PDL_CONSUMER: {
		const unsigned *in = (const unsigned *)(uintptr_t)ARG(CUdeviceptr, 0);
		unsigned *out = (unsigned *)(uintptr_t)ARG(CUdeviceptr, 1);
		unsigned long long *started = (unsigned long long *)(uintptr_t)ARG(CUdeviceptr, 2);
		if (!inside((CUdeviceptr)(uintptr_t)in, (size_t)block[0] * 4) || !inside((CUdeviceptr)(uintptr_t)out, (size_t)block[0] * 4) ||
		    !inside((CUdeviceptr)(uintptr_t)started, 8))
			return ILLEGAL_ADDRESS;
		*started = 3000;
		for (unsigned i = 0; i < block[0]; i++)
			out[i] = in[i] * 3;
		return OK;
	}
	case TMA_COPY:
		return tma_copy(params, shared);
	case SCALE_FLOAT: {
		float *data = (float *)(uintptr_t)ARG(CUdeviceptr, 0);
		float factor = ARG(float, 1);
		unsigned n = ARG(unsigned, 2);
		unsigned long count = n < threads ? n : threads;
		if (count > 0 && !inside((CUdeviceptr)(uintptr_t)data, count * 4))
			return ILLEGAL_ADDRESS;
		for (unsigned long i = 0; i < count; i++)
			data[i] *= factor;
		return OK;
	}
	}
	return INVALID_HANDLE;
}

static CUresult capture_launch(stream *st, const launch_record *launch);

/* Set while cuLaunchKernelEx forwards a launch that allows programmatic
 * stream serialization: kc_pdl_consumer is only ever launched that way by
 * the tests, so one arriving as a plain launch means the flag was lost on
 * the way down. */
static __thread int launching_programmatic;

#if FAKECUDA_DRIVER_VERSION >= 12000
/* CUlaunchConfig and CUlaunchAttribute as cuda.h lays them out. The fake
 * runs launches in order, so an early start changes nothing here; it
 * checks that the one attribute kcand sends is programmatic stream
 * serialization, allowed. */
typedef struct {
	int id;
	char pad[4];
	union { char bytes[64]; void *align; int allowed; } value;
} launch_attribute;
typedef struct {
	unsigned gx, gy, gz, bx, by, bz, shared;
	void *stream;
	launch_attribute *attrs;
	unsigned count;
} launch_config;

CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared, void *s, void **params, void **extra);

CUresult cuLaunchKernelEx(const launch_config *c, void *f, void **params, void **extra) {
	NEED_CONTEXT();
	if (c == NULL || (c->count > 0 && c->attrs == NULL) || c->count > 1)
		return INVALID_VALUE;
	if (c->count == 1 && (c->attrs[0].id != 6 || c->attrs[0].value.allowed != 1))
		return INVALID_VALUE;
	launching_programmatic = c->count == 1;
	CUresult r = cuLaunchKernel(f, c->gx, c->gy, c->gz, c->bx, c->by, c->bz, c->shared, c->stream, params, extra);
	launching_programmatic = 0;
	return r;
}
#endif

CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared, void *s, void **params, void **extra) {
	NEED_CONTEXT();
	function *fn = f;
	if (fn == NULL || !valid_stream(s) || extra != NULL)
		return INVALID_HANDLE;
	if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0 || (unsigned long)bx * by * bz > 1024)
		return INVALID_VALUE;
	if ((int)shared > fn->max_dynamic_shared)
		return INVALID_VALUE;
	if (fn->kind == PDL_CONSUMER && !launching_programmatic)
		return INVALID_VALUE;
	const param_layout *layout = &layouts[fn->kind];
	if (check_args(params, layout) != OK)
		return INVALID_VALUE;
	launch_record launch = {fn, {gx, gy, gz}, {bx, by, bz}, shared, {0}};
	if (!capturing(s))
		return run_kernel(fn, launch.grid, launch.block, shared, params);
	for (int i = 0; i < layout->count; i++)
		memcpy(launch.storage + param_offset(layout, i), params[i], (size_t)layout->sizes[i]);
	return capture_launch(s, &launch);
}

static CUresult replay(const launch_record *launch) {
	const param_layout *layout = &layouts[launch->fn->kind];
	void *params[MAX_KERNEL_PARAMS];
	for (int i = 0; i < layout->count; i++)
		params[i] = (void *)(launch->storage + param_offset(layout, i));
	return run_kernel(launch->fn, launch->grid, launch->block, launch->shared, params);
}

/* ---- stream capture and graphs ---- */

#define GRAPH_MAGIC 0x47524150u
#define GRAPH_EXEC_MAGIC 0x47455845u

struct graph {
	unsigned magic;
	int count, capacity;
	launch_record *launches;
};

typedef struct {
	unsigned magic;
	int count;
	launch_record *launches;
} graph_exec;

static int valid_graph(void *g) { return g != NULL && ((graph *)g)->magic == GRAPH_MAGIC; }
static int valid_graph_exec(void *e) { return e != NULL && ((graph_exec *)e)->magic == GRAPH_EXEC_MAGIC; }

static void free_graph(graph *g) {
	g->magic = 0;
	free(g->launches);
	free(g);
}

/* The streams now capturing, for the checks other calls make. */
#define MAX_CAPTURES 64
static stream *captures[MAX_CAPTURES];
static pthread_mutex_t captures_lock = PTHREAD_MUTEX_INITIALIZER;

/* take_capture ends st's capture, if any, and returns its graph;
 * end_capture drops the graph too. */
static graph *take_capture(stream *st) {
	pthread_mutex_lock(&captures_lock);
	for (int i = 0; i < MAX_CAPTURES; i++)
		if (captures[i] == st)
			captures[i] = NULL;
	pthread_mutex_unlock(&captures_lock);
	graph *g = st->graph;
	st->capture = NOT_CAPTURING;
	st->graph = NULL;
	return g;
}

static void end_capture(stream *st) {
	graph *g = take_capture(st);
	if (g != NULL)
		free_graph(g);
}

static CUresult capture_allows_context_wait(void) {
	CUresult r = OK;
	pthread_mutex_lock(&captures_lock);
	for (int i = 0; i < MAX_CAPTURES; i++) {
		if (captures[i] != NULL) {
			captures[i]->capture = INVALIDATED;
			r = CAPTURE_UNSUPPORTED;
		}
	}
	pthread_mutex_unlock(&captures_lock);
	return r;
}

/* A GLOBAL capture forbids unsafe calls on every thread, a THREAD_LOCAL
 * one on its own thread, a RELAXED one nowhere. */
static CUresult capture_allows_unsafe_call(void) {
	CUresult r = OK;
	pthread_mutex_lock(&captures_lock);
	for (int i = 0; i < MAX_CAPTURES; i++) {
		stream *st = captures[i];
		if (st != NULL && (st->mode == MODE_GLOBAL || (st->mode == MODE_THREAD_LOCAL && pthread_equal(st->thread, pthread_self())))) {
			st->capture = INVALIDATED;
			r = CAPTURE_UNSUPPORTED;
		}
	}
	pthread_mutex_unlock(&captures_lock);
	return r;
}

static CUresult capture_launch(stream *st, const launch_record *launch) {
	if (st->capture == INVALIDATED)
		return CAPTURE_INVALIDATED;
	graph *g = st->graph;
	if (g->count == g->capacity) {
		int capacity = g->capacity ? 2 * g->capacity : 16;
		launch_record *grown = realloc(g->launches, (size_t)capacity * sizeof(launch_record));
		if (grown == NULL)
			return OUT_OF_MEMORY;
		g->launches = grown;
		g->capacity = capacity;
	}
	g->launches[g->count++] = *launch;
	return OK;
}

CUresult cuStreamBeginCapture_v2(void *s, int mode) {
	NEED_CONTEXT();
	if (s == NULL)
		return CAPTURE_UNSUPPORTED; /* the legacy stream cannot capture */
	if (!valid_stream(s))
		return INVALID_HANDLE;
	if (mode < MODE_GLOBAL || mode > MODE_RELAXED)
		return INVALID_VALUE;
	stream *st = s;
	if (st->capture != NOT_CAPTURING)
		return ILLEGAL_STATE;
	graph *g = calloc(1, sizeof(graph));
	g->magic = GRAPH_MAGIC;
	pthread_mutex_lock(&captures_lock);
	int slot = 0;
	while (slot < MAX_CAPTURES && captures[slot] != NULL)
		slot++;
	if (slot == MAX_CAPTURES) {
		pthread_mutex_unlock(&captures_lock);
		free_graph(g);
		return OUT_OF_MEMORY;
	}
	st->capture = CAPTURING;
	st->mode = mode;
	st->thread = pthread_self();
	st->graph = g;
	captures[slot] = st;
	pthread_mutex_unlock(&captures_lock);
	return OK;
}

CUresult cuStreamEndCapture(void *s, void **out) {
	NEED_CONTEXT();
	*out = NULL;
	if (!valid_stream(s))
		return INVALID_HANDLE;
	if (!capturing(s))
		return ILLEGAL_STATE;
	stream *st = s;
	if (st->mode != MODE_RELAXED && !pthread_equal(st->thread, pthread_self()))
		return CAPTURE_WRONG_THREAD;
	int invalidated = st->capture == INVALIDATED;
	graph *g = take_capture(st);
	if (invalidated) {
		free_graph(g);
		return CAPTURE_INVALIDATED;
	}
	*out = g;
	return OK;
}

CUresult cuGraphInstantiateWithFlags(void **out, void *g, unsigned long long flags) {
	NEED_CONTEXT();
	if (!valid_graph(g))
		return INVALID_HANDLE;
	if (flags != 0)
		return INVALID_VALUE; /* kcand asks for none */
	graph *from = g;
	graph_exec *e = calloc(1, sizeof(graph_exec));
	e->magic = GRAPH_EXEC_MAGIC;
	e->count = from->count;
	e->launches = calloc((size_t)(from->count ? from->count : 1), sizeof(launch_record));
	memcpy(e->launches, from->launches, (size_t)from->count * sizeof(launch_record));
	*out = e;
	return OK;
}

CUresult cuGraphDestroy(void *g) {
	NEED_CONTEXT();
	if (!valid_graph(g))
		return INVALID_HANDLE;
	free_graph(g);
	return OK;
}

CUresult cuGraphExecDestroy(void *e) {
	NEED_CONTEXT();
	if (!valid_graph_exec(e))
		return INVALID_HANDLE;
	graph_exec *exec = e;
	exec->magic = 0;
	free(exec->launches);
	free(exec);
	return OK;
}

CUresult cuGraphLaunch(void *e, void *s) {
	NEED_CONTEXT();
	if (!valid_graph_exec(e))
		return INVALID_HANDLE;
	CUresult r = stream_takes_work(s);
	graph_exec *exec = e;
	for (int i = 0; r == OK && i < exec->count; i++)
		r = replay(&exec->launches[i]);
	return r;
}
