package cpu

func memfdSyscallNumber() uintptr { return 319 }
