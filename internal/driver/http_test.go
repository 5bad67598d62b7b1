package driver

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestCurlCommand(t *testing.T) {
	argv := CurlCommand("10.96.0.10", 80, 250)
	if argv[0] != "curl" || argv[len(argv)-1] != "http://10.96.0.10:80/file?[1-250]" {
		t.Errorf("argv = %q", argv)
	}
	if i := slices.Index(argv, "-H"); i < 0 || argv[i+1] != "Connection: close" {
		t.Errorf("no Connection: close header (one connection per request) in %q", argv)
	}
	if i := slices.Index(argv, "-o"); i < 0 || argv[i+1] != "/dev/null" {
		t.Errorf("body not discarded in %q", argv)
	}
	d, s := curlDriver{}, Spec{Protocol: "http", Target: "10.96.0.10", DurationS: 10}
	if got := d.Command(s); got[len(got)-1] != "http://10.96.0.10:80/file?[1-200]" {
		t.Errorf("Command(%+v) URL = %q, want 200 requests on port 80", s, got[len(got)-1])
	}
	if d.Command(Spec{Protocol: "tcp"}) != nil {
		t.Error("Command accepts a tcp spec")
	}
}

func TestHTTPRequests(t *testing.T) {
	for _, c := range []struct{ d, want int }{{0, 100}, {1, 100}, {5, 100}, {6, 120}, {10, 200}, {60, 1200}} {
		if got := HTTPRequests(c.d); got != c.want {
			t.Errorf("HTTPRequests(%d) = %d, want %d", c.d, got, c.want)
		}
	}
}

func TestNginxConfig(t *testing.T) {
	conf := string(NginxConfig("/tmp/x/r1/", 8080, "replica1"))
	for _, s := range []string{"daemon off;", "worker_processes 1;", "sendfile on;", "listen 8080;",
		`root "/tmp/x/r1/www";`, `pid "/tmp/x/r1/nginx.pid";`, `access_log "/tmp/x/r1/access.log";`,
		`client_body_temp_path  "/tmp/x/r1/tmp/client_body";`, `add_header X-Replica "replica1" always;`} {
		if !strings.Contains(conf, s) {
			t.Errorf("config lacks %q:\n%s", s, conf)
		}
	}
	// Every absolute path the config names is under the replica's directory.
	for _, f := range strings.Fields(conf) {
		if p := strings.Trim(f, `";`); strings.HasPrefix(p, "/") && p != "/" && !strings.HasPrefix(p, "/tmp/x/r1/") {
			t.Errorf("path %q outside the replica's directory", p)
		}
	}
	if c := string(NginxConfig("/d", 80, `a"b\c`)); !strings.Contains(c, `X-Replica "a\"b\\c" always;`) {
		t.Errorf("replica name not quoted for nginx:\n%s", c)
	}
}

// prepareReplica runs NginxSetupCommand for dir and checks what it made.
func prepareReplica(t *testing.T, dir string, port int, replica string) {
	t.Helper()
	argv := NginxSetupCommand(dir, port, replica)
	if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("setup: %v: %s", err, out)
	}
	fi, err := os.Stat(filepath.Join(dir, "www", "file"))
	if err != nil || fi.Size() != HTTPFileSize {
		t.Fatalf("file: %v, %v", fi, err)
	}
	if conf, err := os.ReadFile(filepath.Join(dir, "nginx.conf")); err != nil || !bytes.Equal(conf, NginxConfig(dir, port, replica)) {
		t.Fatalf("nginx.conf differs from NginxConfig (%v):\n%s", err, conf)
	}
}

// TestNginxSetupAndConfigTest prepares a replica with the real busybox and checks the
// configuration with the real nginx (nginx -t).
func TestNginxSetupAndConfigTest(t *testing.T) {
	for _, tool := range []string{BusyboxPath, "nginx"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not found", tool)
		}
	}
	dir := filepath.Join(t.TempDir(), "replica0")
	prepareReplica(t, dir, HTTPPort, "replica0")
	argv := append(NginxCommand(dir), "-t")
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "test is successful") {
		t.Fatalf("%q: %v\n%s", argv, err, out)
	}
	for _, d := range []string{"client_body", "proxy", "fastcgi", "uwsgi", "scgi"} {
		if _, err := os.Stat(filepath.Join(dir, "tmp", d)); err != nil {
			t.Errorf("nginx did not create its temp path under the replica's directory: %v", err)
		}
	}
	cl := NginxCleanupCommand(dir)
	if out, err := exec.Command(cl[0], cl[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("cleanup: %v: %s", err, out)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("cleanup left %s: %v", dir, err)
	}
}

func TestParseCurlRecorded(t *testing.T) {
	out := readTestdata(t, "curl-3replicas.txt")
	f, err := ParseCurl(out)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Count(strings.TrimSpace(string(out)), "\n") + 1
	if len(f) != lines {
		t.Fatalf("%d fetches from %d lines", len(f), lines)
	}
	m, counts := HTTPStats(f)
	if m["requests"] != float64(lines) || m["replicas_served"] != 3 || len(counts) != 3 {
		t.Errorf("requests %v, replicas_served %v, counts %v", m["requests"], m["replicas_served"], counts)
	}
	sum := 0
	for r, c := range counts {
		if !strings.HasPrefix(r, "replica") || c == 0 {
			t.Errorf("replica %q served %d", r, c)
		}
		sum += c
	}
	if sum != lines {
		t.Errorf("per-replica counts sum to %d, want %d", sum, lines)
	}
	var speed float64
	for i, x := range f {
		if x.N != i+1 || x.Code != 200 || x.Size != HTTPFileSize || x.TTFBS <= 0 || x.TTFBS > x.TotalS {
			t.Errorf("fetch %d = %+v", i, x)
		}
		speed += 8 * x.SpeedBytes
	}
	// transfer_bps is curl's own speed_download (which curl rounds to whole bytes/s).
	if got, want := m["transfer_bps"], speed/float64(len(f)); math.Abs(got-want) > 1e-6*want {
		t.Errorf("transfer_bps = %v, curl's speed_download says %v", got, want)
	}
	order := []string{"ttfb_min_ms", "ttfb_p50_ms", "ttfb_p90_ms", "ttfb_p99_ms", "ttfb_max_ms"}
	for i := 1; i < len(order); i++ {
		if m[order[i-1]] > m[order[i]] {
			t.Errorf("%s %v > %s %v", order[i-1], m[order[i-1]], order[i], m[order[i]])
		}
	}
	if m["ttfb_min_ms"] <= 0 || m["ttfb_seed_ms"] < m["ttfb_min_ms"] || m["ttfb_seed_ms"] > m["ttfb_max_ms"] {
		t.Errorf("ttfb metrics %v", m)
	}
	// Generic Driver path.
	dm, err := curlDriver{}.Parse(out, Spec{Protocol: "http"})
	if err != nil || dm["requests"] != m["requests"] {
		t.Errorf("curlDriver.Parse = %v, %v", dm, err)
	}
}

func TestParseCurlErrors(t *testing.T) {
	good := "fetch http://10.96.0.10:80/file?1 200 1 0.000100 0.000500 0.010000 10485760 1048576000 length=10485760 replica=replica0\n"
	line2 := strings.ReplaceAll(good, "?1 ", "?2 ")
	for _, c := range []struct {
		name, out, want string
	}{
		{"refused", string(readTestdata(t, "curl-refused.txt")), "request 1: no HTTP response"},
		{"404", string(readTestdata(t, "curl-404.txt")), "request 1: HTTP status 404"},
		{"short", string(readTestdata(t, "curl-short.txt")), "short download"},
		{"reuse", string(readTestdata(t, "curl-reuse.txt")), "request 2 reused a connection"},
		{"empty", "", "empty output"},
		{"no fetch lines", "curl: (6) Could not resolve host\n", "request 1: garbled line"},
		{"truncated", good + line2[:60] + "\n", "request 2: garbled line"},
		{"missing request", good + strings.ReplaceAll(good, "?1 ", "?3 "), "line 2 is request 3"},
		{"no number", strings.ReplaceAll(good, "?1 ", " "), "request 1: bad URL"},
		{"bad time", strings.ReplaceAll(good, "0.000500", "x"), "request 1: bad time"},
		{"negative time", strings.ReplaceAll(good, "0.000500", "-1"), "request 1: bad time"},
		{"bad size", strings.ReplaceAll(good, " 10485760 1048576000", " 1e7 1048576000"), "request 1: bad size_download"},
		{"no length", strings.ReplaceAll(good, "length=10485760", "length="), "no Content-Length"},
		{"old curl", strings.ReplaceAll(good, "replica=replica0", "replica=%header{x-replica}"), "needs 7.84"},
		{"ttfb after total", strings.ReplaceAll(good, "0.010000", "0.000400"), "inconsistent times"},
		{"zero ttfb", strings.ReplaceAll(good, "0.000500", "0.000000"), "inconsistent times"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, err := ParseCurl([]byte(c.out))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("ParseCurl = %v, %v; want error containing %q", f, err, c.want)
			}
		})
	}
	// An absent X-Replica header is not a parse error: the fetch counts, no replica does.
	f, err := ParseCurl([]byte(strings.ReplaceAll(good, "replica=replica0", "replica=")))
	if err != nil {
		t.Fatal(err)
	}
	if m, counts := HTTPStats(f); m["replicas_served"] != 0 || len(counts) != 0 || m["requests"] != 1 {
		t.Errorf("no header: %v %v", m, counts)
	}
}

// fetches builds fetches with the given TTFBs in milliseconds.
func fetches(ttfbMS ...float64) []Fetch {
	var out []Fetch
	for i, ms := range ttfbMS {
		out = append(out, Fetch{N: i + 1, Code: 200, ConnectS: ms / 4000, TTFBS: ms / 1000, TotalS: ms/1000 + 0.01,
			Size: HTTPFileSize, Replica: fmt.Sprintf("r%d", i%3)})
	}
	return out
}

// assertSome checks the wanted metrics only.
func assertSome(t *testing.T, got, want Metrics) {
	t.Helper()
	for k, w := range want {
		if g, ok := got[k]; !ok || math.Abs(g-w) > 1e-9*math.Max(1, math.Abs(w)) {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, w)
		}
	}
}

func TestHTTPStatsKnown(t *testing.T) {
	// The seed's statistic: the first 6 fetches, best (1) and worst (9) dropped, mean of
	// 2, 3, 4, 5; the later fetches (100, 200) do not enter it.
	m, counts := HTTPStats(fetches(5, 1, 3, 9, 4, 2, 100, 200))
	want := Metrics{"ttfb_seed_ms": 3.5, "ttfb_min_ms": 1, "ttfb_max_ms": 200, "ttfb_mean_ms": 324.0 / 8,
		"requests": 8, "replicas_served": 3, "connect_mean_ms": 324.0 / 8 / 4,
		// sorted 1 2 3 4 5 9 100 200: nearest rank ceil(p/100*8)
		"ttfb_p50_ms": 4, "ttfb_p90_ms": 200, "ttfb_p99_ms": 200,
		// 8 requests in 0.324 s of TTFB plus 8 * 10 ms of body
		"requests_per_s": 8 / 0.404}
	var rate float64
	for _, ms := range []float64{5, 1, 3, 9, 4, 2, 100, 200} {
		rate += 8 * HTTPFileSize / (ms/1000 + 0.01)
	}
	want["transfer_bps"] = rate / 8
	assertMetrics(t, m, want) // the full set of metrics
	if counts["r0"] != 3 || counts["r1"] != 3 || counts["r2"] != 2 {
		t.Errorf("counts = %v", counts)
	}
	// Percentiles (nearest rank) of 1..100 ms, given in a shuffled order.
	var ms []float64
	for _, i := range rand.New(rand.NewSource(1)).Perm(100) {
		ms = append(ms, float64(i+1))
	}
	m, _ = HTTPStats(fetches(ms...))
	assertSome(t, m, Metrics{"ttfb_p50_ms": 50, "ttfb_p90_ms": 90, "ttfb_p99_ms": 99, "ttfb_min_ms": 1, "ttfb_max_ms": 100, "ttfb_mean_ms": 50.5})
	// 10 samples: P99 is the largest, P90 the 9th, P50 the 5th.
	m, _ = HTTPStats(fetches(10, 20, 30, 40, 50, 60, 70, 80, 90, 1000))
	assertSome(t, m, Metrics{"ttfb_p50_ms": 50, "ttfb_p90_ms": 90, "ttfb_p99_ms": 1000})
	// Rate and request rate: 10 MB in 0.5 s and in 1.5 s.
	f := []Fetch{{TTFBS: 0.001, TotalS: 0.5, Size: HTTPFileSize}, {TTFBS: 0.001, TotalS: 1.5, Size: HTTPFileSize}}
	m, _ = HTTPStats(f)
	assertSome(t, m, Metrics{"transfer_bps": (8*HTTPFileSize/0.5 + 8*HTTPFileSize/1.5) / 2, "requests_per_s": 1, "replicas_served": 0})
	// Fewer than 6 fetches: no seed statistic; none: no metrics.
	if m, _ := HTTPStats(fetches(1, 2, 3, 4, 5)); m["requests"] != 5 {
		t.Errorf("5 fetches: %v", m)
	} else if _, ok := m["ttfb_seed_ms"]; ok {
		t.Errorf("ttfb_seed_ms from 5 fetches: %v", m)
	}
	if m, c := HTTPStats(nil); len(m) != 0 || len(c) != 0 {
		t.Errorf("no fetches: %v %v", m, c)
	}
}

// httpLab is a client namespace that reaches n nginx replicas, each in its own namespace,
// through a virtual IP that an nftables DNAT rule balances per connection (numgen random),
// the way a Service does. Everything carries a "cnbth"+4 digits prefix and is removed when the
// test ends.
type httpLab struct {
	client   string
	vip      string
	replicas []string // replica IPs
	dirs     []string
}

const httpLabVIP = "10.96.0.10"

func run(t *testing.T, argv ...string) []byte {
	t.Helper()
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%q: %v: %s", argv, err, out)
	}
	return out
}

func nsenter(ns string, argv ...string) []string {
	return append([]string{"nsenter", "--net=/run/netns/" + ns}, argv...)
}

func newHTTPLab(t *testing.T, n int) *httpLab {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces)")
	}
	for _, tool := range []string{"ip", "nft", "nsenter", "nginx", "curl", BusyboxPath} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not found", tool)
		}
	}
	p := fmt.Sprintf("cnbth%04d", rand.Intn(10000))
	l := &httpLab{client: p + "c", vip: httpLabVIP}
	var made []string
	t.Cleanup(func() {
		for _, ns := range made {
			_ = exec.Command("ip", "netns", "del", ns).Run()
		}
	})
	run(t, "ip", "netns", "add", l.client)
	made = append(made, l.client)
	run(t, "ip", "-n", l.client, "link", "set", "lo", "up")
	var elems []string
	for i := 0; i < n; i++ {
		ns := fmt.Sprintf("%ss%d", p, i)
		run(t, "ip", "netns", "add", ns)
		made = append(made, ns)
		a, b := fmt.Sprintf("%sa%d", p, i), fmt.Sprintf("%sb%d", p, i)
		run(t, "ip", "-n", l.client, "link", "add", a, "type", "veth", "peer", "name", b, "netns", ns)
		cip, sip := fmt.Sprintf("10.99.%d.1", i+1), fmt.Sprintf("10.99.%d.2", i+1)
		run(t, "ip", "-n", l.client, "addr", "add", cip+"/24", "dev", a)
		run(t, "ip", "-n", l.client, "link", "set", a, "up")
		run(t, "ip", "-n", ns, "addr", "add", sip+"/24", "dev", b)
		run(t, "ip", "-n", ns, "link", "set", b, "up")
		run(t, "ip", "-n", ns, "link", "set", "lo", "up")
		// Replies go back to whichever client address the connection came from.
		run(t, "ip", "-n", ns, "route", "add", "default", "via", cip)
		l.replicas = append(l.replicas, sip)
		elems = append(elems, fmt.Sprintf("%d : %s", i, sip))

		dir := filepath.Join(t.TempDir(), fmt.Sprintf("replica%d", i))
		prepareReplica(t, dir, HTTPPort, fmt.Sprintf("replica%d", i))
		l.dirs = append(l.dirs, dir)
		argv := nsenter(ns, NginxCommand(dir)...)
		cmd := exec.Command(argv[0], argv[1:]...)
		var stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stderr, &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { // runs before the namespaces are deleted
			_ = cmd.Process.Signal(os.Interrupt)
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
		})
		waitHTTP(t, l.client, sip, &stderr)
	}
	// The client's route to the VIP; the DNAT rule then picks a replica per connection.
	run(t, "ip", "-n", l.client, "route", "add", "10.96.0.0/16", "dev", p+"a0")
	rules := fmt.Sprintf("table ip %s {\n chain out {\n  type nat hook output priority -100; policy accept;\n"+
		"  ip daddr %s tcp dport 80 dnat to numgen random mod %d map { %s } : %d\n }\n}\n",
		p, l.vip, n, strings.Join(elems, ", "), HTTPPort)
	f := filepath.Join(t.TempDir(), "lb.nft")
	if err := os.WriteFile(f, []byte(rules), 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, nsenter(l.client, "nft", "-f", f)...)
	return l
}

// waitHTTP waits until the replica at ip answers.
func waitHTTP(t *testing.T, client, ip string, stderr *bytes.Buffer) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		argv := nsenter(client, "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "http://"+ip+":"+strconv.Itoa(HTTPPort)+"/")
		if out, _ := exec.Command(argv[0], argv[1:]...).Output(); len(out) == 3 && string(out) != "000" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("nginx on %s does not answer: %s", ip, stderr)
		}
	}
}

// curl runs argv in the client namespace and returns its stdout, stderr and exit code.
func (l *httpLab) curl(t *testing.T, argv []string) ([]byte, []byte, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	argv = nsenter(l.client, argv...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatal(err)
	}
	return stdout.Bytes(), stderr.Bytes(), cmd.ProcessState.ExitCode()
}

// TestLiveHTTPReplicas runs real nginx replicas behind a per-connection load balancer and
// checks that CurlCommand opens a connection per request, that ParseCurl reads its output, and
// that the X-Replica counts match what each replica's access log says it served.
//
// With CNIBENCH_RECORD_CURL=1 it also (re)records testdata/curl-*.txt (see README-curl.txt).
func TestLiveHTTPReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("short mode")
	}
	const replicas, requests = 3, 60
	l := newHTTPLab(t, replicas)
	out, stderr, code := l.curl(t, CurlCommand(l.vip, 80, requests))
	if code != 0 {
		t.Fatalf("curl exited %d: %s", code, stderr)
	}
	f, err := ParseCurl(out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(f) != requests {
		t.Fatalf("%d fetches, want %d", len(f), requests)
	}
	m, counts := HTTPStats(f)
	if m["replicas_served"] != replicas {
		t.Errorf("replicas served %v, want %d (counts %v)", m["replicas_served"], replicas, counts)
	}
	if m["ttfb_p50_ms"] <= 0 || m["ttfb_p99_ms"] > 1000 || m["transfer_bps"] < 1e8 {
		t.Errorf("implausible loopback-lab figures: %v", m)
	}
	// Server side: each replica's access log has exactly the requests it was credited with
	// (plus the one readiness probe of waitHTTP).
	for i, dir := range l.dirs {
		b, err := os.ReadFile(filepath.Join(dir, "access.log"))
		if err != nil {
			t.Fatal(err)
		}
		got := strings.Count(string(b), "GET "+HTTPFile+"?")
		if want := counts[fmt.Sprintf("replica%d", i)]; got != want {
			t.Errorf("replica%d logged %d file requests, X-Replica credits it with %d", i, got, want)
		}
	}
	if os.Getenv("CNIBENCH_RECORD_CURL") == "1" {
		record(t, l, out)
	}
}

// record writes the testdata: the good run above and real failures.
func record(t *testing.T, l *httpLab, good []byte) {
	write := func(name string, out []byte) {
		if err := os.WriteFile(filepath.Join("testdata", name), out, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("curl-3replicas.txt", good)
	edit := func(argv []string, fn func([]string) []string) []string {
		return fn(slices.Clone(argv))
	}
	cases := []struct {
		file string
		argv []string
	}{
		// Nothing listens on the replica's port 8081.
		{"curl-refused.txt", CurlCommand(l.replicas[0], 8081, 2)},
		// A path the replicas do not serve.
		{"curl-404.txt", edit(CurlCommand(l.vip, 80, 2), func(a []string) []string {
			a[len(a)-1] = strings.Replace(a[len(a)-1], HTTPFile, "/nofile", 1)
			return a
		})},
		// The transfer cut by --max-time 1 at a limited rate.
		{"curl-short.txt", edit(CurlCommand(l.vip, 80, 1), func(a []string) []string {
			a[slices.Index(a, "--max-time")+1] = "1"
			return append(a[:1], append([]string{"--limit-rate", "1M"}, a[1:]...)...)
		})},
		// Without "Connection: close": curl keeps the connection for the next requests.
		{"curl-reuse.txt", edit(CurlCommand(l.vip, 80, 3), func(a []string) []string {
			i := slices.Index(a, "-H")
			return append(a[:i], a[i+2:]...)
		})},
	}
	for _, c := range cases {
		out, stderr, code := l.curl(t, c.argv)
		write(c.file, out)
		t.Logf("%s (exit %d): %q\n  stderr: %s", c.file, code, c.argv, bytes.TrimSpace(stderr))
	}
}
