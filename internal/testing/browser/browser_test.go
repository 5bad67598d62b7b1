package browser

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image/png"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// writeHTML writes an HTML page with body in a temporary directory of the
// test and returns its path.
func writeHTML(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "page.html")
	page := "<!doctype html>\n<html><head><meta charset=utf-8><title>t</title></head>\n<body>\n" + body + "\n</body></html>\n"
	if err := os.WriteFile(path, []byte(page), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// openPage opens path with the options o, and at the end of the test closes
// the page and checks that no process of the browser is left and that its
// user data directory is gone.
func openPage(t *testing.T, path string, o options) *Page {
	t.Helper()
	RequireChromium(t)
	p, err := open(context.Background(), path, 800, 600, o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { closeAndCheck(t, p) })
	return p
}

// closeAndCheck closes p and fails the test if anything of the browser is
// left: a process of its group, a process that uses its user data directory,
// or the directory.
func closeAndCheck(t *testing.T, p *Page) {
	t.Helper()
	if err := p.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := p.Close(); err != nil { // idempotent
		t.Errorf("second Close: %v", err)
	}
	checkGone(t, p)
}

func checkGone(t *testing.T, p *Page) {
	t.Helper()
	if pids := processesUsing(p.dataDir); len(pids) > 0 {
		t.Errorf("processes %v still use %s after Close", pids, p.dataDir)
	}
	p.mu.Lock()
	pgid := p.pgid
	p.mu.Unlock()
	if pgid <= 0 {
		t.Errorf("the browser's process group was never recorded")
	} else if live := groupLive(pgid); len(live) > 0 {
		t.Errorf("processes %v of group %d still running after Close", live, pgid)
	}
	if _, err := os.Stat(p.dataDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("user data dir %s still there after Close (stat: %v)", p.dataDir, err)
	}
}

func containsSub(list []string, sub string) bool {
	return slices.ContainsFunc(list, func(s string) bool { return strings.Contains(s, sub) })
}

func TestCleanPage(t *testing.T) {
	path := writeHTML(t, `<main id=m></main>
<script>
for (let i = 0; i < 3; i++) {
  const d = document.createElement('div');
  d.className = 'pt';
  d.dataset.i = String(i);
  d.textContent = ' point ' + i + ' ';
  document.getElementById('m').appendChild(d);
}
</script>`)
	p := openPage(t, path, options{})

	if n, err := p.Count(".pt"); err != nil || n != 3 {
		t.Errorf("Count(.pt) = %d, %v; want 3", n, err)
	}
	if n, err := p.Count(".nope"); err != nil || n != 0 {
		t.Errorf("Count(.nope) = %d, %v; want 0", n, err)
	}
	if got, err := p.Attr(".pt", "data-i"); err != nil || !slices.Equal(got, []string{"0", "1", "2"}) {
		t.Errorf("Attr(.pt, data-i) = %q, %v", got, err)
	}
	if got, err := p.Text(".pt"); err != nil || !slices.Equal(got, []string{"point 0", "point 1", "point 2"}) {
		t.Errorf("Text(.pt) = %q, %v", got, err)
	}
	var title string
	if err := p.Eval(`document.title`, &title); err != nil || title != "t" {
		t.Errorf("Eval(document.title) = %q, %v", title, err)
	}
	var sum int
	if err := p.Eval(`Promise.resolve(40 + 2)`, &sum); err != nil || sum != 42 {
		t.Errorf("Eval(promise) = %d, %v", sum, err)
	}
	var vw int
	if err := p.Eval(`window.innerWidth`, &vw); err != nil || vw != 800 {
		t.Errorf("innerWidth = %d, %v; want 800", vw, err)
	}
	if err := p.Eval(`nosuchfunction()`, nil); err == nil {
		t.Errorf("Eval of a throwing expression: no error")
	}
	if errs := p.ConsoleErrors(); len(errs) != 0 {
		t.Errorf("ConsoleErrors = %q; want none", errs)
	}
	if reqs := p.Requests(); len(reqs) != 0 {
		t.Errorf("Requests = %q; want none", reqs)
	}
	// Chromium writes its temporary files (the process singleton socket
	// above all) in the TMPDIR that Open gave it, which Close removes, and
	// not in /tmp, where a killed browser would leave them.
	if ents, err := os.ReadDir(filepath.Join(p.dataDir, "tmp")); err != nil || len(ents) == 0 {
		t.Errorf("nothing in the browser's TMPDIR (%v): it writes its temporary files elsewhere", err)
	}
	if !strings.HasPrefix(p.URL(), "file:///") {
		t.Errorf("URL = %q", p.URL())
	}
}

func TestConsoleErrors(t *testing.T) {
	for _, tc := range []struct {
		name, script, want string
	}{
		{"console.error", `console.error("boom")`, "console.error: boom"},
		{"throw", `throw new Error("kaboom")`, "kaboom"},
		{"throw in a handler", `setTimeout(() => { null.x }, 0)`, "TypeError"},
		{"unhandled rejection", `Promise.reject(new Error("rejected-xyz"))`, "rejected-xyz"},
		{"console.assert", `console.assert(1 === 2, "assert-xyz")`, "assert-xyz"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := openPage(t, writeHTML(t, "<p>hi</p><script>"+tc.script+"</script>"), options{})
			errs := p.ConsoleErrors()
			if !containsSub(errs, tc.want) {
				t.Errorf("ConsoleErrors = %q; want one with %q", errs, tc.want)
			}
			if reqs := p.Requests(); len(reqs) != 0 {
				t.Errorf("Requests = %q; want none", reqs)
			}
		})
	}
	t.Run("console.warn is a warning", func(t *testing.T) {
		p := openPage(t, writeHTML(t, `<script>console.warn("careful")</script>`), options{})
		if errs := p.ConsoleErrors(); len(errs) != 0 {
			t.Errorf("ConsoleErrors = %q; want none", errs)
		}
		if w := p.ConsoleWarnings(); !containsSub(w, "careful") {
			t.Errorf("ConsoleWarnings = %q; want one with careful", w)
		}
	})
}

func TestRequestsAreRecordedAndBlocked(t *testing.T) {
	for _, tc := range []struct {
		name, body, want string
	}{
		{"img", `<img src="http://example.com/x.png">`, "http://example.com/x.png"},
		{"stylesheet", `<link rel=stylesheet href="https://fonts.googleapis.com/css2?family=Inter">`, "https://fonts.googleapis.com/css2?family=Inter"},
		{"script", `<script src="https://cdn.example.net/lib.js"></script>`, "https://cdn.example.net/lib.js"},
		{"fetch", `<script>fetch("https://api.example.org/data").catch(() => {})</script>`, "https://api.example.org/data"},
		{"preconnect", `<link rel=preconnect href="https://fonts.gstatic.com">`, "https://fonts.gstatic.com/"},
		{"sibling file", `<img src="other.png">`, "/other.png"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeHTML(t, tc.body)
			if tc.name == "sibling file" {
				// It exists, and still must not be read.
				os.WriteFile(filepath.Join(filepath.Dir(path), "other.png"), []byte("x"), 0o644)
			}
			p := openPage(t, path, options{})
			reqs := p.Requests()
			if !containsSub(reqs, tc.want) {
				t.Errorf("Requests = %q; want %q", reqs, tc.want)
			}
			if containsSub(reqs, "page.html") {
				t.Errorf("Requests = %q; it names the page itself", reqs)
			}
			t.Logf("console errors: %q", p.ConsoleErrors())
		})
	}
	t.Run("data URL is not a request", func(t *testing.T) {
		p := openPage(t, writeHTML(t, `<img id=i src="data:image/gif;base64,R0lGODlhAQABAIAAAAAAAP///yH5BAEAAAAALAAAAAABAAEAAAIBRAA7">`), options{})
		if reqs := p.Requests(); len(reqs) != 0 {
			t.Errorf("Requests = %q; want none", reqs)
		}
		var w int
		if err := p.Eval(`document.getElementById('i').naturalWidth`, &w); err != nil || w != 1 {
			t.Errorf("the data: image did not load: naturalWidth = %d, %v", w, err)
		}
		if errs := p.ConsoleErrors(); len(errs) != 0 {
			t.Errorf("ConsoleErrors = %q; want none", errs)
		}
	})
}

// loopbackPage serves a counter on loopback, the one place this machine can
// reach, and writes a page that asks it for an image, a stylesheet, a script
// and a fetch. It returns the page and the number of requests the server got.
func loopbackPage(t *testing.T) (path, base string, hits *atomic.Int64) {
	t.Helper()
	hits = new(atomic.Int64)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		t.Logf("loopback server got %s %s", r.Method, r.URL)
		w.Header().Set("Access-Control-Allow-Origin", "*")
		w.Header().Set("Access-Control-Allow-Private-Network", "true")
		fmt.Fprint(w, "ok")
	}))
	t.Cleanup(srv.Close)
	base = srv.URL
	path = writeHTML(t, fmt.Sprintf(`<img src="%[1]s/x.png">
<link rel=stylesheet href="%[1]s/s.css">
<script src="%[1]s/s.js"></script>
<script>fetch("%[1]s/f").catch(() => {})</script>
<iframe srcdoc='<img src="%[1]s/iframe.png">'></iframe>
<script>
const w = new Worker(URL.createObjectURL(new Blob(['fetch("%[1]s/worker").catch(() => {}); postMessage(1)'], {type: 'text/javascript'})));
window.workerDone = new Promise(r => { w.onmessage = () => setTimeout(r, 200) });
</script>`, base))
	return path, base, hits
}

// waitHits gives late requests a moment to arrive, and returns the count.
func waitHits(hits *atomic.Int64) int64 {
	time.Sleep(300 * time.Millisecond)
	return hits.Load()
}

// TestNothingIsFetched shows, against a server the browser could reach,
// that the blocking works, that each layer of it works alone, and that the
// test would see a fetch if one happened.
func TestNothingIsFetched(t *testing.T) {
	for _, tc := range []struct {
		name     string
		o        options
		wantHits bool
	}{
		{"all layers", options{}, false},
		{"interception alone", options{noNetworkOff: true}, false},
		{"network off alone", options{noIntercept: true}, false},
		{"control: no blocking", options{noIntercept: true, noNetworkOff: true}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path, base, hits := loopbackPage(t)
			p := openPage(t, path, tc.o)
			if err := p.Eval(`window.workerDone`, nil); err != nil {
				t.Fatal(err)
			}
			got := waitHits(hits)
			if tc.wantHits && got < 6 {
				t.Errorf("the loopback server got %d requests; want one for each of the 6 resources, or the probe cannot see a fetch", got)
			}
			if !tc.wantHits && got != 0 {
				t.Errorf("the loopback server got %d requests; want 0", got)
			}
			reqs := p.Requests()
			want := []string{"/x.png", "/s.css", "/s.js", "/f", "/iframe.png", "/worker"}
			if tc.o.noIntercept {
				// Without the interception, only the Network events
				// of the tab name the requests, and a worker's are
				// not among them.
				want = want[:5]
			}
			for _, suffix := range want {
				if !slices.Contains(reqs, base+suffix) {
					t.Errorf("Requests = %q; want %s", reqs, base+suffix)
				}
			}
		})
	}
}

func TestClick(t *testing.T) {
	p := openPage(t, writeHTML(t, `<button id=b>press</button> <span id=out>before</span> <button id=hidden hidden>x</button>
<script>
document.getElementById('b').addEventListener('click', ev => {
  document.getElementById('out').textContent = 'after ' + (ev.isTrusted ? 'trusted' : 'synthetic');
});
</script>`), options{})
	if got, err := p.Text("#out"); err != nil || !slices.Equal(got, []string{"before"}) {
		t.Fatalf("Text(#out) before the click = %q, %v", got, err)
	}
	if err := p.Click("#b"); err != nil {
		t.Fatalf("Click: %v", err)
	}
	if got, err := p.Text("#out"); err != nil || !slices.Equal(got, []string{"after trusted"}) {
		t.Errorf("Text(#out) after the click = %q, %v; want [after trusted]", got, err)
	}
	if err := p.Click("#nothing"); err == nil || !strings.Contains(err.Error(), "no element matches") {
		t.Errorf("Click(#nothing) = %v; want a no element matches error", err)
	}
	if errs := p.ConsoleErrors(); len(errs) != 0 {
		t.Errorf("ConsoleErrors = %q", errs)
	}
}

func TestScreenshot(t *testing.T) {
	p := openPage(t, writeHTML(t, `<div style="height:1500px;background:linear-gradient(#3a7,#37a)">tall</div>`), options{})
	out := filepath.Join(t.ArtifactDir(), "screenshot.png")
	if err := p.Screenshot(out); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(data, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("%s does not start with the PNG signature", out)
	}
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("decoding %s: %v", out, err)
	}
	b := img.Bounds()
	if b.Dx() != 800 || b.Dy() < 1500 {
		t.Errorf("screenshot is %dx%d; want 800 wide and the full 1500+ high page", b.Dx(), b.Dy())
	}
	t.Logf("screenshot %s: %dx%d, %d bytes", out, b.Dx(), b.Dy(), len(data))
}

func TestContextCancelStopsBrowser(t *testing.T) {
	RequireChromium(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p, err := Open(ctx, writeHTML(t, `<p>x</p>`), 640, 480)
	if err != nil {
		t.Fatal(err)
	}
	if pids := processesUsing(p.dataDir); len(pids) == 0 {
		t.Fatalf("no process uses %s while the page is open: the check below would prove nothing", p.dataDir)
	}
	cancel()
	deadline := time.Now().Add(15 * time.Second)
	for {
		_, statErr := os.Stat(p.dataDir)
		if len(processesUsing(p.dataDir)) == 0 && errors.Is(statErr, os.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("15s after cancel: processes %v, dir stat %v", processesUsing(p.dataDir), statErr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := p.Count("p"); err == nil {
		t.Errorf("Count after cancel: no error")
	}
	closeAndCheck(t, p)
}

func TestOpenErrors(t *testing.T) {
	if _, err := Open(context.Background(), filepath.Join(t.TempDir(), "missing.html"), 800, 600); err == nil {
		t.Errorf("Open of a missing file: no error")
	}
	if _, err := Open(context.Background(), t.TempDir(), 800, 600); err == nil {
		t.Errorf("Open of a directory: no error")
	}
	if _, err := Open(context.Background(), "x.html", 0, 600); err == nil {
		t.Errorf("Open with width 0: no error")
	}
}

// fakeTB records what OpenForTest and RequireChromium do to a test. Skip
// and Fatal end the goroutine, as they do in a real test.
type fakeTB struct {
	testing.TB // nil: any other method panics
	mu         sync.Mutex
	skipped    []string
	fatals     []string
	errors     []string
	logs       []string
	cleanups   []func()
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Skipf(format string, args ...any) {
	f.mu.Lock()
	f.skipped = append(f.skipped, fmt.Sprintf(format, args...))
	f.mu.Unlock()
	runtime.Goexit()
}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.fatals = append(f.fatals, fmt.Sprintf(format, args...))
	f.mu.Unlock()
	runtime.Goexit()
}
func (f *fakeTB) Errorf(format string, args ...any) {
	f.mu.Lock()
	f.errors = append(f.errors, fmt.Sprintf(format, args...))
	f.mu.Unlock()
}
func (f *fakeTB) Logf(format string, args ...any) {
	f.mu.Lock()
	f.logs = append(f.logs, fmt.Sprintf(format, args...))
	f.mu.Unlock()
}
func (f *fakeTB) Cleanup(fn func()) { f.cleanups = append(f.cleanups, fn) }

// run calls fn with f in its own goroutine, as a test would run, then runs
// the cleanups, last first.
func (f *fakeTB) run(fn func(testing.TB)) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
	}()
	<-done
	for i := len(f.cleanups) - 1; i >= 0; i-- {
		f.cleanups[i]()
	}
}

func TestMissingChromium(t *testing.T) {
	t.Setenv("PATH", t.TempDir()) // nothing in it
	_, err := Find()
	if err == nil || !strings.Contains(err.Error(), "apt-get install chromium") {
		t.Fatalf("Find with an empty PATH = %v; want an error saying to install chromium", err)
	}

	t.Setenv(requireToolsEnv, "")
	f := &fakeTB{}
	f.run(func(tb testing.TB) { OpenForTest(tb, "x.html", 800, 600) })
	if len(f.skipped) != 1 || len(f.fatals) != 0 || !strings.Contains(f.skipped[0], "install") {
		t.Errorf("without %s: skipped %q, fatals %q; want one skip with the reason", requireToolsEnv, f.skipped, f.fatals)
	}

	t.Setenv(requireToolsEnv, "1")
	f = &fakeTB{}
	f.run(func(tb testing.TB) { OpenForTest(tb, "x.html", 800, 600) })
	if len(f.fatals) != 1 || len(f.skipped) != 0 || !strings.Contains(f.fatals[0], "install") {
		t.Errorf("with %s=1: skipped %q, fatals %q; want one fatal with the reason", requireToolsEnv, f.skipped, f.fatals)
	}
}

func TestOpenForTest(t *testing.T) {
	RequireChromium(t)
	bad := writeHTML(t, `<img src="https://example.com/logo.png"><script>console.error("boom")</script>`)
	good := writeHTML(t, `<div class=pt></div><script>console.warn("just a warning")</script>`)

	t.Run("fails on errors and requests", func(t *testing.T) {
		f := &fakeTB{}
		var p *Page
		f.run(func(tb testing.TB) { p = OpenForTest(tb, bad, 800, 600) })
		if len(f.fatals) != 0 || len(f.skipped) != 0 {
			t.Fatalf("fatals %q, skipped %q", f.fatals, f.skipped)
		}
		checkGone(t, p)
		if !containsSub(f.errors, "boom") || !containsSub(f.errors, "requested https://example.com/logo.png") {
			t.Errorf("errors reported = %q; want the console error and the request", f.errors)
		}
	})
	t.Run("AllowErrors", func(t *testing.T) {
		f := &fakeTB{}
		var p *Page
		f.run(func(tb testing.TB) { p = OpenForTest(tb, bad, 800, 600); p.AllowErrors() })
		checkGone(t, p)
		if len(f.errors) != 0 || len(f.fatals) != 0 {
			t.Errorf("errors %q, fatals %q; want none after AllowErrors", f.errors, f.fatals)
		}
	})
	t.Run("clean page passes", func(t *testing.T) {
		f := &fakeTB{}
		var p *Page
		f.run(func(tb testing.TB) {
			p = OpenForTest(tb, good, 800, 600)
			if n, err := p.Count(".pt"); n != 1 || err != nil {
				tb.Errorf("Count = %d, %v", n, err)
			}
		})
		checkGone(t, p)
		if len(f.errors) != 0 || len(f.fatals) != 0 {
			t.Errorf("errors %q, fatals %q; want none", f.errors, f.fatals)
		}
		if !containsSub(f.logs, "just a warning") {
			t.Errorf("logs %q; want the warning logged", f.logs)
		}
	})
	t.Run("real test", func(t *testing.T) {
		p := OpenForTest(t, good, 1024, 768)
		if n, err := p.Count(".pt"); n != 1 || err != nil {
			t.Errorf("Count = %d, %v", n, err)
		}
	})
}
