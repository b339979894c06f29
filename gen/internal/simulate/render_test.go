package simulate

import (
	"context"
	"image"
	"image/color"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"
)

// chromium is the headless browser the page is rendered in: Debian's
// chromium, which .ci/servers installs (make test calls it first).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no chromium on this machine to render simulate's page in: run .ci/servers chromium (Debian, as root: apt-get install -y chromium)")
	return ""
}

// renderInBrowser opens the page simulate -html wrote in headless Chromium
// and checks what the browser made of it, not only its text: the DOM it
// parsed holds every rule's section, chart and bins as the page's text
// does (an HTML parser, not XML, reads the inline SVG), and the screenshot
// shows one band of bars per rule that admitted or denied something, in the
// admitted colour, and in the denied colour for each rule that denied. The
// screenshot is kept in artefacts/ at the top of the repository.
func renderInBrowser(t *testing.T, page string, got *readSeries, name string) {
	t.Helper()
	bin := chromium(t)
	dir := t.TempDir()
	run := func(args ...string) []byte {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
			"--hide-scrollbars", "--user-data-dir=" + filepath.Join(dir, "profile"), "--window-size=1100,6000"}
		cmd := exec.CommandContext(ctx, bin, append(base, args...)...)
		cmd.Stderr = nil
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s %v: %v", bin, args, err)
		}
		return out
	}
	url := "file://" + page
	dom := string(run("--dump-dom", url))
	src, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	for _, pattern := range []string{`<section[^>]*data-rule=`, `<svg[ >]`, `<g[^>]*class="bin"`, `<rect[^>]*class="adm"`, `<rect[^>]*class="den"`, `<line[^>]*class="chg"`} {
		re := regexp.MustCompile(pattern)
		if want, have := len(re.FindAllString(string(src), -1)), len(re.FindAllString(dom, -1)); want != have || want == 0 && pattern != `<rect[^>]*class="den"` {
			t.Errorf("the browser's DOM holds %d of %s, the page %d", have, pattern, want)
		}
	}
	shot := filepath.Join(dir, "page.png")
	run("--screenshot="+shot, url)
	f, err := os.Open(shot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("the screenshot: %v", err)
	}
	adm, den := color.RGBA{0x3a, 0x7d, 0x44, 0xff}, color.RGBA{0xc0, 0x39, 0x2b, 0xff}
	bands := barBands(img, adm, den)
	drawing := 0 // rules whose chart has bars
	var denying []string
	for _, name := range got.order {
		r := got.rules[name]
		if sum(r.admitted)+sum(r.denied) > 0 {
			drawing++
		}
		if sum(r.denied) > 0 {
			denying = append(denying, name)
		}
	}
	if len(bands) != drawing {
		t.Errorf("the screenshot shows %d bands of bars, the page draws %d rules with traffic", len(bands), drawing)
	}
	withDenied := 0
	for _, b := range bands {
		if b.den > 0 {
			withDenied++
		}
	}
	if withDenied != len(denying) {
		t.Errorf("the screenshot shows denied bars in %d bands, the page has %d rules that denied (%v)", withDenied, len(denying), denying)
	}
	if root, err := filepath.Abs(filepath.Join("..", "..", "..")); err == nil {
		keep := filepath.Join(root, "artefacts", "simulate-"+name+".png")
		if err := os.MkdirAll(filepath.Dir(keep), 0o755); err == nil {
			if raw, err := os.ReadFile(shot); err == nil && os.WriteFile(keep, raw, 0o644) == nil {
				t.Logf("screenshot: %s (%d bands of bars)", keep, len(bands))
			}
		}
	}
}

// band is a run of rows of a screenshot with bars in them, and how many
// pixels of each colour it holds.
type band struct{ top, bottom, adm, den int }

// barBands finds the runs of rows holding at least a few pixels of the
// admitted or the denied colour: one per chart drawn.
func barBands(img image.Image, adm, den color.RGBA) []band {
	near := func(c color.Color, want color.RGBA) bool {
		r, g, b, _ := c.RGBA()
		d := func(x uint32, y uint8) int { return int(x>>8) - int(y) }
		return abs(d(r, want.R)) < 12 && abs(d(g, want.G)) < 12 && abs(d(b, want.B)) < 12
	}
	var bands []band
	var cur *band
	gap := 0
	bounds := img.Bounds()
	for y := bounds.Min.Y; y < bounds.Max.Y; y++ {
		a, d := 0, 0
		for x := bounds.Min.X; x < bounds.Max.X; x++ {
			c := img.At(x, y)
			switch {
			case near(c, adm):
				a++
			case near(c, den):
				d++
			}
		}
		if a+d < 2 {
			if cur != nil {
				if gap++; gap > 40 { // a chart's bars leave no gap this tall: the next chart is another band
					cur = nil
				}
			}
			continue
		}
		gap = 0
		if cur == nil {
			bands = append(bands, band{top: y})
			cur = &bands[len(bands)-1]
		}
		cur.bottom, cur.adm, cur.den = y, cur.adm+a, cur.den+d
	}
	return bands
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

func sum(xs []int64) int64 {
	var s int64
	for _, x := range xs {
		s += x
	}
	return s
}
