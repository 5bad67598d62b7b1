package clustertest

import (
	"context"
	"fmt"
	"net/url"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/pktengine"
)

// process is a command started in a pod: it "listens" on its Ready port until stopped.
type process struct {
	f       *Fake
	pod     string
	cmd     []string
	port    int
	stopped bool
}

func (p *process) Stop() error {
	p.f.mu.Lock()
	defer p.f.mu.Unlock()
	if !p.stopped {
		p.stopped = true
		p.f.log("stop %s %s", p.pod, strings.Join(p.cmd, " "))
	}
	return nil
}

func (p *process) Output() []byte {
	p.f.mu.Lock()
	defer p.f.mu.Unlock()
	switch {
	case isPkt(p.cmd, "recv"):
		return p.f.pktRecvOutput(p.stopped)
	case (isPkt(p.cmd, "knf") || isPkt(p.cmd, "xfwd")) && p.f.noNetAdmin:
		return []byte("cnibench: needs the capability CAP_NET_ADMIN in its network namespace\n")
	case isPkt(p.cmd, "knf"):
		return []byte(pktengine.KnfReadyLine + "\n")
	case isPkt(p.cmd, "xfwd"):
		return []byte(pktengine.XfwdReadyLine + "\n")
	}
	return nil
}

func newCall(pod string, argv []string) Call {
	cpu, cmd, _ := cluster.Pinned(argv)
	return Call{Pod: pod, Argv: slices.Clone(argv), CPU: cpu, Cmd: slices.Clone(cmd)}
}

// Start implements cluster.Cluster: the process counts as listening on ready.TCPPort in the
// pod until it is stopped (or its pod deleted).
func (f *Fake) Start(ctx context.Context, pod string, argv []string, ready cluster.Ready) (cluster.Process, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	c := newCall(pod, argv)
	f.starts = append(f.starts, c)
	f.log("start %s %s", pod, strings.Join(argv, " "))
	if _, ok := f.pod(pod); !ok {
		return nil, fmt.Errorf("clustertest: start in %s: no such pod", pod)
	}
	if slices.Contains(f.fail.Start, pod) {
		return nil, fmt.Errorf("clustertest: start in %s fails on purpose", pod)
	}
	if len(c.Cmd) == 0 {
		return nil, fmt.Errorf("clustertest: start in %s: empty command", pod)
	}
	p := &process{f: f, pod: pod, cmd: c.Cmd, port: ready.TCPPort}
	f.procs = append(f.procs, p)
	return p, nil
}

// Exec implements cluster.Cluster. The command (after a `taskset -c N` prefix) is answered by
// its tool:
//   - iperf3 -c IP -p PORT, netperf -H IP -p PORT -t TEST and curl URL replay the recorded
//     output of that test (iperf3_tcp.json, iperf3_udp.json, with -P the recordings of 4 TCP
//     or 2 UDP streams, netperf_tcp_rr.txt, ..., curl-3replicas.txt) when IP:PORT reaches a
//     server (see Reaches) and, for netperf through a Service, the Service has its data port
//     (-P ,PORT), else the recorded
//     failure (iperf3_refused.json; netperf_noserver.txt on stderr, exit 255;
//     curl-refused.txt, exit 7); so do the client runs Failures.ToolRuns asks for;
//   - curl's recorded lines are repeated up to the requests of its URL glob ([1-N]),
//     renumbered, and credited to the servers reached (the recording's replicas in turn);
//   - /bin/busybox nc ... IP PORT exits 0 when IP:PORT reaches a server, else 1; when the
//     server reached is itself a one-shot `nc -l ... -e ... netstat -tn`, stdout is that
//     netstat's line for the connection, as the server sees it (see Source);
//   - other /bin/busybox applets (sh, rm, mkdir: preparing and removing files) exit 0;
//     busybox cat /proc/self/status says the CPUs the pod may run on (Config.NoExclusiveCPUs);
//   - cnibench pkt gen runs the simulated packet engine (see pkt.go).
//
// Anything else is an error naming the command.
func (f *Fake) Exec(ctx context.Context, pod string, argv []string) (cluster.ExecResult, error) {
	if err := ctx.Err(); err != nil {
		return cluster.ExecResult{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	c := newCall(pod, argv)
	f.execs = append(f.execs, c)
	f.log("exec %s %s", pod, strings.Join(argv, " "))
	from, ok := f.pod(pod)
	if !ok {
		return cluster.ExecResult{}, fmt.Errorf("clustertest: exec in %s: no such pod", pod)
	}
	if slices.Contains(f.fail.Exec, pod) {
		return cluster.ExecResult{}, fmt.Errorf("clustertest: exec in %s fails on purpose", pod)
	}
	cmd := c.Cmd
	if len(cmd) == 0 {
		return cluster.ExecResult{}, fmt.Errorf("clustertest: exec in %s: empty command", pod)
	}
	if isPkt(cmd, "gen") {
		return f.pktGen(cmd)
	}
	switch path.Base(cmd[0]) {
	case "iperf3":
		return f.iperf3(from, cmd)
	case "netperf":
		return f.netperf(from, cmd)
	case "curl":
		return f.curl(from, cmd)
	case "busybox":
		if len(cmd) > 1 && cmd[1] == "nc" && len(cmd) >= 4 {
			if f.lagLeft > 0 {
				f.lagLeft--
				return cluster.ExecResult{ExitCode: 1, Stderr: []byte("nc: can't connect to remote host: Connection refused")}, nil
			}
			port, _ := strconv.Atoi(cmd[len(cmd)-1])
			r := f.route(from, cmd[len(cmd)-2], port)
			if len(r.pods) == 0 {
				return cluster.ExecResult{ExitCode: 1}, nil
			}
			var out string
			if f.serves(r.pods[0].Name, r.target, "netstat") {
				out = "Active Internet connections (w/o servers)\nProto Recv-Q Send-Q Local Address           Foreign Address         State\n" +
					fmt.Sprintf("tcp        0      0 %s:%d        %s:41234        ESTABLISHED\n", r.pods[0].IP, r.target, r.source)
			}
			return cluster.ExecResult{Stdout: []byte(out)}, nil
		}
		if len(cmd) > 1 && slices.Contains([]string{"sh", "rm", "mkdir"}, cmd[1]) {
			return cluster.ExecResult{}, nil
		}
		if len(cmd) == 3 && cmd[1] == "cat" && cmd[2] == "/proc/self/status" {
			cpus := "0"
			switch {
			case f.noExcl:
				cpus = "0-1"
			case f.exclusive[pod]:
				cpus = "1"
			}
			return cluster.ExecResult{Stdout: []byte("Name:\tcat\nCpus_allowed:\t3\nCpus_allowed_list:\t" + cpus + "\n")}, nil
		}
	}
	return cluster.ExecResult{}, fmt.Errorf("clustertest: no recorded output for %q", strings.Join(cmd, " "))
}

// flag returns the value after name in argv ("" when absent).
func flag(argv []string, name string) string {
	if i := slices.Index(argv, name); i >= 0 && i+1 < len(argv) {
		return argv[i+1]
	}
	return ""
}

// failRun says whether this client run replays a failure on purpose; f.mu is held.
func (f *Fake) failRun() bool {
	if f.fail.ToolRuns > 0 {
		f.fail.ToolRuns--
		return true
	}
	return false
}

func (f *Fake) iperf3(from cluster.Pod, cmd []string) (cluster.ExecResult, error) {
	port, _ := strconv.Atoi(flag(cmd, "-p"))
	target := flag(cmd, "-c")
	if target == "" {
		return cluster.ExecResult{}, fmt.Errorf("clustertest: iperf3 without -c: %q", strings.Join(cmd, " "))
	}
	file, ok := iperf3Files[iperf3Key{slices.Contains(cmd, "-u"), flag(cmd, "-P")}]
	if !ok {
		return cluster.ExecResult{}, fmt.Errorf("clustertest: no recorded iperf3 run with -P %s: %q", flag(cmd, "-P"), strings.Join(cmd, " "))
	}
	if f.failRun() || len(f.reach(from, target, port)) == 0 {
		file = "iperf3_refused.json" // iperf3 3.12 exits 0 with the error in its JSON
	}
	out, err := recorded(file)
	return cluster.ExecResult{Stdout: out}, err
}

// iperf3Key is what picks an iperf3 recording: UDP or TCP, and the -P value ("" = none).
type iperf3Key struct {
	udp     bool
	streams string
}

var iperf3Files = map[iperf3Key]string{
	{false, ""}: "iperf3_tcp.json", {true, ""}: "iperf3_udp.json",
	{false, "4"}: "iperf3_tcp_p4_l8192.json", {true, "2"}: "iperf3_udp_p2_l512.json",
}

var netperfFiles = map[string]string{"TCP_RR": "netperf_tcp_rr.txt", "TCP_CRR": "netperf_tcp_crr.txt", "UDP_RR": "netperf_udp_rr.txt"}

func (f *Fake) netperf(from cluster.Pod, cmd []string) (cluster.ExecResult, error) {
	port, _ := strconv.Atoi(flag(cmd, "-p"))
	file, ok := netperfFiles[flag(cmd, "-t")]
	if !ok {
		return cluster.ExecResult{}, fmt.Errorf("clustertest: no recorded netperf test %q", flag(cmd, "-t"))
	}
	// The data connection (test option -P ,PORT) must cross a Service too: a Service without
	// that port fails the test as a real one would (netperf waits, then gives up).
	data := 0
	if i := slices.Index(cmd, "--"); i >= 0 {
		if p := flag(cmd[i:], "-P"); strings.HasPrefix(p, ",") {
			data, _ = strconv.Atoi(p[1:])
		}
	}
	proto := "tcp"
	if flag(cmd, "-t") == "UDP_RR" {
		proto = "udp"
	}
	if f.failRun() || len(f.reach(from, flag(cmd, "-H"), port)) == 0 || (data > 0 && f.serviceLacks(flag(cmd, "-H"), data, proto)) {
		out, err := recorded("netperf_noserver.txt")
		return cluster.ExecResult{Stderr: out, ExitCode: 255}, err
	}
	out, err := recorded(file)
	return cluster.ExecResult{Stdout: out}, err
}

func (f *Fake) curl(from cluster.Pod, cmd []string) (cluster.ExecResult, error) {
	u, err := url.Parse(cmd[len(cmd)-1])
	if err != nil {
		return cluster.ExecResult{}, fmt.Errorf("clustertest: curl URL: %w", err)
	}
	var n int
	if _, err := fmt.Sscanf(u.RawQuery, "[1-%d]", &n); err != nil || n < 1 {
		return cluster.ExecResult{}, fmt.Errorf("clustertest: curl URL %q has no glob [1-N]", u)
	}
	port, _ := strconv.Atoi(u.Port())
	if port == 0 {
		port = 80
	}
	servers := f.reach(from, u.Hostname(), port)
	if f.failRun() || len(servers) == 0 {
		out, err := recorded("curl-refused.txt")
		return cluster.ExecResult{Stdout: out, ExitCode: 7}, err
	}
	rec, err := recorded("curl-3replicas.txt")
	if err != nil {
		return cluster.ExecResult{}, err
	}
	lines := strings.Split(strings.TrimSpace(string(rec)), "\n")
	// The recording's replicas, sorted, stand for the servers reached, in turn.
	var replicas []string
	for _, l := range lines {
		fields := strings.Fields(l)
		if len(fields) != 11 {
			return cluster.ExecResult{}, fmt.Errorf("clustertest: curl-3replicas.txt: unexpected line %q", l)
		}
		if !slices.Contains(replicas, fields[10]) {
			replicas = append(replicas, fields[10])
		}
	}
	sort.Strings(replicas)
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fields := strings.Fields(lines[(i-1)%len(lines)])
		fields[1] = fmt.Sprintf("%s://%s%s?%d", u.Scheme, u.Host, u.Path, i)
		fields[10] = "replica=" + servers[slices.Index(replicas, fields[10])%len(servers)].Name
		b.WriteString(strings.Join(fields, " ") + "\n")
	}
	return cluster.ExecResult{Stdout: []byte(b.String())}, nil
}

// Reaches tells which pods answer a TCP connection from pod to ip:port (a pod address, a
// ClusterIP, or a node's address and a NodePort): those with that address, or the endpoints
// of that Service on its target port, that have a process started with that Ready port and
// not stopped, and that NetworkPolicies admit (when they are enforced). Through a NodePort
// with externalTrafficPolicy Local, a client off the pod network (external or host-network)
// reaches only the endpoints on the node it targets. An external client reaches nothing but
// NodePorts.
func (f *Fake) Reaches(pod, ip string, port int) []cluster.Pod {
	f.mu.Lock()
	defer f.mu.Unlock()
	from, ok := f.pod(pod)
	if !ok {
		return nil
	}
	return f.reach(from, ip, port)
}

// Source is the address the pods reached by a TCP connection from pod to ip:port see as the
// connection's source (see Reaches): the client's own, but the node's where a NodePort
// Service with externalTrafficPolicy Cluster masquerades it; "" when nothing answers.
func (f *Fake) Source(pod, ip string, port int) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	from, ok := f.pod(pod)
	if !ok {
		return ""
	}
	r := f.route(from, ip, port)
	if len(r.pods) == 0 {
		return ""
	}
	return r.source
}

// reach is Reaches; f.mu is held.
func (f *Fake) reach(from cluster.Pod, ip string, port int) []cluster.Pod {
	return f.route(from, ip, port).pods
}

// routed is where a connection goes: the pods that answer it, on which port, and the source
// address they see.
type routed struct {
	pods   []cluster.Pod
	target int
	source string
}

// route is Reaches and Source; f.mu is held.
func (f *Fake) route(from cluster.Pod, ip string, port int) routed {
	if slices.Contains(f.fail.Drop, ip) {
		return routed{}
	}
	var candidates []cluster.Pod
	r := routed{target: port, source: from.IP}
	svcPort := func(svc service, match func(cluster.ServicePort) bool) bool {
		j := slices.IndexFunc(svc.Ports, match)
		if j < 0 {
			return false
		}
		if tp := svc.Ports[j].TargetPort; tp != 0 {
			r.target = tp
		} else {
			r.target = svc.Ports[j].Port
		}
		return true
	}
	node := slices.IndexFunc(f.nodes, func(n cluster.Node) bool { return n.IP == ip })
	byNodePort := func(p cluster.ServicePort) bool { return port != 0 && p.NodePort == port }
	nodePortSvc := slices.IndexFunc(f.services, func(s service) bool { return slices.ContainsFunc(s.Ports, byNodePort) })
	if i := slices.IndexFunc(f.services, func(s service) bool { return s.ClusterIP == ip }); i >= 0 && !from.External {
		if !svcPort(f.services[i], func(p cluster.ServicePort) bool { return p.Port == port }) {
			return routed{}
		}
		candidates = f.selected(f.services[i].selector)
	} else if node >= 0 && nodePortSvc >= 0 {
		svc := f.services[nodePortSvc]
		svcPort(svc, byNodePort)
		for _, p := range f.selected(svc.selector) {
			if !svc.local || !(from.External || from.HostNetwork) || p.Node == f.nodes[node].Name {
				candidates = append(candidates, p)
			}
		}
		if !svc.local {
			r.source = f.nodes[node].IP // masqueraded by the node
		}
	} else if !from.External {
		for _, p := range f.pods {
			if p.IP == ip {
				candidates = append(candidates, p)
			}
		}
	}
	for _, p := range candidates {
		if f.listens(p.Name, r.target) && f.admits(from, p, r.target) {
			r.pods = append(r.pods, p)
		}
	}
	return r
}

// serviceLacks tells whether ip is a Service's ClusterIP without port/proto; f.mu is held.
func (f *Fake) serviceLacks(ip string, port int, proto string) bool {
	i := slices.IndexFunc(f.services, func(s service) bool { return s.ClusterIP == ip })
	return i >= 0 && !slices.ContainsFunc(f.services[i].Ports, func(p cluster.ServicePort) bool {
		return p.Port == port && strings.EqualFold(p.Protocol, proto)
	})
}

// serves tells whether a running process in pod listening on port has word in its command;
// f.mu is held.
func (f *Fake) serves(pod string, port int, word string) bool {
	return slices.ContainsFunc(f.procs, func(p *process) bool {
		return p.pod == pod && p.port == port && !p.stopped && slices.Contains(p.cmd, word)
	})
}

// listens tells whether a running process in pod listens on port; f.mu is held.
func (f *Fake) listens(pod string, port int) bool {
	return port != 0 && slices.ContainsFunc(f.procs, func(p *process) bool { return p.pod == pod && p.port == port && !p.stopped })
}
