package cpu

import "unsafe"

// sysMemfdCreate is memfd_create(2) on linux/amd64 and linux/arm64.
var sysMemfdCreate uintptr = memfdSyscallNumber()

func unsafePointer(p *byte) unsafe.Pointer { return unsafe.Pointer(p) }
