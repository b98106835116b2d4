//go:build cgo

/*
 * kcand_nvrtc.c loads libnvrtc with dlopen and forwards calls to it. The
 * prototypes are those of nvrtc.h (stable since CUDA 11.2). nvrtcGetCUBIN
 * (11.1+) and nvrtcGetSupportedArchs (11.2+) are optional: without them the
 * Go side compiles to PTX and lets the driver finish the job.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "kcand_nvrtc.h"

static struct {
	int loaded;
	void *library;
	const char *(*nvrtcGetErrorString)(kc_nvrtc_result code);
	kc_nvrtc_result (*nvrtcVersion)(int *major, int *minor);
	kc_nvrtc_result (*nvrtcGetNumSupportedArchs)(int *count);
	kc_nvrtc_result (*nvrtcGetSupportedArchs)(int *archs);
	kc_nvrtc_result (*nvrtcCreateProgram)(void **program, const char *source, const char *name,
	                                      int header_count, const char *const *headers,
	                                      const char *const *include_names);
	kc_nvrtc_result (*nvrtcDestroyProgram)(void **program);
	kc_nvrtc_result (*nvrtcAddNameExpression)(void *program, const char *expression);
	kc_nvrtc_result (*nvrtcCompileProgram)(void *program, int option_count, const char *const *options);
	kc_nvrtc_result (*nvrtcGetLoweredName)(void *program, const char *expression, const char **lowered);
	kc_nvrtc_result (*nvrtcGetProgramLogSize)(void *program, size_t *bytes);
	kc_nvrtc_result (*nvrtcGetProgramLog)(void *program, char *log);
	kc_nvrtc_result (*nvrtcGetPTXSize)(void *program, size_t *bytes);
	kc_nvrtc_result (*nvrtcGetPTX)(void *program, char *ptx);
	kc_nvrtc_result (*nvrtcGetCUBINSize)(void *program, size_t *bytes);
	kc_nvrtc_result (*nvrtcGetCUBIN)(void *program, char *cubin);
} nv;

typedef struct {
	void **slot;
	const char *name;
	int required;
} nvrtc_symbol;

#define NV_SLOT(field) ((void **)&nv.field)

int kc_nvrtc_open(const char *path, char *message, size_t message_size) {
	if (nv.loaded) {
		return 0;
	}
	void *library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (library == NULL) {
		const char *why = dlerror();
		snprintf(message, message_size, "dlopen %s: %s", path, why ? why : "unknown error");
		return -1;
	}
	nvrtc_symbol symbols[] = {
		{NV_SLOT(nvrtcGetErrorString), "nvrtcGetErrorString", 1},
		{NV_SLOT(nvrtcVersion), "nvrtcVersion", 1},
		{NV_SLOT(nvrtcGetNumSupportedArchs), "nvrtcGetNumSupportedArchs", 0},
		{NV_SLOT(nvrtcGetSupportedArchs), "nvrtcGetSupportedArchs", 0},
		{NV_SLOT(nvrtcCreateProgram), "nvrtcCreateProgram", 1},
		{NV_SLOT(nvrtcDestroyProgram), "nvrtcDestroyProgram", 1},
		{NV_SLOT(nvrtcAddNameExpression), "nvrtcAddNameExpression", 1},
		{NV_SLOT(nvrtcCompileProgram), "nvrtcCompileProgram", 1},
		{NV_SLOT(nvrtcGetLoweredName), "nvrtcGetLoweredName", 1},
		{NV_SLOT(nvrtcGetProgramLogSize), "nvrtcGetProgramLogSize", 1},
		{NV_SLOT(nvrtcGetProgramLog), "nvrtcGetProgramLog", 1},
		{NV_SLOT(nvrtcGetPTXSize), "nvrtcGetPTXSize", 1},
		{NV_SLOT(nvrtcGetPTX), "nvrtcGetPTX", 1},
		{NV_SLOT(nvrtcGetCUBINSize), "nvrtcGetCUBINSize", 0},
		{NV_SLOT(nvrtcGetCUBIN), "nvrtcGetCUBIN", 0},
	};
	for (size_t i = 0; i < sizeof(symbols) / sizeof(symbols[0]); i++) {
		void *address = dlsym(library, symbols[i].name);
		if (address == NULL && symbols[i].required) {
			snprintf(message, message_size, "%s: missing symbol %s", path, symbols[i].name);
			memset(&nv, 0, sizeof(nv));
			dlclose(library);
			return -1;
		}
		*symbols[i].slot = address;
	}
	nv.library = library;
	nv.loaded = 1;
	return 0;
}

int kc_nvrtc_has_cubin(void) { return nv.loaded && nv.nvrtcGetCUBIN != NULL && nv.nvrtcGetCUBINSize != NULL; }
int kc_nvrtc_has_supported_archs(void) {
	return nv.loaded && nv.nvrtcGetSupportedArchs != NULL && nv.nvrtcGetNumSupportedArchs != NULL;
}

const char *kc_nvrtc_error_string(kc_nvrtc_result code) { return nv.loaded ? nv.nvrtcGetErrorString(code) : NULL; }

/* NV_CALL returns KC_NVRTC_NOT_LOADED instead of jumping through a null pointer. */
#define NV_CALL(fn, ...) ((nv.loaded && nv.fn != NULL) ? nv.fn(__VA_ARGS__) : KC_NVRTC_NOT_LOADED)

kc_nvrtc_result kc_nvrtc_version(int *major, int *minor) { return NV_CALL(nvrtcVersion, major, minor); }
kc_nvrtc_result kc_nvrtc_num_supported_archs(int *count) { return NV_CALL(nvrtcGetNumSupportedArchs, count); }
kc_nvrtc_result kc_nvrtc_supported_archs(int *archs) { return NV_CALL(nvrtcGetSupportedArchs, archs); }

kc_nvrtc_result kc_nvrtc_create_program(uintptr_t *program, const char *source, const char *name,
                                        int header_count, const char *const *headers,
                                        const char *const *include_names) {
	void *handle = NULL;
	kc_nvrtc_result r = NV_CALL(nvrtcCreateProgram, &handle, source, name, header_count, headers, include_names);
	*program = (uintptr_t)handle;
	return r;
}

kc_nvrtc_result kc_nvrtc_destroy_program(uintptr_t program) {
	void *handle = (void *)program;
	return NV_CALL(nvrtcDestroyProgram, &handle);
}

kc_nvrtc_result kc_nvrtc_add_name_expression(uintptr_t program, const char *expression) {
	return NV_CALL(nvrtcAddNameExpression, (void *)program, expression);
}

kc_nvrtc_result kc_nvrtc_compile_program(uintptr_t program, int option_count, const char *const *options) {
	return NV_CALL(nvrtcCompileProgram, (void *)program, option_count, options);
}

kc_nvrtc_result kc_nvrtc_get_lowered_name(uintptr_t program, const char *expression, const char **lowered) {
	return NV_CALL(nvrtcGetLoweredName, (void *)program, expression, lowered);
}

kc_nvrtc_result kc_nvrtc_log_size(uintptr_t program, size_t *bytes) { return NV_CALL(nvrtcGetProgramLogSize, (void *)program, bytes); }
kc_nvrtc_result kc_nvrtc_log(uintptr_t program, char *log) { return NV_CALL(nvrtcGetProgramLog, (void *)program, log); }
kc_nvrtc_result kc_nvrtc_ptx_size(uintptr_t program, size_t *bytes) { return NV_CALL(nvrtcGetPTXSize, (void *)program, bytes); }
kc_nvrtc_result kc_nvrtc_ptx(uintptr_t program, char *ptx) { return NV_CALL(nvrtcGetPTX, (void *)program, ptx); }
kc_nvrtc_result kc_nvrtc_cubin_size(uintptr_t program, size_t *bytes) { return NV_CALL(nvrtcGetCUBINSize, (void *)program, bytes); }
kc_nvrtc_result kc_nvrtc_cubin(uintptr_t program, char *cubin) { return NV_CALL(nvrtcGetCUBIN, (void *)program, cubin); }
