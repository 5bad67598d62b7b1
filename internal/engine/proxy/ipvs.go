package proxy

import (
	"bytes"
	"fmt"
	"os"
	"strings"
)

// kube-proxy's IPVS mode names (pkg/proxy/ipvs): the dummy interface the Service addresses
// are bound to, and the ipsets its few iptables rules match on.
const (
	IPVSInterface   = "kube-ipvs0"
	IPSetClusterIP  = "KUBE-CLUSTER-IP"
	IPSetLoopBack   = "KUBE-LOOP-BACK"
	clusterIPSetCmt = "Kubernetes service cluster ip + port for masquerade purpose"
	loopBackSetCmt  = "Kubernetes endpoints dst ip:port, source ip for solving hairpin purpose"
)

// IPVSRendering is kube-proxy's IPVS mode for a set of Services, one text per tool, each in
// the input format of that tool's batch mode.
type IPVSRendering struct {
	// IPVSAdm is `ipvsadm-restore` input: one virtual server per Service port
	// (-A -t|-u VIP:port -s rr) and one real server per endpoint in masquerading (NAT) mode
	// (-a -t|-u VIP:port -r EP:port -m -w 1), as `ipvsadm -S -n` prints them.
	IPVSAdm []byte
	// IPSet is `ipset restore` input: KUBE-CLUSTER-IP (hash:ip,port, every VIP,proto:port)
	// and KUBE-LOOP-BACK (hash:ip,port,ip, every EP,proto:port,EP for hairpin masquerade).
	IPSet []byte
	// Addresses is `ip -batch` input: the dummy interface kube-ipvs0 and every ClusterIP as a
	// /32 on it (IPVS only sees packets addressed to a local address).
	Addresses []byte
	// IPTables is the iptables-restore input of the nat table rules IPVS mode keeps, constant
	// in size whatever the number of Services since they match the ipsets.
	IPTables []byte
}

// Text joins the parts, each under a "# <tool>" header line.
func (r IPVSRendering) Text() []byte {
	var b bytes.Buffer
	for _, p := range []struct {
		name string
		text []byte
	}{{"ip -batch", r.Addresses}, {"ipset restore", r.IPSet}, {"ipvsadm-restore", r.IPVSAdm}, {"iptables-restore", r.IPTables}} {
		fmt.Fprintf(&b, "# %s\n", p.name)
		b.Write(p.text)
	}
	return b.Bytes()
}

// RenderIPVS returns kube-proxy's IPVS mode for svcs as text (RenderIPVSParts joined by
// IPVSRendering.Text) and what it holds: Services are IPVS virtual servers, Endpoints their
// real servers, Elements the ipset entries, Chains and Rules those of the iptables part.
// The lab cannot program it where the kernel has no IPVS (see IPVSAvailable); the rendering
// is tested as text.
func RenderIPVS(svcs []Service, opt Options) ([]byte, Counts) {
	r, cnt := RenderIPVSParts(svcs, opt)
	return r.Text(), cnt
}

// RenderIPVSParts is RenderIPVS with each tool's input apart. Services are ordered by port
// key and protocol, endpoints by address, so the output is deterministic. kube-proxy puts only
// the endpoints on its own node into KUBE-LOOP-BACK; this rendering lists every endpoint (an
// entry for a remote endpoint never matches: its packets do not come back to the node they
// left). NodePorts are not rendered in IPVS mode.
func RenderIPVSParts(svcs []Service, opt Options) (IPVSRendering, Counts) {
	svcs = sortedServices(svcs)
	var adm, set, addr, ipt strings.Builder
	cnt := Counts{}
	fmt.Fprintf(&addr, "link add %s type dummy\n", IPVSInterface)
	fmt.Fprintf(&set, "create %s hash:ip,port family inet hashsize 1024 maxelem 65536 comment\n", IPSetClusterIP)
	fmt.Fprintf(&set, "create %s hash:ip,port,ip family inet hashsize 1024 maxelem 65536 comment\n", IPSetLoopBack)
	var clusterEntries, loopEntries []string
	seenIP, seenLoop := map[string]bool{}, map[string]bool{}
	for _, s := range svcs {
		p := strings.ToLower(s.Protocol)
		flag := map[string]string{"tcp": "-t", "udp": "-u", "sctp": "--sctp-service"}[p]
		if flag == "" {
			flag = "-t"
		}
		if !seenIP[s.ClusterIP] {
			seenIP[s.ClusterIP] = true
			fmt.Fprintf(&addr, "address add %s/32 dev %s\n", s.ClusterIP, IPVSInterface)
		}
		clusterEntries = append(clusterEntries, fmt.Sprintf("%s,%s:%d", s.ClusterIP, p, s.Port))
		// kube-proxy creates the virtual server even without endpoints: connections to it
		// then fail (IPVS has no real server to pick) instead of leaking to a local socket.
		vs := fmt.Sprintf("%s:%d", s.ClusterIP, s.Port)
		fmt.Fprintf(&adm, "-A %s %s -s rr\n", flag, vs)
		cnt.Services++
		for _, e := range s.sortedEndpoints() {
			fmt.Fprintf(&adm, "-a %s %s -r %s -m -w 1\n", flag, vs, e)
			cnt.Endpoints++
			if le := fmt.Sprintf("%s,%s:%d,%s", e.IP, p, e.Port, e.IP); !seenLoop[le] {
				seenLoop[le] = true
				loopEntries = append(loopEntries, le)
			}
		}
	}
	for _, e := range clusterEntries {
		fmt.Fprintf(&set, "add %s %s comment %q\n", IPSetClusterIP, e, clusterIPSetCmt)
	}
	for _, e := range loopEntries {
		fmt.Fprintf(&set, "add %s %s comment %q\n", IPSetLoopBack, e, loopBackSetCmt)
	}
	cnt.Elements = len(clusterEntries) + len(loopEntries)

	ipt.WriteString("*nat\n")
	for _, c := range []string{"KUBE-SERVICES", "KUBE-POSTROUTING", "KUBE-MARK-MASQ"} {
		fmt.Fprintf(&ipt, ":%s - [0:0]\n", c)
		cnt.Chains++
		cnt.Names = append(cnt.Names, c)
	}
	rules := []string{
		fmt.Sprintf(`-A KUBE-POSTROUTING -m comment --comment "%s" -m set --match-set %s dst,dst,src -j MASQUERADE`, loopBackSetCmt, IPSetLoopBack),
		fmt.Sprintf("-A KUBE-POSTROUTING -m mark ! --mark %s/%s -j RETURN", MasqMark, MasqMark),
		fmt.Sprintf("-A KUBE-POSTROUTING -j MARK --xor-mark %s", MasqMark),
		`-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully`,
		fmt.Sprintf("-A KUBE-MARK-MASQ -j MARK --or-mark %s", MasqMark),
	}
	if opt.ClusterCIDR != "" {
		rules = append(rules, fmt.Sprintf(`-A KUBE-SERVICES ! -s %s -m comment --comment "%s" -m set --match-set %s dst,dst -j KUBE-MARK-MASQ`, opt.ClusterCIDR, clusterIPSetCmt, IPSetClusterIP))
	}
	rules = append(rules, fmt.Sprintf("-A KUBE-SERVICES -m set --match-set %s dst,dst -j ACCEPT", IPSetClusterIP))
	for _, r := range rules {
		ipt.WriteString(r + "\n")
	}
	cnt.Rules = len(rules)
	ipt.WriteString("COMMIT\n")
	return IPVSRendering{IPVSAdm: []byte(adm.String()), IPSet: []byte(set.String()), Addresses: []byte(addr.String()), IPTables: []byte(ipt.String())}, cnt
}

// IPVSAvailable reports whether this kernel can do IPVS, and what the answer rests on. IPVS
// is there when the ip_vs module is loaded or built in: /proc/net/ip_vs (per network
// namespace, created for every namespace once ip_vs is up) or /sys/module/ip_vs. Otherwise
// it could only be loaded as a module, which needs /proc/modules (loadable module support)
// and ip_vs.ko under /lib/modules/<release>; nothing is loaded here, the answer is then false
// with what was found.
func IPVSAvailable() (bool, string) {
	return ipvsAvailable("/")
}

func ipvsAvailable(root string) (bool, string) {
	at := func(p string) string { return strings.TrimSuffix(root, "/") + p }
	exists := func(p string) bool { _, err := os.Stat(at(p)); return err == nil }
	if exists("/proc/net/ip_vs") {
		return true, "ip_vs is loaded (/proc/net/ip_vs exists)"
	}
	if exists("/sys/module/ip_vs") {
		return true, "ip_vs is in the kernel (/sys/module/ip_vs exists)"
	}
	why := []string{"no /proc/net/ip_vs", "no /sys/module/ip_vs"}
	mods, err := os.ReadFile(at("/proc/modules"))
	if err != nil {
		why = append(why, "no /proc/modules (kernel without loadable module support)")
		return false, strings.Join(why, ", ")
	}
	for _, l := range strings.Split(string(mods), "\n") {
		if strings.HasPrefix(l, "ip_vs ") {
			return true, "ip_vs is loaded (/proc/modules)"
		}
	}
	why = append(why, "ip_vs not in /proc/modules")
	rel, err := os.ReadFile(at("/proc/sys/kernel/osrelease"))
	ko := "/lib/modules/<release>/kernel/net/netfilter/ipvs/ip_vs.ko"
	if err == nil {
		ko = "/lib/modules/" + strings.TrimSpace(string(rel)) + "/kernel/net/netfilter/ipvs/ip_vs.ko"
	}
	found := false
	for _, ext := range []string{"", ".xz", ".zst", ".gz"} {
		found = found || exists(ko+ext)
	}
	if found {
		why = append(why, "the module exists ("+ko+") but is not loaded (modprobe ip_vs)")
	} else {
		why = append(why, "no "+ko)
	}
	return false, strings.Join(why, ", ")
}
