//go:build cgo

package cuda

// The Go face of kcand_nvrtc.c.

/*
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "kcand_nvrtc.h"
*/
import "C"

import (
	"sort"
	"unsafe"
)

func nvrtcOpen(path string) (message string, ok bool) {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var buf [512]C.char
	if C.kc_nvrtc_open(cpath, &buf[0], C.size_t(len(buf))) != 0 {
		return C.GoString(&buf[0]), false
	}
	return "", true
}

func nvrtcErrorName(r nvrtcResult) string {
	if s := C.kc_nvrtc_error_string(C.kc_nvrtc_result(r)); s != nil {
		return C.GoString(s)
	}
	return ""
}

func nvrtcVersion() (major, minor int, r nvrtcResult) {
	var ma, mi C.int
	r = nvrtcResult(C.kc_nvrtc_version(&ma, &mi))
	return int(ma), int(mi), r
}

func nvrtcHasCUBIN() bool { return C.kc_nvrtc_has_cubin() != 0 }

// nvrtcSupportedArchs lists the sm_XY numbers NVRTC can target (XY as an
// int), or ok=false when this NVRTC cannot say (before 11.2).
func nvrtcSupportedArchs() (archs []int, ok bool) {
	if C.kc_nvrtc_has_supported_archs() == 0 {
		return nil, false
	}
	var n C.int
	if C.kc_nvrtc_num_supported_archs(&n) != 0 || n <= 0 {
		return nil, false
	}
	buf := make([]C.int, int(n))
	if C.kc_nvrtc_supported_archs(&buf[0]) != 0 {
		return nil, false
	}
	for _, a := range buf {
		archs = append(archs, int(a))
	}
	sort.Ints(archs)
	return archs, true
}

// cStrings copies strings into one C array of C strings; free releases it.
func cStrings(values []string) (array **C.char, free func()) {
	if len(values) == 0 {
		return nil, func() {}
	}
	raw := C.malloc(C.size_t(len(values)) * C.size_t(unsafe.Sizeof((*C.char)(nil))))
	slots := unsafe.Slice((**C.char)(raw), len(values))
	for i, v := range values {
		slots[i] = C.CString(v)
	}
	return (**C.char)(raw), func() {
		for _, p := range slots {
			C.free(unsafe.Pointer(p))
		}
		C.free(raw)
	}
}

// nvrtcCompile runs one NVRTC program from creation to destruction. On
// failure it names the NVRTC call that failed; the log is returned whenever
// NVRTC produced one.
func nvrtcCompile(src *Source, options []string, wantCUBIN bool) (out nvrtcOutput, op string, r nvrtcResult) {
	csource := C.CString(src.Code)
	defer C.free(unsafe.Pointer(csource))
	cname := C.CString(src.programName())
	defer C.free(unsafe.Pointer(cname))
	headerNames, headerBodies := src.sortedHeaders()
	cheaders, freeHeaders := cStrings(headerBodies)
	defer freeHeaders()
	cincludes, freeIncludes := cStrings(headerNames)
	defer freeIncludes()

	var program C.uintptr_t
	if r = nvrtcResult(C.kc_nvrtc_create_program(&program, csource, cname, C.int(len(headerNames)), cheaders, cincludes)); r != 0 {
		return out, "nvrtcCreateProgram", r
	}
	defer C.kc_nvrtc_destroy_program(program)

	expressions := make([]*C.char, len(src.NameExpressions))
	for i, e := range src.NameExpressions {
		expressions[i] = C.CString(e)
		defer C.free(unsafe.Pointer(expressions[i]))
		if r = nvrtcResult(C.kc_nvrtc_add_name_expression(program, expressions[i])); r != 0 {
			return out, "nvrtcAddNameExpression", r
		}
	}

	coptions, freeOptions := cStrings(options)
	defer freeOptions()
	compiled := nvrtcResult(C.kc_nvrtc_compile_program(program, C.int(len(options)), coptions))
	out.log = programLog(program)
	if compiled != 0 {
		return out, "nvrtcCompileProgram", compiled
	}

	if len(expressions) > 0 {
		out.lowered = make(map[string]string, len(expressions))
	}
	for i, e := range expressions {
		var lowered *C.char
		if r = nvrtcResult(C.kc_nvrtc_get_lowered_name(program, e, &lowered)); r != 0 {
			return out, "nvrtcGetLoweredName", r
		}
		out.lowered[src.NameExpressions[i]] = C.GoString(lowered)
	}

	var size C.size_t
	if wantCUBIN {
		if r = nvrtcResult(C.kc_nvrtc_cubin_size(program, &size)); r != 0 {
			return out, "nvrtcGetCUBINSize", r
		}
		out.image = make([]byte, int(size))
		if size > 0 {
			if r = nvrtcResult(C.kc_nvrtc_cubin(program, (*C.char)(unsafe.Pointer(&out.image[0])))); r != 0 {
				return out, "nvrtcGetCUBIN", r
			}
		}
		return out, "", 0
	}
	if r = nvrtcResult(C.kc_nvrtc_ptx_size(program, &size)); r != 0 {
		return out, "nvrtcGetPTXSize", r
	}
	out.image = make([]byte, int(size))
	if size > 0 {
		if r = nvrtcResult(C.kc_nvrtc_ptx(program, (*C.char)(unsafe.Pointer(&out.image[0])))); r != 0 {
			return out, "nvrtcGetPTX", r
		}
	}
	// The PTX size counts the terminating NUL; the image is the text.
	for len(out.image) > 0 && out.image[len(out.image)-1] == 0 {
		out.image = out.image[:len(out.image)-1]
	}
	return out, "", 0
}

func programLog(program C.uintptr_t) string {
	var size C.size_t
	if C.kc_nvrtc_log_size(program, &size) != 0 || size <= 1 {
		return ""
	}
	buf := make([]byte, int(size))
	if C.kc_nvrtc_log(program, (*C.char)(unsafe.Pointer(&buf[0]))) != 0 {
		return ""
	}
	return C.GoString((*C.char)(unsafe.Pointer(&buf[0])))
}
