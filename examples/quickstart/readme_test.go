package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// readmeHarnesses are the files the README's Go snippets are compiled in, by
// the start of each snippet's first line: what a fragment uses and does not
// declare (the service's own functions, the request, its writer) is
// declared here, and the harness uses what the fragment declares for the
// reader to go on with. {{SNIPPET}} is replaced by the snippet.
var readmeHarnesses = []struct {
	first, file string
}{
	{"//go:generate", `package s

{{SNIPPET}}
`},
	{"type Store struct{ *shared.Engine }", `package s

import (
	"context"
	"time"

	"github.com/limitgen/limitgen/shared"
)

// A store's own client and options, and its backend: the page shows only
// how they meet the Engine.
type Client struct{}

type Options struct {
	Namespace string
	Timeout   time.Duration
	Coalesce  int
}

type backend struct {
	shared.Backend
	c  *Client
	ns string
}

func (b *backend) setUp(context.Context) error { return nil }

{{SNIPPET}}
`},
	{"client := &http.Client{Transport: &limithttp.Obey{}}", `package s

import (
	"net/http"

	"github.com/limitgen/limitgen/limitgrpc"
	"github.com/limitgen/limitgen/limithttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func snippet(addr string) (*http.Client, *grpc.ClientConn, error) {
{{SNIPPET}}
	return client, cc, err
}
`},
	{"lims := limits.New() // the service's limiters", `package s

import (
	"log"
	"net/http"

	"example.com/quickstart/limits"
)

type account struct{ name, plan string }

func accountOf(*http.Request) (account, bool)   { return account{}, false }
func hello(http.ResponseWriter, *http.Request) {}

func snippet() {
{{SNIPPET}}
}
`},
	{"slot, d := limits.ExportSlots.Acquire(customer)", `package s

import (
	"context"
	"net/http"

	limits "github.com/limitgen/limitgen/generated"
)

func runExport(context.Context, string) {}

func snippet(ctx context.Context, w http.ResponseWriter, customer string) {
{{SNIPPET}}
}
`},
	{"func chat(w http.ResponseWriter, r *http.Request) {", `package s

import (
	"net/http"
	"strconv"
)

func generate(*http.Request) ([]byte, int) { return nil, 0 }

{{SNIPPET}}
`},
	{"w.Header().Set(\"Trailer\", \"X-Tokens-Used\")", `package s

import (
	"net/http"
	"strconv"
)

func snippet(w http.ResponseWriter, stream <-chan []byte, used int) {
{{SNIPPET}}
}
`},
	{"func complete(w http.ResponseWriter, r *http.Request) {", `package s

import (
	"net/http"

	"github.com/limitgen/limitgen/verdict"
)

func generate(*http.Request) ([]byte, int) { return nil, 0 }

{{SNIPPET}}
`},
	{"d := limits.ChatTokens.AllowN(user, estimate)", `package s

import (
	"time"

	limits "github.com/limitgen/limitgen/generated"
)

func errBusy(time.Duration) error { return nil }
func run(string) int64           { return 0 }

func snippet(user, job string, estimate int64) error {
{{SNIPPET}}
	return nil
}
`},
	{"// Exports are heavy this week: 2 at once per customer, each held at most 5 minutes.", `package s

import (
	"log"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	limits "github.com/limitgen/limitgen/generated"
)

func snippet() {
{{SNIPPET}}
}
`},
	{"held, d := limits.Default.Exports(limits.PlanFree, customer, customer) // the plan, PerUser's key, ExportSlots'", `package s

import limits "github.com/limitgen/limitgen/generated"

func snippet(customer string) {
{{SNIPPET}}
}
`},
	{"// The login limit for one client address", `package s

import (
	"log"
	"time"

	"example.com/quickstart/limits"
	"github.com/limitgen/limitgen/atomicbucket"
)

func snippet(lims *limits.Limits, addr string) {
{{SNIPPET}}
}
`},
	{"// Numbers from an overlay file", `package s

import (
	"context"
	"log"
	"time"

	"example.com/quickstart/limits"
	"github.com/limitgen/limitgen/overlay"
	"github.com/limitgen/limitgen/overlay/yamlfile"
)

func snippet(ctx context.Context, lims *limits.Limits) {
{{SNIPPET}}
}
`},
	{"// Numbers from the limitgen_numbers table", `package s

import (
	"context"
	"log"

	"example.com/quickstart/limits"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/limitgen/limitgen/pgstore"
)

func snippet(ctx context.Context, lims *limits.Limits, pool *pgxpool.Pool) {
{{SNIPPET}}
}
`},
	{"// Numbers from the limitgen:numbers hash", `package s

import (
	"context"
	"log"

	"example.com/quickstart/limits"
	"github.com/limitgen/limitgen/redisstore"
	"github.com/redis/go-redis/v9"
)

func snippet(ctx context.Context, lims *limits.Limits, client *redis.Client) {
{{SNIPPET}}
	_ = err
}
`},
	{"// Adaptive rates", `package s

import (
	"context"
	"log"
	"time"

	"example.com/quickstart/limits"
	"github.com/limitgen/limitgen/adaptive"
	"github.com/limitgen/limitgen/overlay"
)

func callDownstream(context.Context) error { return nil }

func snippet(ctx context.Context, lims *limits.Limits) {
{{SNIPPET}}
}
`},
	{"// The violation log", `package s

import (
	"context"
	"log"
	"os"

	"example.com/quickstart/limits"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/limitgen/limitgen/pgstore"
)

func snippet(ctx context.Context, pool *pgxpool.Pool, mw *limits.Middleware) {
{{SNIPPET}}
}
`},
	// Step 4 goes on from step 1's policy (readme/policy.yaml), not the
	// quickstart's, whose rules are shared.
	{"plan := planOf(user)", `package s

import (
	"net/http"

	"example.com/quickstart/readme/limits"
)

func planOf(string) limits.Plan { return limits.PlanFree }

func snippet(w http.ResponseWriter, r *http.Request, lims *limits.Limits, user string) {
{{SNIPPET}}
	_, _, _ = ok, d2, d3
}
`},
	{"client := redis.NewClient(", `package s

import (
	"context"
	"log"

	"example.com/quickstart/limits"
	"github.com/limitgen/limitgen/redisstore"
	"github.com/redis/go-redis/v9"
)

func snippet(ctx context.Context) *limits.Limits {
{{SNIPPET}}
	return lims
}
`},
	{"pool, err := pgxpool.New(", `package s

import (
	"context"
	"log"

	"example.com/quickstart/limits"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/limitgen/limitgen/pgstore"
)

func snippet(ctx context.Context) *limits.Limits {
{{SNIPPET}}
	return lims
}
`},
	{"g, err := limits.NewGRPC(lims, limits.GRPCHooks{", `package s

import (
	"context"
	"log"

	"example.com/quickstart/limits"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

type account struct{ name, plan string }

func accountOfCall(context.Context) (account, bool) { return account{}, false }

func snippet(lims *limits.Limits) *grpc.Server {
{{SNIPPET}}
	return srv
}
`},
	{"rule, err := atomicbucket.NewRule(", `package s

import (
	"context"
	"net/http"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
)

func snippet(ctx context.Context, w http.ResponseWriter, userID int64) error {
{{SNIPPET}}
	return err
}
`},
}

// TestREADMEPolicy: readme/policy.yaml, which the README's later steps are
// compiled against, is step 1's policy word for word (before, step 4 was
// compiled against the quickstart's shared rules, and did not compile
// against step 1's).
func TestREADMEPolicy(t *testing.T) {
	raw, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(raw)
	i := strings.Index(s, "1. Write `policy.yaml`")
	j := strings.Index(s[max(i, 0):], "```yaml\n")
	if i < 0 || j < 0 {
		t.Fatal("the README has no step 1 with a yaml block")
	}
	block, _, _ := strings.Cut(s[i+j+len("```yaml\n"):], "```")
	var lines []string
	for _, l := range strings.Split(strings.TrimRight(block, " \n"), "\n") {
		lines = append(lines, strings.TrimPrefix(l, "   "))
	}
	want, err := os.ReadFile("readme/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(lines, "\n") + "\n"; got != string(want) {
		t.Errorf("readme/policy.yaml is not the README's step 1:\n%s\nwant:\n%s", want, got)
	}
}

// goSnippet is a Go block of the README or of a page of docs/: its text,
// without the indentation of the list item it is in, and where it starts
// (file and line).
type goSnippet struct {
	file string
	line int
	text string
}

// docFiles are the files whose Go snippets are compiled: the README and every
// page of docs/.
func docFiles(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob("../../docs/*.md")
	if err != nil || len(pages) == 0 {
		t.Fatalf("no pages in docs/ (%v)", err)
	}
	return append([]string{"../../README.md"}, pages...)
}

// readmeGoSnippets returns the Go blocks of the README and docs/.
func readmeGoSnippets(t *testing.T) []goSnippet {
	t.Helper()
	var out []goSnippet
	for _, f := range docFiles(t) {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimPrefix(f, "../../")
		var cur *goSnippet
		indent := ""
		for i, line := range strings.Split(string(raw), "\n") {
			trimmed := strings.TrimSpace(line)
			switch {
			case cur == nil && trimmed == "```go":
				cur = &goSnippet{file: name, line: i + 2}
				indent = line[:len(line)-len(strings.TrimLeft(line, " "))]
			case cur != nil && trimmed == "```":
				out = append(out, *cur)
				cur = nil
			case cur != nil:
				cur.text += strings.TrimPrefix(line, indent) + "\n"
			}
		}
	}
	return out
}

// TestREADMEGoSnippets compiles every Go snippet of the repository's README
// and of its docs/ pages,
// each in the harness for its first line (go vet: it type-checks, and
// checks what vet checks). A snippet without a harness fails the test: add
// one when you add a snippet. Before, the Redis snippet declared an error it
// never used, the PostgreSQL one another, and the runtime's had "{ ... }" in
// it: none of them compiled.
func TestREADMEGoSnippets(t *testing.T) {
	snippets := readmeGoSnippets(t)
	if len(snippets) < len(readmeHarnesses) {
		t.Fatalf("%d Go snippets in the README and docs/, fewer than the %d harnesses", len(snippets), len(readmeHarnesses))
	}
	dir, err := os.MkdirTemp(".", "_readme-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	used := make([]bool, len(readmeHarnesses))
	var pkgs []string
	for _, s := range snippets {
		first, _, _ := strings.Cut(s.text, "\n")
		h := -1
		for i, c := range readmeHarnesses {
			if strings.HasPrefix(first, c.first) {
				h = i
			}
		}
		if h < 0 {
			t.Errorf("%s line %d: a Go snippet with no harness (%q): add one to readmeHarnesses", s.file, s.line, first)
			continue
		}
		if used[h] {
			t.Errorf("%s line %d: a second snippet starting %q: give it a harness of its own", s.file, s.line, first)
		}
		used[h] = true
		pkg := filepath.Join(dir, fmt.Sprintf("%s_line%d", strings.NewReplacer("/", "_", ".", "_").Replace(s.file), s.line))
		if err := os.Mkdir(pkg, 0o755); err != nil {
			t.Fatal(err)
		}
		src := strings.Replace(readmeHarnesses[h].file, "{{SNIPPET}}", s.text, 1)
		if err := os.WriteFile(filepath.Join(pkg, "snippet.go"), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, "./"+filepath.ToSlash(pkg))
	}
	for i, u := range used {
		if !u {
			t.Errorf("harness %q matched no snippet of the README or docs/: remove it, or the snippet lost its first line", readmeHarnesses[i].first)
		}
	}
	if len(pkgs) == 0 {
		return
	}
	if out, err := exec.Command("go", append([]string{"vet"}, pkgs...)...).CombinedOutput(); err != nil {
		t.Errorf("README or docs/ snippets do not compile (the package directory names the file and line):\n%s", out)
	}
}

// linkRe is a Markdown link or image: its target.
var linkRe = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// slug is the anchor GitHub gives a heading: lower case, punctuation dropped
// (but - and _), spaces made hyphens.
func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// TestDocLinks: every relative link of the README and docs/ names a file of
// the repository, and every #anchor a heading of the page it points into.
func TestDocLinks(t *testing.T) {
	anchors := map[string]map[string]bool{}
	headings := func(path string) map[string]bool {
		if a, ok := anchors[path]; ok {
			return a
		}
		a := map[string]bool{}
		raw, err := os.ReadFile(path)
		if err == nil {
			for line := range strings.Lines(string(raw)) {
				if h, ok := strings.CutPrefix(line, "#"); ok {
					a[slug(strings.TrimLeft(h, "#"))] = true
				}
			}
		}
		anchors[path] = a
		return a
	}
	links := 0
	for _, f := range docFiles(t) {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range linkRe.FindAllStringSubmatch(string(raw), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			if path == "" {
				path = f
			} else {
				path = filepath.Join(filepath.Dir(f), path)
			}
			links++
			if _, err := os.Stat(path); err != nil {
				t.Errorf("%s: link %q: %v", f, target, err)
				continue
			}
			if anchor != "" && !headings(path)[anchor] {
				t.Errorf("%s: link %q: no heading with that anchor in %s", f, target, path)
			}
		}
	}
	if links < 30 {
		t.Fatalf("only %d relative links found in the README and docs/", links)
	}
}
