// Package browser opens a local HTML file in real headless Chromium, with the
// network off, and lets tests look at the page: the DOM, what the page printed
// on its console, what it tried to fetch, and a screenshot.
//
// It exists to check that report.html is self-contained: a test opens the file,
// asserts that no console error, no uncaught exception and no request for
// anything other than the file itself happened, and counts elements.
//
// Every request that is not the file itself is recorded and failed before it
// leaves the browser (Fetch domain interception at the level of the browser,
// so it covers every tab, frame and worker). Behind that, the browser runs
// with every host name resolving to nothing and a proxy that does not exist,
// and the tab emulates an offline network, so that a request that slipped past
// the interception still fetches nothing.
package browser

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/fetch"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

const (
	// OpenTimeout bounds how long Open waits for the browser to start and
	// for the page to load and settle. The first start of Chromium on a
	// cold machine can take several seconds.
	OpenTimeout = 60 * time.Second

	// actionTimeout bounds each call on an open page (Count, Click, ...).
	actionTimeout = 30 * time.Second

	// closeTimeout bounds how long Close waits for the processes to go.
	closeTimeout = 10 * time.Second
)

// binaries are the names Find looks for in PATH, in order.
var binaries = []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"}

// Find returns the path of the Chromium binary: the first of chromium,
// chromium-browser, google-chrome and google-chrome-stable found in PATH.
func Find() (string, error) {
	for _, name := range binaries {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("no Chromium found in PATH (looked for %s): install Debian's chromium package (apt-get install chromium)",
		strings.Join(binaries, ", "))
}

// Page is a file opened in headless Chromium. Its methods are safe to call
// from one goroutine at a time; the recorded messages and requests are safe
// to read from any goroutine.
type Page struct {
	fileURL  string
	filePath string // absolute, cleaned
	dataDir  string // temporary: the --user-data-dir and the TMPDIR of the browser

	allocCancel context.CancelFunc // stops the browser (kills its process group)
	tabCtx      context.Context    // the chromedp context of the tab
	stopAfter   func() bool        // unregisters the context.AfterFunc of Open

	mu       sync.Mutex
	errs     []string // console errors, exceptions, log entries of level error
	warns    []string // console warnings, log entries of level warning
	requests []string // every URL asked for, other than the file itself
	seen     map[string]bool
	pgid     int // process group of the browser; 0 before it started

	// allowErrors is set by AllowErrors (see OpenForTest).
	allowErrors bool

	closeOnce sync.Once
	closeErr  error
}

// options are knobs that only the tests of this package turn, to show that
// each layer of the blocking matters.
type options struct {
	noIntercept  bool // do not intercept and fail requests with the Fetch domain
	noNetworkOff bool // no offline emulation, host resolver rules or dead proxy
}

// Open starts headless Chromium, loads the file at path in a viewport of
// width x height CSS pixels, waits for the load event and for the scripts of
// the page to settle (two animation frames and a task after the load event),
// and returns the page.
//
// The browser runs until Close, or until ctx ends: both kill its whole
// process group and remove its temporary user data directory. Starting and
// loading are bounded by OpenTimeout (or by ctx, if it ends sooner).
func Open(ctx context.Context, path string, width, height int) (*Page, error) {
	return open(ctx, path, width, height, options{})
}

func open(ctx context.Context, path string, width, height int, o options) (page *Page, err error) {
	if width <= 0 || height <= 0 {
		return nil, fmt.Errorf("browser: invalid viewport %dx%d", width, height)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	if fi, err := os.Stat(abs); err != nil {
		return nil, fmt.Errorf("browser: %w", err)
	} else if fi.IsDir() {
		return nil, fmt.Errorf("browser: %s is a directory", abs)
	}
	bin, err := Find()
	if err != nil {
		return nil, err
	}
	// dataDir holds the profile and the temporary files of the browser
	// (its TMPDIR: the process singleton socket, the shared memory files of
	// --disable-dev-shm-usage), so that Close removes everything it wrote.
	dataDir, err := os.MkdirTemp("", "cnibench-chromium-")
	if err != nil {
		return nil, err
	}
	profileDir, tmpDir := filepath.Join(dataDir, "profile"), filepath.Join(dataDir, "tmp")
	for _, d := range []string{profileDir, tmpDir} {
		if err := os.Mkdir(d, 0o700); err != nil {
			os.RemoveAll(dataDir)
			return nil, err
		}
	}

	p := &Page{
		fileURL:  (&url.URL{Scheme: "file", Path: filepath.ToSlash(abs)}).String(),
		filePath: filepath.ToSlash(abs),
		dataDir:  dataDir,
		seen:     map[string]bool{},
	}

	flags := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(bin),
		chromedp.Flag("headless", "new"),
		chromedp.Flag("no-sandbox", true), // tests run as root
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("no-default-browser-check", true),
		chromedp.Flag("user-data-dir", profileDir),
		chromedp.Env("TMPDIR=" + tmpDir),
		chromedp.Flag("window-size", fmt.Sprintf("%d,%d", width, height)),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.Flag("mute-audio", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-breakpad", true),
		chromedp.Flag("disable-crash-reporter", true),
		chromedp.Flag("disable-domain-reliability", true),
		chromedp.Flag("disable-client-side-phishing-detection", true),
		chromedp.Flag("no-pings", true),
		chromedp.Flag("metrics-recording-only", true),
		chromedp.Flag("password-store", "basic"),
		chromedp.Flag("use-mock-keychain", true),
		chromedp.Flag("force-color-profile", "srgb"),
		chromedp.Flag("disable-features", "Translate,OptimizationHints,MediaRouter,DialMediaRouteProvider"),
		chromedp.ModifyCmdFunc(func(cmd *exec.Cmd) {
			// Own process group, so that Close and a canceled ctx
			// kill the browser and every child it left behind, and
			// SIGKILL when the thread that started it goes away.
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
			cmd.Cancel = func() error {
				if cmd.Process == nil {
					return nil
				}
				return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			}
		}),
	}
	if !o.noNetworkOff {
		flags = append(flags,
			// Every host name fails to resolve, and every http(s) and
			// ws connection, to an IP address or loopback too, goes
			// through a proxy whose name does not resolve. WebRTC may
			// not send UDP around the proxy.
			chromedp.Flag("host-resolver-rules", "MAP * ~NOTFOUND"),
			chromedp.Flag("proxy-server", "http://proxy.invalid:1"),
			chromedp.Flag("proxy-bypass-list", "<-loopback>"),
			chromedp.Flag("force-webrtc-ip-handling-policy", "disable_non_proxied_udp"),
		)
	}

	allocCtx, allocCancel := chromedp.NewExecAllocator(ctx, flags...)
	tabCtx, _ := chromedp.NewContext(allocCtx) // canceled with allocCtx
	p.allocCancel = allocCancel
	p.tabCtx = tabCtx
	defer func() {
		if err != nil {
			p.Close()
			page = nil
		}
	}()

	// The browser lives as long as allocCtx, so Open cannot put its
	// deadline on the contexts it runs with: a watchdog kills the start
	// when it takes too long.
	timedOut := make(chan struct{})
	watchdog := time.AfterFunc(OpenTimeout, func() { close(timedOut); allocCancel() })
	defer func() {
		if !watchdog.Stop() {
			select {
			case <-timedOut:
				err = fmt.Errorf("browser: opening %s took more than %v: %w", abs, OpenTimeout, cmp.Or(err, context.DeadlineExceeded))
			default:
			}
		}
	}()

	// Start the browser and the tab.
	if err := chromedp.Do(tabCtx); err != nil {
		return nil, fmt.Errorf("browser: starting %s: %w", bin, err)
	}
	if b := chromedp.FromContext(tabCtx).Browser; b != nil && b.Process() != nil {
		p.mu.Lock()
		p.pgid = b.Process().Pid
		p.mu.Unlock()
	}
	p.stopAfter = context.AfterFunc(ctx, func() { p.Close() })

	// Record console messages, exceptions, log entries and requests of the
	// tab, in the order in which they arrive.
	if err := chromedp.Listen(tabCtx, p.onEvent); err != nil {
		return nil, err
	}

	if !o.noIntercept {
		if err := p.intercept(tabCtx); err != nil {
			return nil, err
		}
	}
	if !o.noNetworkOff {
		if _, err := chromedp.Call(tabCtx, network.EmulateNetworkConditionsByRule, network.EmulateNetworkConditionsByRuleParams{
			MatchedNetworkConditions: []*network.Conditions{{Offline: true, DownloadThroughput: -1, UploadThroughput: -1}},
		}); err != nil {
			return nil, fmt.Errorf("browser: emulating offline network: %w", err)
		}
	}

	if err := chromedp.Do(tabCtx,
		chromedp.EmulateViewport(int64(width), int64(height)),
		chromedp.Navigate(p.fileURL),
	); err != nil {
		return nil, fmt.Errorf("browser: loading %s: %w", p.fileURL, err)
	}
	if err := p.settle(tabCtx); err != nil {
		return nil, fmt.Errorf("browser: waiting for %s to settle: %w", p.fileURL, err)
	}
	return p, nil
}

// intercept makes the browser pause every request of every target before it
// is sent, and fails all but the one for the file itself.
func (p *Page) intercept(tabCtx context.Context) error {
	paused := chromedp.BrowserEvents(tabCtx, fetch.RequestPaused)
	if _, err := chromedp.CallBrowser(tabCtx, fetch.Enable, fetch.EnableParams{
		Patterns: []*fetch.RequestPattern{{URLPattern: "*", RequestStage: fetch.RequestStageRequest}},
	}); err != nil {
		return fmt.Errorf("browser: enabling request interception: %w", err)
	}
	go func() {
		for ev, err := range paused {
			if err != nil {
				return // the browser or the context is gone
			}
			if p.isSelf(ev.Request.URL) {
				chromedp.CallBrowser(tabCtx, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: ev.RequestID})
				continue
			}
			p.addRequest(ev.Request.URL)
			chromedp.CallBrowser(tabCtx, fetch.FailRequest, fetch.FailRequestParams{
				RequestID:   ev.RequestID,
				ErrorReason: network.ErrorReasonBlockedByClient,
			})
		}
	}()
	return nil
}

// settle waits until the page has had two animation frames and one task
// after the load event, so that scripts that run on load, on
// DOMContentLoaded, in requestAnimationFrame or in a zero timeout are done. It
// also records the targets of <link rel=preconnect> and <link
// rel=dns-prefetch>, which open connections or look names up without a
// request that the interception sees (preload and prefetch are requests).
func (p *Page) settle(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, actionTimeout)
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.Evaluate[chromedp.Void](
		`new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => setTimeout(r, 0))))`,
		chromedp.EvalAwaitPromise))
	if err != nil {
		return err
	}
	hints, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](
		`Array.from(document.querySelectorAll('link[rel~=preconnect i][href], link[rel~=dns-prefetch i][href]'), l => l.href)`))
	if err != nil {
		return err
	}
	for _, h := range hints {
		p.addRequest(h)
	}
	return nil
}

// isSelf reports whether u is the URL of the opened file (any query or
// fragment aside).
func (p *Page) isSelf(u string) bool {
	pu, err := url.Parse(u)
	if err != nil {
		return false
	}
	return pu.Scheme == "file" && (pu.Host == "" || pu.Host == "localhost") && pu.Path == p.filePath
}

// addRequest records a URL the page asked for, once, unless it is the file
// itself or inline data (data:, blob:, about:, javascript:).
func (p *Page) addRequest(u string) {
	if u == "" || p.isSelf(u) {
		return
	}
	if scheme, _, ok := strings.Cut(u, ":"); ok {
		switch strings.ToLower(scheme) {
		case "data", "blob", "about", "javascript":
			return
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.seen[u] {
		p.seen[u] = true
		p.requests = append(p.requests, u)
	}
}

func (p *Page) addError(s string) {
	p.mu.Lock()
	p.errs = append(p.errs, s)
	p.mu.Unlock()
}

func (p *Page) addWarning(s string) {
	p.mu.Lock()
	p.warns = append(p.warns, s)
	p.mu.Unlock()
}

// onEvent runs on the goroutine that reads the messages of the tab: it must
// return fast and must not call the browser.
func (p *Page) onEvent(ev any) {
	switch ev := ev.(type) {
	case *runtime.EventConsoleAPICalled:
		switch ev.Type {
		case runtime.ConsoleAPICalledTypeError, runtime.ConsoleAPICalledTypeAssert:
			p.addError("console." + string(ev.Type) + ": " + argsText(ev.Args) + stackWhere(ev.StackTrace))
		case runtime.ConsoleAPICalledTypeWarning:
			p.addWarning("console.warn: " + argsText(ev.Args) + stackWhere(ev.StackTrace))
		}
	case *runtime.EventExceptionThrown:
		p.addError("uncaught exception: " + exceptionText(ev.ExceptionDetails))
	case *cdplog.EventEntryAdded:
		e := ev.Entry
		if e == nil {
			return
		}
		msg := fmt.Sprintf("log %s %s: %s", e.Source, e.Level, e.Text)
		if e.URL != "" {
			msg += fmt.Sprintf(" (%s:%d)", e.URL, e.LineNumber+1)
		}
		switch e.Level {
		case cdplog.EntryLevelError:
			p.addError(msg)
		case cdplog.EntryLevelWarning:
			p.addWarning(msg)
		}
	case *network.EventRequestWillBeSent:
		if ev.Request != nil {
			p.addRequest(ev.Request.URL)
		}
	case *network.EventWebSocketCreated:
		p.addRequest(ev.URL)
	}
}

// argsText formats the arguments of a console call as the console shows
// them, roughly.
func argsText(args []*runtime.RemoteObject) string {
	parts := make([]string, 0, len(args))
	for _, a := range args {
		parts = append(parts, remoteText(a))
	}
	return strings.Join(parts, " ")
}

func remoteText(a *runtime.RemoteObject) string {
	switch {
	case a == nil:
		return ""
	case len(a.Value) > 0:
		var s string
		if json.Unmarshal(a.Value, &s) == nil {
			return s
		}
		return string(a.Value)
	case a.UnserializableValue != "":
		return string(a.UnserializableValue)
	case a.Description != "":
		return a.Description
	default:
		return string(a.Type)
	}
}

func stackWhere(st *runtime.StackTrace) string {
	if st == nil || len(st.CallFrames) == 0 {
		return ""
	}
	f := st.CallFrames[0]
	return fmt.Sprintf(" (%s:%d)", f.URL, f.LineNumber+1)
}

func exceptionText(d *runtime.ExceptionDetails) string {
	if d == nil {
		return "(no details)"
	}
	text := d.Text
	if d.Exception != nil && d.Exception.Description != "" {
		text += " " + d.Exception.Description
	} else if d.Exception != nil {
		text += " " + remoteText(d.Exception)
	}
	if d.URL != "" {
		text += fmt.Sprintf(" (%s:%d)", d.URL, d.LineNumber+1)
	}
	return text
}

// URL returns the file:// URL of the opened file.
func (p *Page) URL() string { return p.fileURL }

// ConsoleErrors returns what the page reported as errors so far: calls of
// console.error and console.assert that failed, uncaught exceptions and
// unhandled promise rejections, and browser log entries of level error (for
// example "Failed to load resource" for a blocked request).
func (p *Page) ConsoleErrors() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.errs...)
}

// ConsoleWarnings returns the calls of console.warn and the browser log
// entries of level warning so far.
func (p *Page) ConsoleWarnings() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.warns...)
}

// Requests returns every URL the page asked for so far, other than the file
// itself, once each, in the order first asked. Every one of them was blocked.
// Inline data (data:, blob: URLs) is not a request. A preconnect or
// dns-prefetch hint counts as a request for its URL.
func (p *Page) Requests() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.requests...)
}

// eval runs js in the page and decodes its JSON value into a T.
func eval[T any](p *Page, js string) (T, error) {
	ctx, cancel := context.WithTimeout(p.tabCtx, actionTimeout)
	defer cancel()
	return chromedp.Run(ctx, chromedp.Evaluate[T](js, chromedp.EvalAwaitPromise))
}

// jsString quotes s as a JavaScript string literal.
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// Count returns how many elements match the CSS selector.
func (p *Page) Count(selector string) (int, error) {
	n, err := eval[int](p, `document.querySelectorAll(`+jsString(selector)+`).length`)
	if err != nil {
		return 0, fmt.Errorf("browser: Count(%q): %w", selector, err)
	}
	return n, nil
}

// Attr returns the attribute attr of every element that matches the CSS
// selector, in document order; an element without it gives "".
func (p *Page) Attr(selector, attr string) ([]string, error) {
	v, err := eval[[]string](p, `Array.from(document.querySelectorAll(`+jsString(selector)+`), e => e.getAttribute(`+jsString(attr)+`) ?? "")`)
	if err != nil {
		return nil, fmt.Errorf("browser: Attr(%q, %q): %w", selector, attr, err)
	}
	return v, nil
}

// Text returns the text content of every element that matches the CSS
// selector, in document order, with leading and trailing white space
// removed.
func (p *Page) Text(selector string) ([]string, error) {
	v, err := eval[[]string](p, `Array.from(document.querySelectorAll(`+jsString(selector)+`), e => (e.textContent ?? "").trim())`)
	if err != nil {
		return nil, fmt.Errorf("browser: Text(%q): %w", selector, err)
	}
	return v, nil
}

// Click clicks, with real mouse events at its center, the first element
// that matches the CSS selector, and waits for the page to settle. It fails
// at once when nothing matches, and after a timeout when the element never
// becomes visible.
func (p *Page) Click(selector string) error {
	n, err := p.Count(selector)
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("browser: Click(%q): no element matches", selector)
	}
	ctx, cancel := context.WithTimeout(p.tabCtx, actionTimeout)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(selector))); err != nil {
		return fmt.Errorf("browser: Click(%q): %w", selector, err)
	}
	if err := p.settle(p.tabCtx); err != nil {
		return fmt.Errorf("browser: Click(%q): waiting to settle: %w", selector, err)
	}
	return nil
}

// Eval runs js in the page (awaiting it if it is a promise) and decodes its
// JSON value into out, which must be a pointer, or nil to ignore the value.
func (p *Page) Eval(js string, out any) error {
	raw, err := eval[[]byte](p, js)
	if err != nil {
		return fmt.Errorf("browser: Eval: %w", err)
	}
	if out == nil {
		return nil
	}
	if len(raw) == 0 {
		raw = []byte("null") // undefined
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("browser: Eval: decoding %s: %w", raw, err)
	}
	return nil
}

// Screenshot writes a PNG of the whole page (beyond the viewport) to path.
func (p *Page) Screenshot(path string) error {
	ctx, cancel := context.WithTimeout(p.tabCtx, actionTimeout)
	defer cancel()
	buf, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		return fmt.Errorf("browser: Screenshot: %w", err)
	}
	if !bytes.HasPrefix(buf, []byte("\x89PNG\r\n\x1a\n")) {
		return errors.New("browser: Screenshot: the browser did not return a PNG")
	}
	return os.WriteFile(path, buf, 0o644)
}

// Close stops the browser: it kills its process group and every process
// left that uses its user data directory, waits for them to go, and removes
// the directory. It is idempotent, and it runs by itself when the context
// given to Open ends.
func (p *Page) Close() error {
	p.closeOnce.Do(func() {
		if p.stopAfter != nil {
			p.stopAfter()
		}
		// Cancel the allocator: exec kills the process group (see
		// ModifyCmdFunc in open) and chromedp waits for the browser.
		if p.allocCancel != nil {
			p.allocCancel()
		}
		p.mu.Lock()
		pgid := p.pgid
		p.mu.Unlock()
		if pgid > 0 {
			syscall.Kill(-pgid, syscall.SIGKILL) // children that outlived the browser
		}
		var errs []error
		if err := killUsing(p.dataDir, closeTimeout); err != nil {
			errs = append(errs, err)
		}
		if err := waitGroupGone(pgid, closeTimeout); err != nil {
			errs = append(errs, err)
		}
		if err := removeAll(p.dataDir, closeTimeout); err != nil {
			errs = append(errs, err)
		}
		p.closeErr = errors.Join(errs...)
	})
	return p.closeErr
}

// killUsing kills every process whose command line mentions dir (Chromium
// passes --user-data-dir to each child, and crashpad gets paths under it),
// until none is left or the time is up.
func killUsing(dir string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		pids := processesUsing(dir)
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("browser: processes %v still running after %v", pids, limit)
		}
		for _, pid := range pids {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitGroupGone kills the process group pgid until no live process is left
// in it, or the time is up. Zombies do not count: they are dead, and once the
// browser is gone its orphaned children are reaped by init, which can take a
// second or two.
func waitGroupGone(pgid int, limit time.Duration) error {
	if pgid <= 0 {
		return nil
	}
	deadline := time.Now().Add(limit)
	for {
		live := groupLive(pgid)
		if len(live) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("browser: processes %v of group %d still running after %v", live, pgid, limit)
		}
		syscall.Kill(-pgid, syscall.SIGKILL)
		time.Sleep(10 * time.Millisecond)
	}
}

// groupLive returns the processes of the process group pgid that are not
// zombies.
func groupLive(pgid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...; comm can hold spaces and ')'.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) < 3 || f[0] == "Z" || f[0] == "X" {
			continue
		}
		if g, err := strconv.Atoi(f[2]); err == nil && g == pgid {
			pids = append(pids, pid)
		}
	}
	return pids
}

// processesUsing returns the processes, other than zombies, whose command
// line has an argument that contains dir.
func processesUsing(dir string) []int {
	if dir == "" {
		return nil
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || len(cmdline) == 0 { // gone, or a zombie
			continue
		}
		if bytes.Contains(cmdline, []byte(dir)) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// removeAll removes dir, trying again for a while: a child of Chromium that
// is still dying can write in it.
func removeAll(dir string, limit time.Duration) error {
	if dir == "" {
		return nil
	}
	deadline := time.Now().Add(limit)
	for {
		err := os.RemoveAll(dir)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// requireToolsEnv is the environment variable that turns a missing Chromium
// from a skip into a failure (make test sets it).
const requireToolsEnv = "CNIBENCH_REQUIRE_TOOLS"

// RequireChromium returns the path of Chromium. When there is none, it
// skips the test, or fails it when CNIBENCH_REQUIRE_TOOLS=1.
func RequireChromium(t testing.TB) string {
	t.Helper()
	bin, err := Find()
	if err != nil {
		if os.Getenv(requireToolsEnv) == "1" {
			t.Fatalf("%v (%s=1)", err, requireToolsEnv)
		}
		t.Skipf("skipping: %v", err)
	}
	return bin
}

// OpenForTest opens path in a viewport of width x height and registers
// Close in t.Cleanup. It skips the test (or fails it under
// CNIBENCH_REQUIRE_TOOLS=1) when Chromium is missing, fails it when the page
// does not open, and at Close time fails it on any console error or request
// the page made, unless the test called AllowErrors. Console warnings are
// logged.
func OpenForTest(t testing.TB, path string, width, height int) *Page {
	t.Helper()
	RequireChromium(t)
	p, err := Open(context.Background(), path, width, height)
	if err != nil {
		t.Fatalf("opening %s in Chromium: %v", path, err)
	}
	t.Cleanup(func() {
		// Read what was recorded up to the end of the test, then stop
		// the browser.
		errs, reqs, warns := p.ConsoleErrors(), p.Requests(), p.ConsoleWarnings()
		if err := p.Close(); err != nil {
			t.Errorf("closing Chromium: %v", err)
		}
		for _, w := range warns {
			t.Logf("%s: %s", path, w)
		}
		p.mu.Lock()
		allowed := p.allowErrors
		p.mu.Unlock()
		if allowed {
			return
		}
		for _, e := range errs {
			t.Errorf("%s: %s", path, e)
		}
		for _, r := range reqs {
			t.Errorf("%s: requested %s (a self-contained page fetches nothing)", path, r)
		}
	})
	return p
}

// AllowErrors stops OpenForTest from failing the test on the console errors
// and requests of the page: for a test that expects them.
func (p *Page) AllowErrors() {
	p.mu.Lock()
	p.allowErrors = true
	p.mu.Unlock()
}
