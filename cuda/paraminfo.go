package cuda

import (
	"fmt"

	"github.com/kcand/kcand/sdk/errdefs"
)

// ParamInfo is where one kernel parameter lies in the parameter buffer of a
// launch: its byte offset and size, as the compiler laid them out. Args
// must pack each parameter at the offset reported here.
type ParamInfo struct {
	Offset, Size int
}

// ParamInfo reports the kernel's parameters in declaration order
// (cuFuncGetParamInfo), so that a launch plan's argument sizes can be
// checked against the compiled kernel before the first launch. It needs
// CUDA 12.4 or newer; on an older driver the error wraps
// errdefs.ErrUnsupported. It runs on the context thread.
func (f *Function) ParamInfo() ([]ParamInfo, error) {
	if f.module.unloaded.Load() {
		return nil, ErrClosed
	}
	var params []ParamInfo
	err := f.module.ctx.Do(func() error {
		// The driver answers index by index and says CUDA_ERROR_INVALID_VALUE
		// past the last parameter. Every parameter takes at least one byte,
		// which bounds the loop should a driver never say so.
		for index := 0; index <= maxParamBytes; index++ {
			offset, size, r := cuFuncGetParamInfo(f.handle, index)
			switch r {
			case ResultSuccess:
				params = append(params, ParamInfo{Offset: offset, Size: size})
			case ResultInvalidValue:
				return nil
			case resultMissingSymbol:
				return checkOptional("cuFuncGetParamInfo", "12.4", r)
			default:
				return &Error{Op: "cuFuncGetParamInfo", Code: r, Detail: fmt.Sprintf("%s parameter %d", f.name, index)}
			}
		}
		return errdefs.Internal("cuFuncGetParamInfo: %s reports more than %d parameters", f.name, maxParamBytes)
	})
	if err != nil {
		return nil, err
	}
	return params, nil
}
