package doorbell

import (
	"syscall"
	"time"
	"unsafe"
)

const (
	futexWaitOp = 0 // FUTEX_WAIT, shared: the word lives in memory mapped by two processes
	futexWakeOp = 1 // FUTEX_WAKE
)

// futexWait sleeps while *addr == old, at most for d.
func futexWait(addr *uint32, old uint32, d time.Duration) {
	ts := syscall.NsecToTimespec(d.Nanoseconds())
	syscall.Syscall6(sysFutex, uintptr(unsafe.Pointer(addr)), futexWaitOp, uintptr(old), uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// futexWake wakes every waiter on addr.
func futexWake(addr *uint32) {
	syscall.Syscall6(sysFutex, uintptr(unsafe.Pointer(addr)), futexWakeOp, uintptr(1<<31-1), 0, 0, 0)
}
