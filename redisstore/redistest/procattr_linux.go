package redistest

import "syscall"

// procAttr has the kernel kill a started server when the process that
// started it dies: a fuzz worker the coordinator kills leaves no server
// behind.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
