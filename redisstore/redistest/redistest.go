// Package redistest starts redis-server for tests: on 127.0.0.1, on a free
// port, with no persistence, stopped (by its pid) when the test ends. A test
// that cannot start one fails; it is never skipped (`.ci/run` installs
// redis-server with apt-get).
package redistest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/limitgen/limitgen/internal/servertest"
	"github.com/redis/go-redis/v9"
)

// Server is a redis-server a test started.
type Server struct {
	Addr string
	bin  string
	args []string
	log  string
	cmd  *exec.Cmd
}

// Start starts a redis-server and returns it once it answers PING; extra
// arguments are passed to it.
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	s := Prepare(t, extra...)
	s.start(t)
	return s
}

// Prepare is Start without the start: a server whose port is chosen and
// nothing listens on it yet (a store made while Redis is down); Restart
// starts it.
func Prepare(t testing.TB, extra ...string) *Server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server is not installed (apt-get install redis-server; .ci/run does): %v", err)
	}
	port := servertest.FreePort(t)
	dir := t.TempDir()
	args := append([]string{"--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--save", "", "--appendonly", "no",
		"--dir", dir, "--logfile", filepath.Join(dir, "redis.log")}, extra...)
	s := &Server{Addr: "127.0.0.1:" + strconv.Itoa(port), bin: bin, args: args, log: filepath.Join(dir, "redis.log")}
	t.Cleanup(s.Stop)
	return s
}

// Restart starts the server again on its port, after Stop (a test's crash),
// or for the first time after Prepare.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Stop()
	s.start(t)
}

func (s *Server) start(t testing.TB) {
	t.Helper()
	s.cmd = exec.Command(s.bin, s.args...)
	s.cmd.SysProcAttr = procAttr()
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("starting redis-server: %v", err)
	}
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(s.log)
			t.Fatalf("redis-server on %s did not answer PING in 10s: %v\n%s", s.Addr, err, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Client returns a client of the server, closed when the test ends, with
// contexts bounding its calls (ContextTimeoutEnabled) and no retries.
func (s *Server) Client(t testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	return c
}

// Signal sends sig to the server: SIGSTOP stalls it (its connections stay
// open, its clients' calls wait), SIGCONT resumes it.
func (s *Server) Signal(sig syscall.Signal) error {
	if s.cmd == nil || s.cmd.Process == nil {
		return fmt.Errorf("redistest: the server is not running")
	}
	return s.cmd.Process.Signal(sig)
}

// Stop kills the server by its pid and waits for it.
func (s *Server) Stop() { servertest.Kill(s.cmd) }

// StartCluster starts n redis-servers in cluster mode on 127.0.0.1 and joins
// them into one Cluster of n masters (redis-cli --cluster create), returning
// it once every slot is served. The servers are stopped when the test ends.
func StartCluster(t testing.TB, n int) []*Server {
	t.Helper()
	return StartClusterTimeout(t, n, 2*time.Second)
}

// StartClusterTimeout is StartCluster with the nodes' cluster-node-timeout:
// a master stalled for longer is marked failed by the others (and, without
// replicas, the Cluster stops serving).
func StartClusterTimeout(t testing.TB, n int, nodeTimeout time.Duration) []*Server {
	t.Helper()
	servers := make([]*Server, n)
	addrs := make([]string, n)
	for i := range servers {
		servers[i] = Start(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", strconv.FormatInt(nodeTimeout.Milliseconds(), 10))
		addrs[i] = servers[i].Addr
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatalf("redis-cli is not installed (it comes with redis-server): %v", err)
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, addr := range addrs { // every node must see the whole cluster ok
		c := redis.NewClient(&redis.Options{Addr: addr})
		for {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			info, err := c.ClusterInfo(ctx).Result()
			cancel()
			if err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_slots_ok:16384") {
				break
			}
			if time.Now().After(deadline) {
				c.Close()
				t.Fatalf("node %s of the cluster %v is not ok after 20s: %v\n%s", addr, addrs, err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
		c.Close()
	}
	return servers
}

// ScriptCalls is the number of EVALSHA and EVAL commands the server of c has
// run (INFO commandstats; the commands a script runs are counted apart).
func ScriptCalls(t testing.TB, c *redis.Client) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, line := range strings.Split(info, "\n") {
		for _, cmd := range []string{"cmdstat_evalsha:calls=", "cmdstat_eval:calls="} {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), cmd); ok {
				v, _, _ := strings.Cut(rest, ",")
				k, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					t.Fatalf("INFO commandstats: %q: %v", line, err)
				}
				n += k
			}
		}
	}
	return n
}
