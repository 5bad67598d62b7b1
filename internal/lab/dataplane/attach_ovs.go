package dataplane

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"runtime"
	"strconv"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/cnibench/cnibench/internal/nf"
	"github.com/cnibench/cnibench/internal/ovs"
)

// ovsUserspace: Antrea's node layout on Open vSwitch's user-space datapath (the IETF draft's
// user-space vSwitch model). Every node runs an Open vSwitch of its own (ovsdb-server and
// ovs-vswitchd in the node's namespace, internal/ovs) with the bridge br-int
// (datapath_type=netdev); every pod's host veth is a port of it, and the node's gateway is the
// bridge's internal port antrea-gw0 (a tap device in the user-space datapath) holding the first
// address of the node's pod CIDR. Pods of a node share the pod CIDR as one subnet: between them
// OVS switches (NORMAL), off it they go through antrea-gw0 to the node's IP stack, and from
// there over the overlay. Antrea encapsulates in OVS itself; here the preset's overlay (a kernel
// VXLAN device) carries traffic between nodes, as for the other attach kinds.
//
// Pods are created with the CNI ptp plugin (veth pair, host-local address) and rearranged as
// Antrea's agent leaves them: the host veth loses ptp's address and route and joins br-int; the
// pod's eth0 gets its address on the pod CIDR's subnet and a default route via the gateway.
//
// When Services or policies filter in the node's IP stack (kube-proxy, iptables policies),
// Filtered makes br-int send every IPv4 packet from a pod to antrea-gw0, as br_netfilter
// makes a Linux bridge pass its packets to netfilter: the stack then sees pod-to-pod traffic of
// one node too, and the replies of a Service's connections come back through it. (Antrea keeps
// that traffic in OVS with its own conntrack flows and enforces policies in OVS; here
// policies are the preset's iptables ones.)
//
// The daemons run detached (a lab stands after `lab up` exits); removing the node's namespace
// (lab down, lab clean) kills them with everything else in it.
//
// ovs-dpdk is the same layout on OVS-DPDK (the draft's user-space vSwitch with DPDK): the
// pods' host veths are ports of type dpdk (DPDK's AF_PACKET driver on the veth, no hugepages),
// served by a PMD thread that busy-polls a CPU of its own; the pods send with complete
// checksums (TX checksumming off on their eth0), since a DPDK port takes a partial checksum for
// a finished one. (DPDK 22.11's AF_XDP driver's transmit stalls for good on a veth after a UDP
// flood through the gateway: the port counts packets out that the veth never sends, and the pod
// is cut off. AF_PACKET ports survive the same flood.)
type ovsUserspace struct{ dpdk bool }

func init() {
	RegisterAttach(ovsUserspace{})
	RegisterAttach(ovsUserspace{dpdk: true})
}

// Names of Antrea's node layout.
const (
	ovsBridge    = "br-int"
	ovsGateway   = "antrea-gw0"
	ovsGatewayOF = 2 // Antrea's gateway port number (its tunnel port is 1)
)

// ovsPMDRestUS is how long an OVS-DPDK PMD thread may sleep when idle while its lab rests
// (pmd-maxsleep's largest value, OVS 3.1's load-based sleeping: a loaded PMD never sleeps).
// Awake (during a trial) it busy-polls, as OVS-DPDK is meant to run. A run keeps every case's
// lab standing, and a busy-polling node took 50 % of a core (measured with top; 2.2 % with
// 0.5 ms sleeps, 0.5 % with 10 ms).
const ovsPMDRestUS = 10000

// ovsTimeout bounds a node's switch set-up and each pod's port.
const ovsTimeout = 60 * time.Second

func (a ovsUserspace) Name() string {
	if a.dpdk {
		return "ovs-dpdk"
	}
	return "ovs-userspace"
}

func (a ovsUserspace) Summary() string {
	if a.dpdk {
		return "pods on a per-node OVS-DPDK bridge (veths as DPDK AF_PACKET ports, no hugepages, one PMD thread)"
	}
	return "pods on a per-node Open vSwitch bridge, user-space datapath (Antrea's br-int and antrea-gw0)"
}

func (a ovsUserspace) Needs() []string {
	needs := []string{"cni ptp", "cni host-local"}
	for _, t := range ovs.Tools {
		needs = append(needs, "tool "+t)
	}
	if a.dpdk {
		needs = append(needs, "tool "+ovs.VswitchdDPDK)
	}
	return needs
}
func (ovsUserspace) PodNetwork() bool { return true }

func (ovsUserspace) CNI(podMTU int, ipam map[string]any) (string, map[string]any) {
	return "antrea", map[string]any{"type": "ptp", "ipMasq": false, "mtu": podMTU, "ipam": ipam}
}

// Combines refuses the engines that program each pod's host veth with eBPF: ovs-vswitchd
// reads the veth with an AF_PACKET socket, which sees a packet before tc ingress does.
func (ovsUserspace) Combines(p Parts) error {
	for _, e := range []Part{p.Proxy, p.Policy} {
		if _, hooked := e.(PodHook); hooked {
			return fmt.Errorf("%s programs each pod's host veth, which the user-space datapath reads before it: not with attach ovs-userspace", e.Name())
		}
	}
	return nil
}

func (a ovsUserspace) options(n Node) ovs.Options {
	opt := ovs.Options{NS: n.NS, Dir: filepath.Join(n.Dir, "ovs"), CPU: -1, Detached: true}
	if a.dpdk {
		// EAL's main lcore on the first CPU, the PMD thread on the last (every node's: on a
		// small host they share it); resting from the start (Wake, Rest).
		opt.DPDK = &ovs.DPDK{LcoreCPU: 0, PMDCPU: runtime.NumCPU() - 1, MaxSleepUS: ovsPMDRestUS}
	}
	return opt
}

// gatewayIP is the node's gateway address on its pod CIDR (host-local's default gateway).
func gatewayIP(n Node) net.IP {
	ip := append(net.IP(nil), n.PodCIDR.IP.To4()...)
	ip[3]++
	return ip
}

// SetupNode starts the node's Open vSwitch, makes br-int with antrea-gw0 and gives the gateway
// its address; br-int switches (NORMAL) until Filtered.
func (a ovsUserspace) SetupNode(n Node) (err error) {
	ctx, cancel := context.WithTimeout(context.Background(), ovsTimeout)
	defer cancel()
	sw, err := ovs.Start(ctx, a.options(n))
	if err != nil {
		return fmt.Errorf("open vswitch: %w", err)
	}
	if err := sw.Vsctl(ctx, "--", "add-br", ovsBridge,
		"--", "set", "Bridge", ovsBridge, "datapath_type=netdev", "fail_mode=secure", "other_config:disable-in-band=true",
		"--", "add-port", ovsBridge, ovsGateway, "--", "set", "Interface", ovsGateway, "type=internal",
		"ofport_request="+strconv.Itoa(ovsGatewayOF), "mtu_request="+strconv.Itoa(n.PodMTU)); err != nil {
		return err
	}
	if err := sw.WaitBridge(ctx, ovsBridge); err != nil {
		return err
	}
	if err := sw.AddFlows(ctx, ovsBridge, []byte("table=0,priority=0,actions=NORMAL\n")); err != nil {
		return err
	}
	err = n.Netlink(func(h *netlink.Handle) error {
		gw, err := h.LinkByName(ovsGateway)
		if err != nil {
			return fmt.Errorf("%s: %w", ovsGateway, err)
		}
		ones, _ := n.PodCIDR.Mask.Size()
		if err := h.AddrAdd(gw, &netlink.Addr{IPNet: &net.IPNet{IP: gatewayIP(n), Mask: net.CIDRMask(ones, 32)}}); err != nil {
			return fmt.Errorf("%s address: %w", ovsGateway, err)
		}
		return h.LinkSetUp(gw)
	})
	if err != nil {
		return err
	}
	if a.dpdk { // what the node's stack sends to pods leaves through a DPDK port: checksums complete
		if _, err := nf.SetFeature(nf.Endpoint{NS: n.NS, Dev: ovsGateway}, nf.TxChecksum, false); err != nil {
			return err
		}
	}
	// Filtered sends one node's pod-to-pod packets through the gateway and back out of it.
	for _, k := range []string{"net/ipv4/conf/all/send_redirects", "net/ipv4/conf/" + ovsGateway + "/send_redirects"} {
		if err := n.Sysctl(k, "0"); err != nil {
			return err
		}
	}
	return sw.PortsUp(ctx, []string{ovsGateway}, []int{ovsGatewayOF})
}

// PodAdded moves ptp's host veth onto br-int and gives the pod the subnet and the gateway.
func (a ovsUserspace) PodAdded(n Node, p PodNet) error {
	ctx, cancel := context.WithTimeout(context.Background(), ovsTimeout)
	defer cancel()
	err := n.Netlink(func(h *netlink.Handle) error {
		v, err := h.LinkByName(p.HostVeth)
		if err != nil {
			return fmt.Errorf("host veth %q: %w", p.HostVeth, err)
		}
		return flushIPv4(h, v, true)
	})
	if err != nil {
		return err
	}
	sw, err := ovs.Open(a.options(n))
	if err != nil {
		return err
	}
	port := []string{"--", "add-port", ovsBridge, p.HostVeth}
	if a.dpdk {
		port = append(port, "--", "set", "Interface", p.HostVeth, "type=dpdk",
			"options:dpdk-devargs=net_af_packet_"+p.HostVeth+",iface="+p.HostVeth)
		if _, err := nf.SetFeature(nf.Endpoint{NS: p.NS, Dev: "eth0"}, nf.TxChecksum, false); err != nil {
			return fmt.Errorf("pod %s: %w", p.NS, err)
		}
	}
	if err := sw.Vsctl(ctx, port...); err != nil {
		return err
	}
	err = p.Netlink(func(h *netlink.Handle) error {
		eth, err := h.LinkByName("eth0")
		if err != nil {
			return err
		}
		if err := flushIPv4(h, eth, true); err != nil {
			return err
		}
		ones, _ := n.PodCIDR.Mask.Size()
		if err := h.AddrAdd(eth, &netlink.Addr{IPNet: &net.IPNet{IP: p.IP, Mask: net.CIDRMask(ones, 32)}}); err != nil {
			return err
		}
		return h.RouteAdd(&netlink.Route{LinkIndex: eth.Attrs().Index, Gw: gatewayIP(n)})
	})
	if err != nil {
		return fmt.Errorf("pod %s: %w", p.NS, err)
	}
	return sw.PortsUp(ctx, []string{p.HostVeth}, nil)
}

// Filtered sends every IPv4 packet a pod sends to the gateway port (its destination MAC the
// gateway's), so the node's IP stack forwards it, filters it and brings replies back the same
// way; what comes from the gateway, and ARP, is switched as before.
func (a ovsUserspace) Filtered(n Node) error {
	var mac net.HardwareAddr
	err := n.Netlink(func(h *netlink.Handle) error {
		gw, err := h.LinkByName(ovsGateway)
		if err != nil {
			return err
		}
		mac = gw.Attrs().HardwareAddr
		return nil
	})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), ovsTimeout)
	defer cancel()
	sw, err := ovs.Open(a.options(n))
	if err != nil {
		return err
	}
	return sw.ReplaceFlows(ctx, ovsBridge, ovsFilteredFlows(mac))
}

// ovsFilteredFlows is br-int's flow table once the node's IP stack filters pod traffic.
func ovsFilteredFlows(gwMAC net.HardwareAddr) []byte {
	return []byte(fmt.Sprintf("table=0,priority=200,in_port=%d,actions=NORMAL\n"+
		"table=0,priority=100,ip,actions=mod_dl_dst:%s,output:%d\n"+
		"table=0,priority=0,actions=NORMAL\n", ovsGatewayOF, gwMAC, ovsGatewayOF))
}

func (ovsUserspace) FilterNeeds() []string { return nil }

// Wake makes an OVS-DPDK node's PMD thread busy-poll (pmd-maxsleep 0) for a trial.
func (a ovsUserspace) Wake(n Node) error { return a.pmdSleep(n, 0) }

// Rest lets it sleep when idle.
func (a ovsUserspace) Rest(n Node) error { return a.pmdSleep(n, ovsPMDRestUS) }

func (a ovsUserspace) pmdSleep(n Node, us int) error {
	if !a.dpdk {
		return nil // ovs-vswitchd's main thread serves the ports: it sleeps in poll()
	}
	ctx, cancel := context.WithTimeout(context.Background(), ovsTimeout)
	defer cancel()
	sw, err := ovs.Open(a.options(n))
	if err != nil {
		return err
	}
	return sw.Vsctl(ctx, "set", "Open_vSwitch", ".", "other_config:pmd-maxsleep="+strconv.Itoa(us))
}
