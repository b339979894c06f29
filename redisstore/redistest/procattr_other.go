//go:build !linux

package redistest

import "syscall"

// procAttr is nil where the kernel cannot kill a child with its parent: a
// killed test process may leave its server running.
func procAttr() *syscall.SysProcAttr { return nil }
