// Package pgtest starts PostgreSQL servers for tests: a cluster made by
// initdb in a temporary directory, listening on 127.0.0.1 on a free port (and
// on a Unix socket in its own directory), stopped by its pid when the test
// ends. PostgreSQL refuses to run as root: when the test runs as root, the
// server runs as the user nobody.
package pgtest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/limitgen/limitgen/internal/servertest"
)

// Server is a PostgreSQL server a test started.
type Server struct {
	Addr string // 127.0.0.1:port
	Port int
	dir  string // the cluster's data directory
	bin  string // the directory holding initdb and postgres
	cred *syscall.Credential
	cmd  *exec.Cmd

	settings []string
}

// URL is a connection string for database postgres as the superuser
// "limitgen", over TCP on 127.0.0.1.
func (s *Server) URL() string {
	return fmt.Sprintf("postgres://limitgen@127.0.0.1:%d/postgres?sslmode=disable", s.Port)
}

// Pool is a connection pool on s (URL) with pgxpool's defaults, closed when
// the test ends.
func (s *Server) Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), s.URL())
	if err != nil {
		t.Fatalf("pgtest: a pool on %s: %v", s.Addr, err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// Start makes a cluster and starts PostgreSQL on it, with fsync off (tests
// need no durability against power loss; a killed server still loses nothing
// committed) and settings (pairs of "-c", "name=value", given after the
// defaults, so "-c", "fsync=on" restores it); it fails the test with how to
// install PostgreSQL when initdb is not found.
func Start(t testing.TB, settings ...string) *Server {
	t.Helper()
	initdb, err := exec.LookPath("initdb")
	if err != nil { // Debian's packages keep it out of the PATH
		found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
		if len(found) == 0 {
			t.Fatalf("PostgreSQL's initdb is not on the PATH nor in /usr/lib/postgresql (apt-get install -y postgresql; .ci/run does): %v", err)
		}
		initdb = found[len(found)-1]
	}
	if real, err := filepath.EvalSymlinks(initdb); err == nil {
		initdb = real
	}
	s := &Server{bin: filepath.Dir(initdb), settings: settings}
	// A directory every user can enter (t.TempDir's are root's alone), holding
	// the data directory, owned by the server's user.
	root, err := os.MkdirTemp("", "pgtest")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	s.dir = filepath.Join(root, "data")
	if err := os.Mkdir(s.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if os.Getuid() == 0 {
		u, err := user.Lookup("nobody")
		if err != nil {
			t.Fatalf("running as root, PostgreSQL needs another user: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(s.dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	out, err := s.command(filepath.Join(s.bin, "initdb"), "-D", s.dir, "-U", "limitgen", "--auth=trust", "-E", "UTF8", "--no-sync").CombinedOutput()
	if err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	s.Port = servertest.FreePort(t)
	s.Addr = "127.0.0.1:" + strconv.Itoa(s.Port)
	t.Cleanup(s.Stop)
	s.start(t)
	return s
}

// command runs as the server's user, killed with the test process.
func (s *Server) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred, Pdeathsig: syscall.SIGKILL}
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	return cmd
}

func (s *Server) start(t testing.TB) {
	t.Helper()
	args := append([]string{"-D", s.dir, "-h", "127.0.0.1", "-p", strconv.Itoa(s.Port),
		"-k", s.dir, "-c", "fsync=off", "-c", "logging_collector=off"}, s.settings...)
	s.cmd = s.command(filepath.Join(s.bin, "postgres"), args...)
	var log strings.Builder
	s.cmd.Stderr = &log
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("starting postgres: %v", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", s.Addr, time.Second)
		if err == nil {
			c.Close()
			if s.ready(t) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("postgres on %s did not accept connections in 30s:\n%s", s.Addr, log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ready asks pg_isready, which waits out the server's startup.
func (s *Server) ready(t testing.TB) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	isready := filepath.Join(s.bin, "pg_isready")
	if _, err := os.Stat(isready); err != nil {
		return true // the port accepts connections: good enough
	}
	return exec.CommandContext(ctx, isready, "-h", "127.0.0.1", "-p", strconv.Itoa(s.Port), "-U", "limitgen").Run() == nil
}

// Restart starts the server again on its port and data, after Stop.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Stop()
	s.start(t)
}

// Stop kills the server by its pid and waits for it (a crash: a logged
// table's rows survive it).
func (s *Server) Stop() { servertest.Kill(s.cmd) }
