/*
 * kcand_nvrtc.h declares the C layer between Go and libnvrtc, loaded with
 * dlopen like the driver. nvrtcResult is an int enum and nvrtcProgram a
 * pointer, carried into Go as uintptr_t.
 */
#ifndef KCAND_NVRTC_H
#define KCAND_NVRTC_H

#include <stddef.h>
#include <stdint.h>

typedef int kc_nvrtc_result; /* nvrtcResult */

/* NVRTC_ERROR_INVALID_INPUT: returned before the library is loaded or when
 * an optional entry point is missing. */
#define KC_NVRTC_NOT_LOADED 3

int kc_nvrtc_open(const char *path, char *message, size_t message_size);
int kc_nvrtc_has_cubin(void);
int kc_nvrtc_has_supported_archs(void);
const char *kc_nvrtc_error_string(kc_nvrtc_result code);
kc_nvrtc_result kc_nvrtc_version(int *major, int *minor);
kc_nvrtc_result kc_nvrtc_num_supported_archs(int *count);
kc_nvrtc_result kc_nvrtc_supported_archs(int *archs);
kc_nvrtc_result kc_nvrtc_create_program(uintptr_t *program, const char *source, const char *name,
                                        int header_count, const char *const *headers,
                                        const char *const *include_names);
kc_nvrtc_result kc_nvrtc_destroy_program(uintptr_t program);
kc_nvrtc_result kc_nvrtc_add_name_expression(uintptr_t program, const char *expression);
kc_nvrtc_result kc_nvrtc_compile_program(uintptr_t program, int option_count, const char *const *options);
kc_nvrtc_result kc_nvrtc_get_lowered_name(uintptr_t program, const char *expression, const char **lowered);
kc_nvrtc_result kc_nvrtc_log_size(uintptr_t program, size_t *bytes);
kc_nvrtc_result kc_nvrtc_log(uintptr_t program, char *log);
kc_nvrtc_result kc_nvrtc_ptx_size(uintptr_t program, size_t *bytes);
kc_nvrtc_result kc_nvrtc_ptx(uintptr_t program, char *ptx);
kc_nvrtc_result kc_nvrtc_cubin_size(uintptr_t program, size_t *bytes);
kc_nvrtc_result kc_nvrtc_cubin(uintptr_t program, char *cubin);

#endif
