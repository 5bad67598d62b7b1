package driver

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math"
	"net"
	"sort"
	"strconv"
	"strings"

	"github.com/cnibench/cnibench/internal/stats"
)

// The "http" protocol (seed 001 §5.2.2, Table 5.6): every server replica runs nginx serving a
// 10 MB file; the client fetches it many times with curl, one new TCP connection per request
// so that a Service balances every request, and records time to first byte (TTFB) and
// transfer rate per request.
const (
	// HTTPPort is where each nginx replica listens.
	HTTPPort = 8080
	// HTTPFile is the URL path of the file every replica serves.
	HTTPFile = "/file"
	// HTTPFileSize is the size of that file: 10 MB, as in the seed.
	HTTPFileSize = 10485760
	// MinHTTPRequests is the fewest requests a trial makes (see HTTPRequests).
	MinHTTPRequests = 100
)

// BusyboxPath is the multi-call binary the setup commands run: /bin/busybox on a Debian host
// (busybox-static) and in the tools image alike, named by path so that the applets it runs do
// not depend on what is linked in PATH.
const BusyboxPath = "/bin/busybox"

// curlDriver is the client side of the "http" protocol. Its server needs per-replica files
// before it starts (NginxSetupCommand, then NginxCommand), so ServerCommand is nil.
type curlDriver struct{}

func (curlDriver) Name() string { return "curl" }

// ServerCommand returns nil: an nginx replica needs its directory prepared by
// NginxSetupCommand and is started with NginxCommand.
func (curlDriver) ServerCommand(int) []string { return nil }

// Command fetches HTTPRequests(s.DurationS) times from s.Target (a Service address) on
// s.Port (0 = 80).
func (curlDriver) Command(s Spec) []string {
	if s.Protocol != "http" {
		return nil
	}
	return CurlCommand(s.Target, orDefault(s.Port, 80), HTTPRequests(s.DurationS))
}

// Parse reads CurlCommand output into HTTPStats metrics.
func (curlDriver) Parse(out []byte, _ Spec) (Metrics, error) {
	f, err := ParseCurl(out)
	if err != nil {
		return nil, err
	}
	m, _ := HTTPStats(f)
	return m, nil
}

// HTTPRequests is how many requests a trial of durationS seconds makes: 20 per second of
// duration, at least MinHTTPRequests (so the default 12 trials of 10 s give 2,400 requests
// per case, and even 1 s trials give 1,200). A request count, not a duration, bounds the
// trial: every request moves the whole file, however long that takes.
func HTTPRequests(durationS int) int {
	return max(MinHTTPRequests, 20*durationS)
}

// NginxConfig returns the nginx.conf of one replica running as a plain process in a pod. Lab
// pods share the host's file system, so every path nginx writes (pid, lock file, access log,
// temp paths) lives under dir, which must be an absolute path of the pod's own; errors go to
// stderr. It serves dir/www on port with sendfile, one worker process, and names the replica
// in an X-Replica header of every response (errors included). Like the official nginx image
// (the seed's server) it leaves tcp_nopush off.
//
// The five *_temp_path directives are those of the Debian nginx 1.22 build (package nginx,
// which nginx-light depends on in Debian 12): nginx creates those directories at startup
// whether or not they are used, and with the compiled-in defaults it would create them under
// /var/lib/nginx, shared by every replica of a lab. The tools image copies the host's nginx
// binary, so the same directives hold there. A build without one of the modules (proxy,
// fastcgi, uwsgi, scgi) rejects its directive as unknown: `nginx -t` then names it.
func NginxConfig(dir string, port int, replica string) []byte {
	path := func(rel string) string { return nginxQuote(strings.TrimRight(dir, "/") + "/" + rel) }
	return nginxServer{
		about: fmt.Sprintf("HTTP replica %s, serving %s on port %d", replica, path("www"), port),
		port:  port, root: path("www"), pid: path("nginx.pid"), lock: path("nginx.lock"),
		accessLog: path("access.log"), replica: nginxQuote(replica),
		temp: func(module string) string { return path("tmp/" + module) },
	}.config()
}

// NginxImageConfig returns the tools image's nginx.conf: a replica's server (the directives of
// NginxConfig) serving root on port when started by hand in a container, with its pid file,
// lock file and temp paths under /tmp, no access log and no X-Replica header. The benchmark
// does not use it: every replica gets its own NginxConfig. has tells whether the image's nginx
// binary knows a directive (a *_temp_path of a module it was built without is rejected).
func NginxImageConfig(root string, port int, has func(directive string) bool) []byte {
	return nginxServer{
		about: fmt.Sprintf("serve %s on port %d in the foreground", root, port),
		port:  port, root: root, pid: "/tmp/nginx.pid", lock: "/tmp/nginx.lock", accessLog: "off",
		temp: func(module string) string {
			if !has(module + "_temp_path") {
				return ""
			}
			return "/tmp/nginx-" + module
		},
	}.config()
}

// nginxQuote makes s an nginx "..." string (with \" and \\ escapes; the callers' names need
// no more).
func nginxQuote(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

// nginxServer is what differs between the nginx configurations cnibench writes, as nginx
// values (quoted where needed); everything else is the same for every nginx cnibench runs.
type nginxServer struct {
	about                      string // the header comment
	port                       int
	root, pid, lock, accessLog string                     // accessLog may be off
	temp                       func(module string) string // temp path of a module; "" = none
	replica                    string                     // X-Replica header value; "" = no header
}

// nginxTempModules are the modules whose *_temp_path directive the configuration sets.
var nginxTempModules = []string{"client_body", "proxy", "fastcgi", "uwsgi", "scgi"}

func (c nginxServer) config() []byte {
	var b strings.Builder
	fmt.Fprintf(&b, `# Generated by cnibench: %s.
user root;
worker_processes 1;
daemon off;
pid %s;
lock_file %s;
error_log stderr warn;

events {
    worker_connections 1024;
}

http {
    access_log %s;
    default_type application/octet-stream;
    sendfile on;
    tcp_nodelay on;
    keepalive_timeout 65;
`, c.about, c.pid, c.lock, c.accessLog)
	for _, m := range nginxTempModules {
		if p := c.temp(m); p != "" {
			fmt.Fprintf(&b, "    %-22s %s;\n", m+"_temp_path", p)
		}
	}
	fmt.Fprintf(&b, `
    server {
        listen %d;
        server_name _;
        root %s;
`, c.port, c.root)
	if c.replica != "" {
		fmt.Fprintf(&b, "        add_header X-Replica %s always;\n", c.replica)
	}
	b.WriteString(`        location / {
        }
    }
}
`)
	return []byte(b.String())
}

// nginxSetupScript prepares a replica's directory. It is a constant: the busybox path, the
// directory, the configuration and the file size arrive as positional parameters ($0..$3,
// separate exec arguments), so nothing in them is interpreted. The file is written under a
// temporary name and renamed, so a replica never serves a partial file.
const nginxSetupScript = `set -e
bb=$0 dir=$1
"$bb" mkdir -p "$dir/www" "$dir/tmp"
"$bb" printf '%s' "$2" >"$dir/nginx.conf"
"$bb" head -c "$3" /dev/zero >"$dir/www/file.part"
"$bb" mv "$dir/www/file.part" "$dir/www/file"`

// NginxSetupCommand is the argv that prepares a replica's directory dir: dir/nginx.conf
// (NginxConfig), the temp-path parent dir/tmp, and dir/www/file of HTTPFileSize bytes read
// from /dev/zero. The content cannot matter on the wire: curl sends no Accept-Encoding, so
// HTTP requires nginx to answer with the identity encoding (and its gzip is off anyway), and
// no data plane compresses packets. /dev/zero costs about half of /dev/urandom (measured
// ~0.2 s against ~0.4 s per 10 MB file here), which adds up with 100 replicas on 2 cores.
func NginxSetupCommand(dir string, port int, replica string) []string {
	return []string{BusyboxPath, "sh", "-c", nginxSetupScript, BusyboxPath, dir,
		string(NginxConfig(dir, port, replica)), strconv.Itoa(HTTPFileSize)}
}

// NginxCommand runs the replica prepared in dir in the foreground. -p makes dir the prefix
// and -e stderr keeps nginx from opening its compiled-in error log before it reads the
// configuration (nginx 1.19.5+).
func NginxCommand(dir string) []string {
	dir = strings.TrimRight(dir, "/")
	return []string{"nginx", "-p", dir + "/", "-e", "stderr", "-c", dir + "/nginx.conf"}
}

// NginxCleanupCommand removes a replica's directory.
func NginxCleanupCommand(dir string) []string {
	return []string{BusyboxPath, "rm", "-rf", dir}
}

// curlFormat is curl's -w line for each transfer. Both headers carry a prefix so an absent
// header shows as an empty value rather than a missing field. %header{} needs curl 7.84+.
const curlFormat = "fetch %{url_effective} %{http_code} %{num_connects} %{time_connect} " +
	"%{time_starttransfer} %{time_total} %{size_download} %{speed_download} " +
	"length=%header{content-length} replica=%header{x-replica}\\n"

// CurlCommand is one curl run fetching HTTPFile n times from target:port, each request on a
// new TCP connection, printing one curlFormat line per request to stdout.
//
// Verified with curl 7.88.1 against nginx 1.22 (see testdata/README.txt): with URL globbing
// curl keeps the connection alive across the URLs (%{num_connects} 0 after the first), and
// --no-keepalive does not change that (it only turns off TCP keepalive probes); curl 7.88 has
// no --fresh-connect option. "Connection: close" makes nginx close after each response, so
// every request opens a new connection (num_connects 1, a new local port each time) and the
// Service balances every request; ParseCurl rejects a reused connection.
func CurlCommand(target string, port, n int) []string {
	url := fmt.Sprintf("http://%s%s?[1-%d]", net.JoinHostPort(target, strconv.Itoa(port)), HTTPFile, n)
	return []string{"curl", "-sS", "-o", "/dev/null", "-H", "Connection: close",
		"--connect-timeout", "5", "--max-time", "60", "-w", curlFormat, url}
}

// Fetch is one request of a CurlCommand run.
type Fetch struct {
	N          int     // request number, from 1
	Code       int     // HTTP status
	ConnectS   float64 // seconds from start to TCP connection established (curl time_connect)
	TTFBS      float64 // seconds from start to the first response byte (curl time_starttransfer)
	TotalS     float64 // seconds from start to the end of the transfer (curl time_total)
	Size       int64   // body bytes received
	SpeedBytes float64 // curl's speed_download: Size/TotalS in bytes per second
	Replica    string  // the X-Replica header: which replica answered
}

// ParseCurl parses CurlCommand output strictly: every request must have answered 200 on a
// new connection with the whole body (size = Content-Length), in order, or the error names
// the request.
func ParseCurl(out []byte) ([]Fetch, error) {
	var fetches []Fetch
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		f, err := parseFetch(line, len(fetches)+1)
		if err != nil {
			return nil, err
		}
		fetches = append(fetches, f)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("curl: %w", err)
	}
	if len(fetches) == 0 {
		if len(bytes.TrimSpace(out)) == 0 {
			return nil, errors.New("curl: empty output")
		}
		return nil, fmt.Errorf("curl: no fetch lines in output: %s", excerpt(out))
	}
	return fetches, nil
}

func parseFetch(line string, n int) (Fetch, error) {
	f := strings.Fields(line)
	if len(f) != 11 || f[0] != "fetch" {
		return Fetch{}, fmt.Errorf("curl: request %d: garbled line %q", n, excerpt([]byte(line)))
	}
	bad := func(what string) (Fetch, error) {
		return Fetch{}, fmt.Errorf("curl: request %d: bad %s in %q", n, what, line)
	}
	fe := Fetch{N: n}
	// The URL ends in ?N (CurlCommand's glob): the lines must come in order, none missing.
	_, num, ok := strings.Cut(f[1], "?")
	if got, err := strconv.Atoi(num); !ok || err != nil {
		return bad("URL (no ?N request number)")
	} else if got != n {
		return Fetch{}, fmt.Errorf("curl: line %d is request %d: output out of order or incomplete", n, got)
	}
	var err error
	if fe.Code, err = strconv.Atoi(f[2]); err != nil {
		return bad("http_code")
	}
	connects, err := strconv.Atoi(f[3])
	if err != nil {
		return bad("num_connects")
	}
	for i, p := range []*float64{&fe.ConnectS, &fe.TTFBS, &fe.TotalS} {
		if *p, err = strconv.ParseFloat(f[4+i], 64); err != nil || *p < 0 || math.IsNaN(*p) || math.IsInf(*p, 0) {
			return bad("time")
		}
	}
	if fe.Size, err = strconv.ParseInt(f[7], 10, 64); err != nil || fe.Size < 0 {
		return bad("size_download")
	}
	if fe.SpeedBytes, err = strconv.ParseFloat(f[8], 64); err != nil || fe.SpeedBytes < 0 {
		return bad("speed_download")
	}
	length, ok1 := strings.CutPrefix(f[9], "length=")
	replica, ok2 := strings.CutPrefix(f[10], "replica=")
	if !ok1 || !ok2 {
		return Fetch{}, fmt.Errorf("curl: request %d: garbled line %q", n, excerpt([]byte(line)))
	}
	if strings.Contains(length+replica, "%header") {
		return Fetch{}, errors.New("curl: this curl does not know -w %header{} (needs 7.84 or later)")
	}
	fe.Replica = replica
	switch {
	case fe.Code == 0:
		return Fetch{}, fmt.Errorf("curl: request %d: no HTTP response (curl's error is on its stderr)", n)
	case fe.Code != 200:
		return Fetch{}, fmt.Errorf("curl: request %d: HTTP status %d", n, fe.Code)
	case connects != 1:
		return Fetch{}, fmt.Errorf("curl: request %d reused a connection (num_connects %d): a Service would not balance it", n, connects)
	}
	want, err := strconv.ParseInt(length, 10, 64)
	if err != nil {
		return Fetch{}, fmt.Errorf("curl: request %d: no Content-Length in the response", n)
	}
	if fe.Size != want {
		return Fetch{}, fmt.Errorf("curl: request %d: short download: %d of %d bytes", n, fe.Size, want)
	}
	if fe.TTFBS <= 0 || fe.TTFBS > fe.TotalS || fe.ConnectS > fe.TTFBS {
		return Fetch{}, fmt.Errorf("curl: request %d: inconsistent times connect %g, first byte %g, total %g s", n, fe.ConnectS, fe.TTFBS, fe.TotalS)
	}
	return fe, nil
}

// SeedFetches is how many fetches the seed's statistic uses: 6, of which the best and the
// worst are dropped.
const SeedFetches = 6

// HTTPStats summarizes fetches (ParseCurl output) and counts the requests each replica served.
// Metrics:
//
//   - ttfb_seed_ms: the seed's statistic, the mean TTFB of the first SeedFetches fetches with
//     the best and the worst dropped (the central 4); absent with fewer than 6 fetches.
//   - ttfb_mean_ms, ttfb_min_ms, ttfb_p50_ms, ttfb_p90_ms, ttfb_p99_ms, ttfb_max_ms over all
//     fetches; percentiles are exact nearest-rank values of the sorted samples (a trial has a
//     few hundred, so no histogram is needed).
//   - connect_mean_ms: mean time to establish the connection (through the Service's DNAT).
//   - transfer_bps: mean per request of 8*size/time_total, i.e. curl's speed_download (the
//     seed's figure) in bit/s, computed from the exact fields rather than curl's rounded one.
//   - requests_per_s: requests / sum of time_total (curl runs them one after another).
//   - requests, replicas_served (distinct non-empty X-Replica values).
func HTTPStats(fetches []Fetch) (Metrics, map[string]int) {
	m := Metrics{}
	counts := map[string]int{}
	n := len(fetches)
	if n == 0 {
		return m, counts
	}
	ttfb := make([]float64, n)
	var sumTTFB, sumConnect, sumRate, sumTotal float64
	for i, f := range fetches {
		ttfb[i] = f.TTFBS * 1000
		sumTTFB += ttfb[i]
		sumConnect += f.ConnectS * 1000
		sumTotal += f.TotalS
		if f.TotalS > 0 {
			sumRate += 8 * float64(f.Size) / f.TotalS
		}
		if f.Replica != "" {
			counts[f.Replica]++
		}
	}
	if n >= SeedFetches {
		m["ttfb_seed_ms"] = centralMean(ttfb[:SeedFetches])
	}
	sorted := append([]float64(nil), ttfb...)
	sort.Float64s(sorted)
	m["ttfb_mean_ms"] = sumTTFB / float64(n)
	m["ttfb_min_ms"] = sorted[0]
	m["ttfb_p50_ms"] = stats.NearestRank(sorted, 50)
	m["ttfb_p90_ms"] = stats.NearestRank(sorted, 90)
	m["ttfb_p99_ms"] = stats.NearestRank(sorted, 99)
	m["ttfb_max_ms"] = sorted[n-1]
	m["connect_mean_ms"] = sumConnect / float64(n)
	m["transfer_bps"] = sumRate / float64(n)
	if sumTotal > 0 {
		m["requests_per_s"] = float64(n) / sumTotal
	}
	m["requests"] = float64(n)
	m["replicas_served"] = float64(len(counts))
	return m, counts
}

// centralMean is the mean of xs without its smallest and its largest value.
func centralMean(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	s = s[1 : len(s)-1]
	var sum float64
	for _, x := range s {
		sum += x
	}
	return sum / float64(len(s))
}
