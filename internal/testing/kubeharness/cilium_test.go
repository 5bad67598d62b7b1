package kubeharness

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/cnibench/cnibench/internal/netns"
)

// ciliumOnCluster checks the real Cilium the harness runs: each node's agent Ok with its
// datapath in its node's namespace (cilium_host and the VXLAN device on Cilium's port, its
// programs' links pinned in the node's own bpffs), the node's CNI configuration naming
// cilium-cni, the host-wide sysctls the agent tried to set refused (it logs a warning for
// each; upForTest checks their values are the host's), and with kube-proxy replacement the
// socket LB attached to each node's cgroup, never to the host's root cgroup.
func ciliumOnCluster(t *testing.T, h *Harness) {
	for _, n := range h.nodes {
		if st, err := ciliumReady(ciliumSock(n)); err != nil || !strings.HasPrefix(st, "host endpoint ") {
			t.Errorf("%s: cilium-agent state %q: %v", n.name, st, err)
		}
		out, err := exec.Command("nsenter", "--net="+netns.Path(n.ns), "--", "ip", "-d", "link", "show", "cilium_vxlan").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "dstport 8472") {
			t.Errorf("%s: cilium_vxlan: %v: %s", n.name, err, out)
		}
		if err := exec.Command("nsenter", "--net="+netns.Path(n.ns), "--", "ip", "link", "show", "cilium_host").Run(); err != nil {
			t.Errorf("%s: no cilium_host: %v", n.name, err)
		}
		links, _ := filepath.Glob(ciliumDir(n, "bpffs/cilium/devices/*/links/*"))
		if len(links) == 0 {
			t.Errorf("%s: no program links pinned under %s", n.name, ciliumDir(n, "bpffs"))
		}
		conf, err := os.ReadFile(filepath.Join(n.dir, "net.d/05-cilium.conflist"))
		if err != nil || !strings.Contains(string(conf), `"type":"cilium-cni"`) {
			t.Errorf("%s: CNI configuration: %v: %s", n.name, err, conf)
		}
		log, _ := os.ReadFile(filepath.Join(h.cfg.Dir, "logs", "cilium-agent-"+n.name+".log"))
		for _, s := range []string{"kernel.unprivileged_bpf_disabled", "kernel.timer_migration"} {
			refused := slices.ContainsFunc(strings.Split(string(log), "\n"), func(l string) bool {
				return strings.Contains(l, "Failed to write sysctl setting") && strings.Contains(l, "sysParamName="+s+" ")
			})
			if !refused {
				t.Errorf("%s: the agent's log shows no refused write of %s", n.name, s)
			}
		}
		t.Logf("%s: agent Ok, %d program links pinned", n.name, len(links))
		if h.cfg.ProxyMode == ProxyNone {
			// Socket LB: on the node's cgroup v2 subtree, where its pods are.
			if got := connect4Progs(t, cgroup2Point()+n.cgroupRoot); got == 0 {
				t.Errorf("%s: no connect4 program on the node's cgroup %s (socket LB)", n.name, n.cgroupRoot)
			}
		}
	}
	// Never on the host's root cgroup, where it would translate every connect() of the host.
	if got := connect4Progs(t, cgroup2Point()); got != 0 {
		t.Errorf("%d connect4 programs attached to the host's root cgroup %s", got, cgroup2Point())
	}
}

// connect4Progs counts the programs attached to a cgroup v2 directory for connect() of IPv4
// sockets.
func connect4Progs(t *testing.T, dir string) int {
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := link.QueryPrograms(link.QueryOptions{Target: int(f.Fd()), Attach: ebpf.AttachCGroupInet4Connect})
	if err != nil {
		t.Fatalf("query %s: %v", dir, err)
	}
	return len(r.Programs)
}
