// Package pgtest starts PostgreSQL servers for tests: a copy of a cluster
// initdb made once, in memory (/dev/shm) where the machine has room for it,
// listening on 127.0.0.1 on a free port (and on a Unix socket in its own
// directory), stopped by its pid when the test ends. PostgreSQL refuses to
// run as root: when the test runs as root, the server runs as the user nobody.
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
	"golang.org/x/sys/unix"
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
// install PostgreSQL when initdb is not found. The cluster is in memory
// (/dev/shm) where the machine has it: see StartOnDisk for benchmarks.
func Start(t testing.TB, settings ...string) *Server {
	t.Helper()
	return startIn(t, clusterDir(), settings)
}

// StartOnDisk is Start with the cluster in the temporary directory, on disk:
// for benchmarks, whose figures must not depend on where the tests keep their
// clusters (nor be compared with those of a version that kept them on disk),
// and for fsync=on, which in memory syncs nothing.
func StartOnDisk(t testing.TB, settings ...string) *Server {
	t.Helper()
	return startIn(t, os.TempDir(), settings)
}

func startIn(t testing.TB, base string, settings []string) *Server {
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
	root, err := os.MkdirTemp(base, "pgtest")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	s.dir = filepath.Join(root, "data")
	if os.Getuid() == 0 {
		u, err := user.Lookup("nobody")
		if err != nil {
			t.Fatalf("running as root, PostgreSQL needs another user: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	tmpl, err := s.template(initdb)
	if err != nil {
		t.Fatal(err)
	}
	// A copy of the template is a fresh cluster (initdb's output) in a
	// tenth of initdb's time; cp -a keeps its owner.
	if out, err := exec.Command("cp", "-a", tmpl, s.dir).CombinedOutput(); err != nil {
		t.Fatalf("copying the cluster template %s: %v\n%s", tmpl, err, out)
	}
	s.Port = servertest.FreePort(t)
	s.Addr = "127.0.0.1:" + strconv.Itoa(s.Port)
	t.Cleanup(s.Stop)
	s.start(t)
	return s
}

// clusterDir is where clusters are made: /dev/shm, a tmpfs, when it is a
// directory this process can write with at least shmRoom free, else the
// temporary directory. On a disk of a virtual machine, copying the template
// (39 MB) took 0.5 to 1.9 s a server, most of a test's time; in memory it is
// a copy of memory. A container's /dev/shm is often 64 MB, too small for the
// template and one cluster: then the disk. The clusters are removed when their
// tests end (a test process killed leaves one behind, as it would in the
// temporary directory).
func clusterDir() string {
	const shm = "/dev/shm"
	var fs syscall.Statfs_t
	if err := syscall.Statfs(shm, &fs); err != nil || uint64(fs.Bavail)*uint64(fs.Bsize) < shmRoom {
		return os.TempDir()
	}
	f, err := os.CreateTemp(shm, "pgtest-probe")
	if err != nil {
		return os.TempDir()
	}
	f.Close()
	os.Remove(f.Name())
	return shm
}

// shmRoom is the free space clusterDir asks of /dev/shm: the template and a
// few clusters that grow while their tests write.
const shmRoom = 1 << 30

// template is a cluster initdb made once for every test process on the
// machine (kept in clusterDir, named by initdb's path and
// modification time and the server's user): made in a directory of its own
// and renamed into place, so processes that race to make it each see a
// whole one.
func (s *Server) template(initdb string) (string, error) {
	st, err := os.Stat(initdb)
	if err != nil {
		return "", err
	}
	uid := os.Getuid()
	if s.cred != nil {
		uid = int(s.cred.Uid)
	}
	name := fmt.Sprintf("pgtest-template-%x-%d", fnv64(fmt.Sprintf("%s %d %d", initdb, st.ModTime().UnixNano(), st.Size())), uid)
	dir := filepath.Join(clusterDir(), name)
	if _, err := os.Stat(filepath.Join(dir, "PG_VERSION")); err == nil {
		return dir, nil
	}
	work, err := os.MkdirTemp(clusterDir(), name+"-new")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(work)
	if err := os.Chmod(work, 0o755); err != nil {
		return "", err
	}
	data := filepath.Join(work, "data")
	if err := os.Mkdir(data, 0o700); err != nil {
		return "", err
	}
	if s.cred != nil {
		if err := os.Chown(data, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			return "", err
		}
	}
	out, err := s.command(initdb, "-D", data, "-U", "limitgen", "--auth=trust", "-E", "UTF8", "--no-sync").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("initdb: %v\n%s", err, out)
	}
	if err := os.Rename(data, dir); err != nil {
		if _, serr := os.Stat(filepath.Join(dir, "PG_VERSION")); serr == nil {
			return dir, nil // another process made it first
		}
		return "", err
	}
	return dir, nil
}

func fnv64(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
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
		"-k", s.dir, "-c", "fsync=off", "-c", "logging_collector=off",
		// Dynamic shared memory in the data directory, removed with it: by
		// default it is files in /dev/shm that a killed server leaves behind
		// (1,494 of them, 767 MB, on this machine after a few days of tests).
		"-c", "dynamic_shared_memory_type=mmap"}, s.settings...)
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

// Signal sends sig to the server's postmaster and every backend it started
// (its process group is the test's, so its children are found by parent):
// SIGSTOP stalls the whole server, SIGCONT resumes it.
func (s *Server) Signal(sig syscall.Signal) error {
	if s.cmd == nil || s.cmd.Process == nil {
		return fmt.Errorf("pgtest: the server is not running")
	}
	pid := s.cmd.Process.Pid
	for _, child := range childrenOf(pid) {
		syscall.Kill(child, sig) //nolint:errcheck // a backend that just ended
	}
	return syscall.Kill(pid, sig)
}

// childrenOf lists the pids whose parent is pid (from /proc).
func childrenOf(pid int) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces; ppid follows the last ')'.
		i := strings.LastIndexByte(string(stat), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) > 1 {
			if pp, _ := strconv.Atoi(f[1]); pp == pid {
				out = append(out, n)
			}
		}
	}
	return out
}

// Stop kills the server by its pid and waits for it (a crash: a logged
// table's rows survive it), then removes the System V shared memory segment
// a killed postmaster leaves behind: they piled up to the kernel's limit
// (4,096) on the development machine, after which no server could start.
func (s *Server) Stop() {
	servertest.Kill(s.cmd)
	removeSegment(s.dir)
}

// removeSegment removes the System V segment that dir's postmaster.pid names
// (its seventh line: the key and the id); the kernel frees it once the
// killed server's last process has gone.
func removeSegment(dir string) {
	b, err := os.ReadFile(filepath.Join(dir, "postmaster.pid"))
	if err != nil {
		return
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) < 7 {
		return
	}
	if f := strings.Fields(lines[6]); len(f) == 2 {
		if id, err := strconv.Atoi(f[1]); err == nil {
			unix.SysvShmCtl(id, unix.IPC_RMID, nil) //nolint:errcheck // gone already, or never made
		}
	}
}

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
