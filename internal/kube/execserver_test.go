package kube

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/httpstream/wsstream"
	"k8s.io/apimachinery/pkg/util/remotecommand"
	"k8s.io/client-go/rest"

	"github.com/cnibench/cnibench/internal/cluster"
)

var execPath = regexp.MustCompile(`^/api/v1/namespaces/([^/]+)/pods/([^/]+)/exec$`)

// fakeExecServer serves the pods/exec subresource the way the kubelet's WebSocket server
// does (protocol v5.channel.k8s.io), running the command on this machine: every "pod" is this
// host. Pods named "missing" do not exist.
func fakeExecServer(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m := execPath.FindStringSubmatch(r.URL.Path)
		if m == nil || m[2] == "missing" || !wsstream.IsWebSocketRequest(r) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			_ = json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
				Status: metav1.StatusFailure, Reason: metav1.StatusReasonNotFound, Code: http.StatusNotFound, Message: "pods \"" + m[2] + "\" not found"})
			return
		}
		q := r.URL.Query()
		argv := q["command"]
		if q.Get("container") != "main" || q.Get("stdout") != "true" || q.Get("stderr") != "true" || len(argv) == 0 {
			http.Error(w, "bad exec request "+r.URL.RawQuery, http.StatusBadRequest)
			return
		}
		channels := []wsstream.ChannelType{wsstream.IgnoreChannel, wsstream.WriteChannel, wsstream.WriteChannel, wsstream.WriteChannel, wsstream.IgnoreChannel}
		stdin := q.Get("stdin") == "true"
		if stdin {
			channels[0] = wsstream.ReadChannel
		}
		conn := wsstream.NewConn(map[string]wsstream.ChannelProtocolConfig{
			remotecommand.StreamProtocolV5Name: {Binary: true, Channels: channels},
		})
		_, streams, err := conn.Open(w, r)
		if err != nil {
			t.Logf("fake exec server: %v", err)
			return
		}
		defer conn.Close()
		_, _ = streams[1].Write(nil) // the kubelet announces the connection this way
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Stdout, cmd.Stderr = streams[1], streams[2]
		if stdin {
			cmd.Stdin = streams[0]
		}
		err = cmd.Run()
		st := metav1.Status{Status: metav1.StatusSuccess}
		var ee *exec.ExitError
		switch {
		case errors.As(err, &ee):
			st = metav1.Status{Status: metav1.StatusFailure, Reason: remotecommand.NonZeroExitCodeReason,
				Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{Type: remotecommand.ExitCodeCauseType, Message: strconv.Itoa(ee.ExitCode())}}}}
		case err != nil:
			st = metav1.Status{Status: metav1.StatusFailure, Message: "OCI runtime exec failed: " + err.Error()}
		}
		b, _ := json.Marshal(st)
		_, _ = streams[3].Write(b)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// localCluster is a Cluster whose exec runs on this host, with one running pod per node
// (client on worker-a, server on worker-b).
func localCluster(t *testing.T) *Cluster {
	t.Helper()
	if _, err := os.Stat(busybox); err != nil {
		t.Skip("needs " + busybox)
	}
	srv := fakeExecServer(t)
	cs := twoNodes()
	c, err := NewWithClient(context.Background(), cs, &rest.Config{Host: srv.URL}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	for name, n := range map[string]string{"client": "worker-a", "server": "worker-b"} {
		go setStatus(t, cs, c.Namespace(), name, running("127.0.0.1"))
		if _, err := cluster.CreatePod(context.Background(), c, cluster.PodSpec{Name: name, Node: n}); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

func TestExecOverWebSocket(t *testing.T) {
	ctx := context.Background()
	c := localCluster(t)
	res, err := c.Exec(ctx, "client", []string{busybox, "sh", "-c", "echo out; echo err >&2; exit 3"})
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Stdout) != "out\n" || string(res.Stderr) != "err\n" || res.ExitCode != 3 {
		t.Errorf("result %q %q %d", res.Stdout, res.Stderr, res.ExitCode)
	}
	res, err = c.Exec(ctx, "client", []string{busybox, "echo", "$(id)", ";", "*"})
	if err != nil || string(res.Stdout) != "$(id) ; *\n" || res.ExitCode != 0 {
		t.Errorf("arguments interpreted: %q %v", res.Stdout, err)
	}
	if _, err := c.Exec(ctx, "client", []string{"/nonexistent/tool"}); err == nil || !strings.Contains(err.Error(), "OCI runtime exec failed") {
		t.Errorf("missing binary: %v", err)
	}
	if _, err := c.Exec(ctx, "missing", []string{busybox, "true"}); err == nil {
		t.Error("exec in a missing pod: no error")
	}
	tctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := c.Exec(tctx, "client", []string{busybox, "sleep", "5"}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("cancelled exec: %v", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("cancelled exec returned after %s", d)
	}
}

func TestNodeCPUOverExec(t *testing.T) {
	c := localCluster(t)
	a, err := c.NodeCPU(context.Background(), "worker-a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.NodeCPU(context.Background(), "worker-b")
	if err != nil {
		t.Fatal(err)
	}
	if a.Total() == 0 || b.Total() < a.Total() {
		t.Errorf("samples %+v then %+v", a, b)
	}
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func dials(port int) bool {
	conn, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), time.Second)
	if err == nil {
		conn.Close()
	}
	return err == nil
}

func pidGone(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	st, _ := procState(b)
	return st == "Z"
}

func TestStartStopOverExec(t *testing.T) {
	ctx := context.Background()
	c := localCluster(t)
	port := freePort(t)
	// The log shows the server's own output.
	argv := []string{busybox, "sh", "-c", `echo "serving on $1"; exec /bin/busybox httpd -f -p "127.0.0.1:$1" -h "$2"`, "sh", strconv.Itoa(port), t.TempDir()}
	p, err := c.Start(ctx, "server", argv, cluster.Ready{TCPPort: port})
	if err != nil {
		t.Fatal(err)
	}
	pid := p.(*process).pid
	if !dials(port) {
		t.Error("Start returned before the server listened")
	}
	if out := string(p.Output()); !strings.Contains(out, "serving on "+strconv.Itoa(port)) {
		t.Errorf("output %q", out)
	}
	if _, err := c.Start(ctx, "client", argv, cluster.Ready{TCPPort: port}); err == nil || !strings.Contains(err.Error(), "already in use") {
		t.Errorf("second server on the same port: %v", err)
	}
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	if !pidGone(pid) || dials(port) {
		t.Errorf("server PID %d still there after Stop", pid)
	}
	if err := p.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	if out := string(p.Output()); !strings.Contains(out, "serving on") {
		t.Errorf("output after Stop %q", out)
	}

	// A server that dies: the error carries its log.
	_, err = c.Start(ctx, "server", []string{busybox, "sh", "-c", "echo bind: address in use >&2; exit 1"}, cluster.Ready{TCPPort: port})
	if err == nil || !strings.Contains(err.Error(), "exited") || !strings.Contains(err.Error(), "bind: address in use") {
		t.Errorf("dying server: %v", err)
	}

	// A server that never listens is stopped after the timeout.
	defer func(d time.Duration) { readyTimeout = d }(readyTimeout)
	readyTimeout = 300 * time.Millisecond
	_, err = c.Start(ctx, "server", []string{busybox, "sh", "-c", "echo started; exec /bin/busybox sleep 30"}, cluster.Ready{TCPPort: port})
	if err == nil || !strings.Contains(err.Error(), "not listening") || !strings.Contains(err.Error(), "started") {
		t.Errorf("silent server: %v", err)
	}
	c.mu.Lock()
	left := len(c.procs)
	c.mu.Unlock()
	if left != 0 {
		t.Errorf("%d processes still registered", left)
	}

	// DeletePod stops the pod's processes first.
	p, err = c.Start(ctx, "server", []string{busybox, "sleep", "30"}, cluster.Ready{})
	if err != nil {
		t.Fatal(err)
	}
	pid = p.(*process).pid
	if pidGone(pid) {
		t.Fatalf("PID %d not running", pid)
	}
	if err := cluster.DeletePod(ctx, c, "server"); err != nil {
		t.Fatal(err)
	}
	if !pidGone(pid) {
		t.Errorf("PID %d survived DeletePod", pid)
		_ = exec.Command("kill", "-9", strconv.Itoa(pid)).Run()
	}
}
