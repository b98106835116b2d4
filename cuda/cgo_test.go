//go:build cgo

package cuda

// haveCgo says whether this test binary can dlopen libraries at all.
const haveCgo = true
