// Command mxfp4 will serve the mxfp4-moe family (eight-warp and single-warp
// MoE kernels). Until those kernels exist it serves an empty candidate list,
// so the host lists it honestly and never selects it.
package main

import "github.com/kcand/kcand/sdk"

// version is set at build time with -ldflags "-X main.version=...".
var version = "0.0.0"

func main() {
	sdk.Serve(sdk.Options{Name: "mxfp4", Version: version})
}
