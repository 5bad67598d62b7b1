package proxy

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func ipvsTestServices() []Service {
	return []Service{
		{Namespace: "cnb", Name: "web", ClusterIP: "10.96.0.10", Port: 80, Protocol: "tcp",
			Endpoints: []Endpoint{{IP: "10.244.1.3", Port: 8080}, {IP: "10.244.0.7", Port: 8080}}},
		{Namespace: "cnb", Name: "dns", PortName: "dns", ClusterIP: "10.96.0.11", Port: 53, Protocol: "udp",
			Endpoints: []Endpoint{{IP: "10.244.0.7", Port: 53}}},
		{Namespace: "cnb", Name: "dns", PortName: "dns-tcp", ClusterIP: "10.96.0.11", Port: 53, Protocol: "tcp"},
	}
}

func TestRenderIPVS(t *testing.T) {
	svcs := ipvsTestServices()
	r, cnt := RenderIPVSParts(svcs, Options{ClusterCIDR: "10.244.0.0/16"})
	// Ordered by namespace, name, port name and protocol (cnb/dns/dns/udp < cnb/dns/dns-tcp/tcp
	// < cnb/web//tcp), endpoints by address. A port without endpoints keeps its virtual server.
	wantAdm := `-A -u 10.96.0.11:53 -s rr
-a -u 10.96.0.11:53 -r 10.244.0.7:53 -m -w 1
-A -t 10.96.0.11:53 -s rr
-A -t 10.96.0.10:80 -s rr
-a -t 10.96.0.10:80 -r 10.244.0.7:8080 -m -w 1
-a -t 10.96.0.10:80 -r 10.244.1.3:8080 -m -w 1
`
	if string(r.IPVSAdm) != wantAdm {
		t.Errorf("ipvsadm-restore input:\n%s\nwant:\n%s", r.IPVSAdm, wantAdm)
	}
	wantSet := `create KUBE-CLUSTER-IP hash:ip,port family inet hashsize 1024 maxelem 65536 comment
create KUBE-LOOP-BACK hash:ip,port,ip family inet hashsize 1024 maxelem 65536 comment
add KUBE-CLUSTER-IP 10.96.0.11,udp:53 comment "Kubernetes service cluster ip + port for masquerade purpose"
add KUBE-CLUSTER-IP 10.96.0.11,tcp:53 comment "Kubernetes service cluster ip + port for masquerade purpose"
add KUBE-CLUSTER-IP 10.96.0.10,tcp:80 comment "Kubernetes service cluster ip + port for masquerade purpose"
add KUBE-LOOP-BACK 10.244.0.7,udp:53,10.244.0.7 comment "Kubernetes endpoints dst ip:port, source ip for solving hairpin purpose"
add KUBE-LOOP-BACK 10.244.0.7,tcp:8080,10.244.0.7 comment "Kubernetes endpoints dst ip:port, source ip for solving hairpin purpose"
add KUBE-LOOP-BACK 10.244.1.3,tcp:8080,10.244.1.3 comment "Kubernetes endpoints dst ip:port, source ip for solving hairpin purpose"
`
	if string(r.IPSet) != wantSet {
		t.Errorf("ipset restore input:\n%s\nwant:\n%s", r.IPSet, wantSet)
	}
	// One address per ClusterIP, however many ports it has.
	wantAddr := "link add kube-ipvs0 type dummy\naddress add 10.96.0.11/32 dev kube-ipvs0\naddress add 10.96.0.10/32 dev kube-ipvs0\n"
	if string(r.Addresses) != wantAddr {
		t.Errorf("ip -batch input:\n%s\nwant:\n%s", r.Addresses, wantAddr)
	}
	ipt := string(r.IPTables)
	for _, want := range []string{
		"*nat\n:KUBE-SERVICES - [0:0]\n",
		`-A KUBE-SERVICES ! -s 10.244.0.0/16 -m comment --comment "Kubernetes service cluster ip + port for masquerade purpose" -m set --match-set KUBE-CLUSTER-IP dst,dst -j KUBE-MARK-MASQ`,
		"-A KUBE-SERVICES -m set --match-set KUBE-CLUSTER-IP dst,dst -j ACCEPT\n",
		"-m set --match-set KUBE-LOOP-BACK dst,dst,src -j MASQUERADE\n",
		"COMMIT\n",
	} {
		if !strings.Contains(ipt, want) {
			t.Errorf("iptables part misses %q:\n%s", want, ipt)
		}
	}
	// The iptables part does not grow with the Services: IPVS mode matches ipsets.
	if strings.Contains(ipt, "10.96.") {
		t.Errorf("per-Service iptables rules in IPVS mode:\n%s", ipt)
	}
	if cnt.Services != 3 || cnt.Endpoints != 3 || cnt.Elements != 6 || cnt.Chains != 3 || cnt.Rules != 7 {
		t.Errorf("counts %+v", cnt)
	}
	text, _ := RenderIPVS([]Service{svcs[2], svcs[0], svcs[1]}, Options{ClusterCIDR: "10.244.0.0/16"})
	for _, part := range [][]byte{r.Addresses, r.IPSet, r.IPVSAdm, r.IPTables} {
		if !bytes.Contains(text, part) {
			t.Errorf("RenderIPVS misses a part or depends on input order:\n%s", part)
		}
	}
	for _, h := range []string{"# ip -batch\n", "# ipset restore\n", "# ipvsadm-restore\n", "# iptables-restore\n"} {
		if !bytes.Contains(text, []byte(h)) {
			t.Errorf("no %q header", h)
		}
	}
	// Without a cluster CIDR there is no off-cluster masquerade rule.
	if r2, _ := RenderIPVSParts(svcs, Options{}); bytes.Contains(r2.IPTables, []byte("! -s ")) {
		t.Error("off-cluster masquerade without a cluster CIDR")
	}
}

// The ipset and iptables parts are accepted by the real tools (ipvsadm and the dummy
// interface need IPVS and the dummy driver, which a kernel without modules may lack).
func TestIPVSPartsAccepted(t *testing.T) {
	ns := scratchNS(t)
	r, _ := RenderIPVSParts(ipvsTestServices(), Options{ClusterCIDR: "10.244.0.0/16"})
	if err := run(ns, "ipset", []string{"restore"}, r.IPSet); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("nsenter", "--net="+ns, "ipset", "list", IPSetClusterIP).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Number of entries: 3") {
		t.Errorf("ipset list: %v\n%s", err, out)
	}
	for _, tool := range []string{"iptables-restore", "iptables-legacy-restore"} {
		if err := run(ns, tool, []string{"--test"}, r.IPTables); err != nil {
			t.Errorf("%s: %v", tool, err)
		}
	}
	if err := run(ns, "ip", []string{"link", "add", "cnbqdummy", "type", "dummy"}, nil); err != nil {
		t.Logf("no dummy interfaces here, kube-ipvs0 part not applied: %v", err)
		return
	}
	if err := run(ns, "ip", []string{"-batch", "-"}, r.Addresses); err != nil {
		t.Error(err)
	}
}

func TestIPVSAvailable(t *testing.T) {
	write := func(root, p, text string) {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	none := t.TempDir()
	ok, why := ipvsAvailable(none)
	if ok || !strings.Contains(why, "/proc/net/ip_vs") || !strings.Contains(why, "/sys/module/ip_vs") || !strings.Contains(why, "/proc/modules") {
		t.Errorf("empty root: %v %q", ok, why)
	}
	mods := t.TempDir()
	write(mods, "proc/modules", "nf_nat 61440 1 - Live 0x0\n")
	write(mods, "proc/sys/kernel/osrelease", "6.1.0-test\n")
	if ok, why := ipvsAvailable(mods); ok || !strings.Contains(why, "ip_vs not in /proc/modules") || !strings.Contains(why, "no /lib/modules/6.1.0-test/") {
		t.Errorf("modules without ip_vs: %v %q", ok, why)
	}
	write(mods, "lib/modules/6.1.0-test/kernel/net/netfilter/ipvs/ip_vs.ko.xz", "")
	if ok, why := ipvsAvailable(mods); ok || !strings.Contains(why, "modprobe ip_vs") {
		t.Errorf("module present, not loaded: %v %q", ok, why)
	}
	write(mods, "proc/modules", "nf_nat 61440 1 - Live 0x0\nip_vs 200704 0 - Live 0x0\n")
	if ok, _ := ipvsAvailable(mods); !ok {
		t.Error("ip_vs in /proc/modules not seen")
	}
	loaded := t.TempDir()
	write(loaded, "proc/net/ip_vs", "IP Virtual Server version 1.2.1\n")
	if ok, why := ipvsAvailable(loaded); !ok || !strings.Contains(why, "/proc/net/ip_vs") {
		t.Errorf("/proc/net/ip_vs present: %v %q", ok, why)
	}
	// This host: the answer agrees with what the kernel shows.
	ok, why = IPVSAvailable()
	_, procErr := os.Stat("/proc/net/ip_vs")
	_, sysErr := os.Stat("/sys/module/ip_vs")
	if want := procErr == nil || sysErr == nil; ok != want && !strings.Contains(why, "/proc/modules") {
		t.Errorf("IPVSAvailable() = %v (%s) but /proc/net/ip_vs or /sys/module/ip_vs present = %v", ok, why, want)
	}
	t.Logf("this host: %v, %s", ok, why)
}
