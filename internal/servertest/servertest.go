// Package servertest holds what the stores' test harnesses (redisstore's
// redistest, pgstore's pgtest) share: a free port on loopback, and a server
// process killed by its pid.
package servertest

import (
	"net"
	"os/exec"
	"testing"
)

// FreePort asks the kernel for a free port on 127.0.0.1.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// Kill kills a started server by its pid and waits for it; a command not
// started, or already waited for, is left alone.
func Kill(cmd *exec.Cmd) {
	if cmd != nil && cmd.Process != nil && cmd.ProcessState == nil {
		cmd.Process.Kill()
		cmd.Wait()
	}
}
