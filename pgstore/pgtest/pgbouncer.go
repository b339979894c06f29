package pgtest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/limitgen/limitgen/internal/servertest"
)

// Bouncer is a PgBouncer a test started in front of a Server.
type Bouncer struct {
	Addr string // 127.0.0.1:port
	Port int
	cmd  *exec.Cmd
}

// URL is a connection string for database postgres through the bouncer.
func (b *Bouncer) URL() string {
	return fmt.Sprintf("postgres://limitgen@127.0.0.1:%d/postgres?sslmode=disable", b.Port)
}

// StartPgBouncer starts PgBouncer in transaction pool mode (a server
// connection is a client's for one transaction only, so nothing of a
// session, prepared statements included, outlives it) in front of s, on
// 127.0.0.1 on a free port, with at most poolSize server connections. It
// fails the test with how to install PgBouncer when it is not found, and is
// stopped by its pid when the test ends.
func StartPgBouncer(t testing.TB, s *Server, poolSize int) *Bouncer {
	t.Helper()
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		if _, e := os.Stat("/usr/sbin/pgbouncer"); e != nil {
			t.Fatalf("pgbouncer is not installed (apt-get install -y pgbouncer; .ci/run does): %v", err)
		}
		bin = "/usr/sbin/pgbouncer"
	}
	dir, err := os.MkdirTemp("", "pgbouncer")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil { // the bouncer's user writes its log here
		t.Fatal(err)
	}
	b := &Bouncer{Port: servertest.FreePort(t)}
	b.Addr = "127.0.0.1:" + strconv.Itoa(b.Port)
	conf := fmt.Sprintf(`[databases]
postgres = host=127.0.0.1 port=%d dbname=postgres user=limitgen

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = any
pool_mode = transaction
default_pool_size = %d
max_client_conn = 500
logfile = %s
ignore_startup_parameters = extra_float_digits
`, s.Port, b.Port, poolSize, filepath.Join(dir, "pgbouncer.log"))
	ini := filepath.Join(dir, "pgbouncer.ini")
	if err := os.WriteFile(ini, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	b.cmd = exec.Command(bin, ini)
	b.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred, Pdeathsig: syscall.SIGKILL} // not as root, as PgBouncer insists
	var out strings.Builder
	b.cmd.Stdout, b.cmd.Stderr = &out, &out
	if err := b.cmd.Start(); err != nil {
		t.Fatalf("starting pgbouncer: %v", err)
	}
	t.Cleanup(func() { servertest.Kill(b.cmd) })
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, err := net.DialTimeout("tcp", b.Addr, time.Second); err == nil {
			c.Close()
			return b
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "pgbouncer.log"))
			t.Fatalf("pgbouncer on %s did not start:\n%s%s", b.Addr, out.String(), log)
		}
	}
}
