/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/*
 * Seed 003's disaggregated Kubernetes network provider (Polycube's "polykube"), the cubes'
 * logic written once and compiled twice:
 *
 *   polycube_chain.c  one tc program per cube, chained as Polycube chains cubes: each cube
 *                     parses the packet itself, gets its in-port in the packet's control
 *                     buffer, and its post-processor looks the out-port up in the cube's own
 *                     forward-chain map (tail call to the next cube through the node's patch
 *                     panel, redirect to a device, or pass to the node's IP stack);
 *   polycube_mono.c   one monolithic program per hook calling the same functions in sequence,
 *                     with one parse, no tail calls and no forward-chain lookups.
 *
 * Everything else (the functions, their maps, their counters) is this header's, so the two
 * builds differ by the chaining only. Cubes, their ports and their state (one set per node):
 *
 *   ILB (internal load balancer)   edge ports: one per local pod (the port's id is the pod's
 *        host veth ifindex); server port 0 towards the router. Edge -> server: ClusterIP DNAT
 *        (ilb_svc/ilb_be, a backend picked at random per connection, kept in the LRU ilb_ct);
 *        server -> edge: replies turned back into the ClusterIP (LRU ilb_rnat), then the edge
 *        port of the destination pod (ilb_edges: pod address -> ifindex and MACs: pods never
 *        ARP, the cube writes their Ethernet header); an address of the node's blocks without
 *        an edge port (the silent pods' holder addresses) goes to the node's IP stack.
 *        Hairpin (a pod given itself as the backend of a Service it reaches) would arrive with
 *        its own address as source and destination, a martian its stack drops: the ILB gives
 *        such a connection the service loopback address (svc_loopback) as its source, as
 *        Cilium's tc load balancer does (169.254.42.1 by default), and turns the pod's replies
 *        to that address back into Service -> pod at its edge port; the packets of a hairpin
 *        connection carry the PC_F_HAIRPIN flag, which the firewall lets pass as it lets a
 *        pod's traffic to itself pass.
 *   FW (firewall, pol.h's NetworkPolicy engine as a cube)  port 0 towards the ILB, 1 towards
 *        the router. A packet is judged once per node: one already judged on its way out of a
 *        local pod (metadata flag) is not judged again on its way back to another local pod.
 *   ROUTER  ports 0 pods (FW/ILB), 1 physical (ELB, DISC-NAT, the underlay), 2 host (the node's
 *        IP stack), 3 VXLAN (the kernel's VXLAN device). A longest-prefix match on rt_routes
 *        (the node's pod blocks -> 0, its own address -> 2, the cluster CIDR -> 3, the node's
 *        fictitious pod -> 1, default -> 1); forwarded packets (ports 0 and 3) lose one TTL.
 *   ELB (external load balancer)   port 0 towards the router, 1 towards DISC-NAT. 1 -> 0:
 *        NodePort DNAT (elb_svc/elb_be keyed by the node's address and the NodePort, LRU
 *        elb_ct); 0 -> 1: replies turned back into the node's address and NodePort (elb_rnat).
 *   DISC-NAT (Linux stack discriminator and NAT)  port 0 towards the ELB, 1 the underlay
 *        (eth0). 1 -> 0: a packet of a NATed session, or to a NodePort of the node
 *        (nat_ports); externalTrafficPolicy Cluster: source NAT to the node's fictitious pod
 *        (first address of its pod CIDR) so that the reply comes back through this node's
 *        ELB; Local: unchanged. Anything else goes up the node's IP stack (VXLAN packets,
 *        traffic for the node). 0 -> 1: replies of NATed sessions get the client's address
 *        back; packets leaving with the node's address (NodePort replies) go out the underlay;
 *        anything else goes up the stack (pod-to-Internet masquerading is not built).
 *
 * Counters: a per-CPU array per cube (<cube>_stats): packets entering the function, packets
 * it dropped, then its own (enum pc_*_stat).
 */
#ifndef CNIBENCH_POLYCUBE_H
#define CNIBENCH_POLYCUBE_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/in.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "pol.h"

/* Verdicts of a cube function besides an out-port (>= 0). */
#define PC_DROP -1
#define PC_STACK -2

/* The cubes, in the order of the patch panel. */
enum pc_cube { PC_ILB, PC_FW, PC_ROUTER, PC_ELB, PC_NAT, PC_CUBES };

/* Ports. */
#define ILB_SERVER 0 /* edge ports: the pod's host veth ifindex */
#define FW_PODS 0
#define FW_NET 1
#define RT_PODS 0
#define RT_PHYS 1
#define RT_HOST 2
#define RT_VXLAN 3
#define ELB_INT 0
#define ELB_EXT 1
#define NAT_INT 0
#define NAT_EXT 1

/* Metadata flags (Polycube's per-packet metadata besides the in-port). */
#define PC_F_JUDGED 1 /* the firewall judged the packet in this node already */
#define PC_F_HAIRPIN 2 /* a packet of a hairpin connection (translated by the ILB) */

/* The node's facts, set by the loader (network byte order). */
volatile const __u32 node_ip = 0; /* the node's underlay address (NodePorts are served on it) */
volatile const __u32 fict_ip = 0; /* the node's fictitious pod: the first address of its pod CIDR */
volatile const __u32 svc_loopback = 0; /* the source of hairpin connections (0: not translated) */

/* Counters: every cube's first two, then each cube's own. */
enum { PC_PACKETS, PC_DROPS };
enum pc_ilb_stat { ILB_NEW = 2, ILB_FORWARD, ILB_REPLY, ILB_DELIVERED, ILB_TO_STACK, ILB_HAIRPIN };
enum pc_fw_stat { FW_JUDGED = 2, FW_SKIPPED };
enum pc_rt_stat { RT_TO_PODS = 2, RT_TO_PHYS, RT_TO_HOST, RT_TO_VXLAN, RT_TTL };
enum pc_elb_stat { ELB_NEW = 2, ELB_FORWARD, ELB_REPLY };
enum pc_nat_stat { NAT_SNAT_NEW = 2, NAT_SNAT, NAT_RNAT, NAT_LOCAL, NAT_TO_STACK, NAT_OUT };
#define PC_STAT_SLOTS 8

#define PC_STATS(name)                                                                             \
	struct {                                                                                   \
		__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);                                           \
		__uint(max_entries, PC_STAT_SLOTS);                                                \
		__type(key, __u32);                                                                \
		__type(value, __u64);                                                              \
	} name SEC(".maps")

PC_STATS(ilb_stats);
PC_STATS(fw_stats);
PC_STATS(rt_stats);
PC_STATS(elb_stats);
PC_STATS(nat_stats);

/* The load balancers' tables (the same layout as lb_maps.h / lb.h). */
#define PC_MAX_SERVICES 65536
#define PC_MAX_BACKENDS 262144
#define PC_MAX_CONNS 65536

struct pc_svc_key {
	__u32 addr;
	__u16 port;
	__u8 proto;
	__u8 pad;
};

struct pc_svc {
	__u32 count; /* backends in slots 0..count-1 */
	__u32 flags;
};

struct pc_be_key {
	struct pc_svc_key svc;
	__u32 slot;
};

struct pc_addr {
	__u32 addr;
	__u16 port;
	__u16 flags;
};

struct pc_tuple {
	__u32 saddr, daddr;
	__u16 sport, dport;
	__u8 proto;
	__u8 pad[3];
};

/* A session: the address and port to write (ct: the backend as destination; rnat: the
 * Service as source), and when it was last used (bpf_ktime_get_ns). A hairpin session also
 * has nat_addr: ct writes it as the source (the port stays), rnat writes nat_addr:nat_port as
 * the destination. */
struct pc_conn {
	struct pc_addr to;
	__u32 nat_addr;
	__u16 nat_port;
	__u16 pad;
	__u64 seen;
};

#define PC_LB_MAPS(p)                                                                              \
	struct {                                                                                   \
		__uint(type, BPF_MAP_TYPE_HASH);                                                   \
		__uint(max_entries, PC_MAX_SERVICES);                                              \
		__uint(map_flags, BPF_F_NO_PREALLOC);                                              \
		__type(key, struct pc_svc_key);                                                    \
		__type(value, struct pc_svc);                                                      \
	} p##_svc SEC(".maps");                                                                    \
	struct {                                                                                   \
		__uint(type, BPF_MAP_TYPE_HASH);                                                   \
		__uint(max_entries, PC_MAX_BACKENDS);                                              \
		__uint(map_flags, BPF_F_NO_PREALLOC);                                              \
		__type(key, struct pc_be_key);                                                     \
		__type(value, struct pc_addr);                                                     \
	} p##_be SEC(".maps");                                                                     \
	struct {                                                                                   \
		__uint(type, BPF_MAP_TYPE_LRU_HASH);                                               \
		__uint(max_entries, PC_MAX_CONNS);                                                 \
		__type(key, struct pc_tuple);                                                      \
		__type(value, struct pc_conn);                                                     \
	} p##_ct SEC(".maps");                                                                     \
	struct {                                                                                   \
		__uint(type, BPF_MAP_TYPE_LRU_HASH);                                               \
		__uint(max_entries, PC_MAX_CONNS);                                                 \
		__type(key, struct pc_tuple);                                                      \
		__type(value, struct pc_conn);                                                     \
	} p##_rnat SEC(".maps")

PC_LB_MAPS(ilb);
PC_LB_MAPS(elb);

/* The ILB's edge ports: a local pod's address -> its port. */
struct pc_edge {
	__u32 ifindex;    /* the pod's host veth: the port's id and where the packet goes */
	__u8 mac[6];      /* the pod's eth0 */
	__u8 host_mac[6]; /* the host veth (the pods' gateway, in their static ARP entry) */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, struct pc_edge);
} ilb_edges SEC(".maps");

/* The router's routes. */
struct rt_key {
	__u32 prefixlen;
	__u32 addr;
};

struct rt_route {
	__u32 port;
};

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 1024);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct rt_key);
	__type(value, struct rt_route);
} rt_routes SEC(".maps");

/* DISC-NAT: the node's NodePorts and its NAT sessions. */
struct nat_port_key {
	__u16 port; /* network byte order */
	__u8 proto;
	__u8 pad;
};

struct nat_port {
	__u32 local; /* externalTrafficPolicy Local: no source NAT */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct nat_port_key);
	__type(value, struct nat_port);
} nat_ports SEC(".maps");

/* nat_sess: client -> node:NodePort tuple -> the source written (fictitious pod, port);
 * nat_rev: node:NodePort -> fictitious pod:port tuple -> the client written back. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, PC_MAX_CONNS);
	__type(key, struct pc_tuple);
	__type(value, struct pc_conn);
} nat_sess SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, PC_MAX_CONNS);
	__type(key, struct pc_tuple);
	__type(value, struct pc_conn);
} nat_rev SEC(".maps");

/* Lifetimes of a session since its last packet, as lb.h's. */
#define PC_LIFETIME_TCP (21600ULL * 1000000000ULL)
#define PC_LIFETIME_OTHER (60ULL * 1000000000ULL)
#define PC_TOUCH_NS 1000000000ULL

/* A packet as the cubes see it, in network byte order. */
struct pc_pkt {
	__u32 saddr, daddr;
	__u16 sport, dport; /* 0 when the packet has none (not TCP/UDP/SCTP, a later fragment) */
	__u8 proto;
	__u8 lb;  /* TCP or UDP without IP options and not a fragment: what the NATs translate */
	__u8 syn; /* a TCP SYN without ACK: the first packet of a connection */
	__u8 pad;
};

#define PC_IP_OFF ETH_HLEN
#define PC_IP_CSUM (PC_IP_OFF + __builtin_offsetof(struct iphdr, check))
#define PC_IP_SADDR (PC_IP_OFF + __builtin_offsetof(struct iphdr, saddr))
#define PC_IP_DADDR (PC_IP_OFF + __builtin_offsetof(struct iphdr, daddr))
#define PC_L4_OFF (PC_IP_OFF + sizeof(struct iphdr))
#define PC_TCP_CSUM (PC_L4_OFF + 16)
#define PC_UDP_CSUM (PC_L4_OFF + 6)

static __always_inline void pc_count(void *stats, __u32 stat)
{
	__u64 *v = bpf_map_lookup_elem(stats, &stat);

	if (v)
		*v += 1;
}

static __always_inline int pc_drop(void *stats)
{
	pc_count(stats, PC_DROPS);
	return PC_DROP;
}

/* pc_parse_at reads the packet in [data, end): 0 when it is IPv4, 1 when its headers are not
 * all there, -1 when it is not IPv4. */
static __always_inline int pc_parse_at(void *data, void *end, struct pc_pkt *p)
{
	struct ethhdr *eth = data;
	struct iphdr *ip = (void *)(eth + 1);
	__u16 *ports;
	__u32 hl;

	if ((void *)(ip + 1) > end)
		return 1;
	if (eth->h_proto != bpf_htons(ETH_P_IP) || ip->version != 4 || ip->ihl < 5)
		return -1;
	p->saddr = ip->saddr;
	p->daddr = ip->daddr;
	p->proto = ip->protocol;
	p->sport = 0;
	p->dport = 0;
	p->lb = 0;
	p->syn = 0;
	if ((p->proto != IPPROTO_TCP && p->proto != IPPROTO_UDP && p->proto != IPPROTO_SCTP_) ||
	    (ip->frag_off & bpf_htons(0x1fff)))
		return 0;
	hl = ip->ihl * 4;
	ports = (void *)ip + hl;
	if ((void *)(ports + 2) > end)
		return 1;
	p->sport = ports[0];
	p->dport = ports[1];
	if (p->proto == IPPROTO_TCP) {
		__u8 *flags = (__u8 *)ports + 13;

		if ((void *)(flags + 1) > end)
			return 1;
		p->syn = (*flags & 0x12) == 0x02;
	}
	p->lb = hl == sizeof(struct iphdr) && p->proto != IPPROTO_SCTP_ && !(ip->frag_off & bpf_htons(0x2000));
	return 0;
}

/* pc_parse reads the packet's headers, pulling them into the linear part when they are not
 * there: 0 for IPv4, else nonzero (the packet is none of the cubes' business). */
static __always_inline int pc_parse(struct __sk_buff *skb, struct pc_pkt *p)
{
	int r = pc_parse_at((void *)(long)skb->data, (void *)(long)skb->data_end, p);

	if (r <= 0)
		return r;
	if (bpf_skb_pull_data(skb, skb->len < ETH_HLEN + 74 ? skb->len : ETH_HLEN + 74))
		return -1;
	return pc_parse_at((void *)(long)skb->data, (void *)(long)skb->data_end, p) ? -1 : 0;
}

static __always_inline void pc_tuple_of(const struct pc_pkt *p, struct pc_tuple *t)
{
	t->saddr = p->saddr;
	t->daddr = p->daddr;
	t->sport = p->sport;
	t->dport = p->dport;
	t->proto = p->proto;
}

/* pc_rewrite writes addr:port as the packet's destination (dst) or source, fixing the IPv4
 * and TCP/UDP checksums (a UDP checksum of 0 stays 0), and keeps p up to date: 0, or -1 when
 * the packet could not be written. */
static __always_inline int pc_rewrite(struct __sk_buff *skb, struct pc_pkt *p, __u32 addr, __u16 port, int dst)
{
	__u32 addr_off = dst ? PC_IP_DADDR : PC_IP_SADDR;
	__u32 port_off = PC_L4_OFF + (dst ? 2 : 0);
	__u32 csum_off = p->proto == IPPROTO_TCP ? PC_TCP_CSUM : PC_UDP_CSUM;
	__u64 l4flags = p->proto == IPPROTO_UDP ? BPF_F_MARK_MANGLED_0 : 0;
	__u32 old_addr = dst ? p->daddr : p->saddr;
	__u16 old_port = dst ? p->dport : p->sport;

	if (old_addr != addr) {
		if (bpf_l4_csum_replace(skb, csum_off, old_addr, addr, l4flags | BPF_F_PSEUDO_HDR | 4) ||
		    bpf_l3_csum_replace(skb, PC_IP_CSUM, old_addr, addr, 4) ||
		    bpf_skb_store_bytes(skb, addr_off, &addr, 4, 0))
			return -1;
	}
	if (old_port != port) {
		if (bpf_l4_csum_replace(skb, csum_off, old_port, port, l4flags | 2) ||
		    bpf_skb_store_bytes(skb, port_off, &port, 2, 0))
			return -1;
	}
	if (dst) {
		p->daddr = addr;
		p->dport = port;
	} else {
		p->saddr = addr;
		p->sport = port;
	}
	return 0;
}

/* pc_live returns the session when it has not outlived its lifetime, refreshing its last use;
 * NULL for none or an expired one. */
static __always_inline struct pc_conn *pc_live(struct pc_conn *c, __u8 proto, __u64 now)
{
	__u64 life = proto == IPPROTO_TCP ? PC_LIFETIME_TCP : PC_LIFETIME_OTHER;

	if (!c || now - c->seen > life)
		return NULL;
	if (now - c->seen > PC_TOUCH_NS)
		c->seen = now;
	return c;
}

/* pc_lb_forward is a load balancer's forward direction (the ILB's edge ports, the ELB's
 * external port): a packet of a known session is DNATed to the backend its first packet was
 * given; the first packet to a Service (a TCP SYN always starts afresh) picks a backend at
 * random and records both directions. With st_hairpin (the ILB's; 0 for none), a session
 * whose backend is its client (hairpin) gets svc_loopback as its source, counted as
 * st_hairpin, and its packets the PC_F_HAIRPIN flag. 0 when the packet goes on (translated or
 * not), -1 when it is dropped (a Service without backends, a packet that could not be
 * written). */
static __always_inline int pc_lb_forward(struct __sk_buff *skb, struct pc_pkt *p, void *svcs, void *bes, void *ct,
					 void *rnat, void *stats, __u32 st_new, __u32 st_fwd, __u32 st_hairpin,
					 __u32 *flags)
{
	struct pc_tuple t = {}, r = {};
	struct pc_be_key bk = {};
	struct pc_conn fwd = {}, rev = {}, *c;
	struct pc_addr *a;
	struct pc_svc *s;
	__u64 now;

	if (!p->lb)
		return 0;
	pc_tuple_of(p, &t);
	now = bpf_ktime_get_ns();
	if (!p->syn) {
		c = pc_live(bpf_map_lookup_elem(ct, &t), t.proto, now);
		if (c) {
			pc_count(stats, st_fwd);
			if (pc_rewrite(skb, p, c->to.addr, c->to.port, 1))
				return -1;
			if (!c->nat_addr)
				return 0;
			*flags |= PC_F_HAIRPIN;
			return pc_rewrite(skb, p, c->nat_addr, t.sport, 0);
		}
	}
	bk.svc.addr = t.daddr;
	bk.svc.port = t.dport;
	bk.svc.proto = t.proto;
	s = bpf_map_lookup_elem(svcs, &bk.svc);
	if (!s)
		return 0;
	if (s->count == 0)
		return -1;
	bk.slot = bpf_get_prandom_u32() % s->count;
	a = bpf_map_lookup_elem(bes, &bk);
	if (!a)
		return -1;
	fwd.to.addr = a->addr;
	fwd.to.port = a->port;
	fwd.seen = now;
	rev.to.addr = t.daddr;
	rev.to.port = t.dport;
	rev.seen = now;
	r.saddr = fwd.to.addr;
	r.daddr = t.saddr;
	r.sport = fwd.to.port;
	r.dport = t.sport;
	r.proto = t.proto;
	if (st_hairpin && svc_loopback && fwd.to.addr == t.saddr) {
		fwd.nat_addr = svc_loopback;
		rev.nat_addr = t.saddr;
		rev.nat_port = t.sport;
		r.daddr = svc_loopback;
	}
	if (bpf_map_update_elem(ct, &t, &fwd, BPF_ANY) || bpf_map_update_elem(rnat, &r, &rev, BPF_ANY))
		return -1;
	pc_count(stats, st_new);
	if (pc_rewrite(skb, p, fwd.to.addr, fwd.to.port, 1))
		return -1;
	if (!fwd.nat_addr)
		return 0;
	pc_count(stats, st_hairpin);
	*flags |= PC_F_HAIRPIN;
	return pc_rewrite(skb, p, fwd.nat_addr, t.sport, 0);
}

/* pc_lb_reverse is a load balancer's reverse direction (the ILB's server port, the ELB's
 * internal port): a reply of a session gets the Service's address back as its source. A TCP
 * SYN is never a reply: it removes a stale reverse entry of its tuple (ports are reused). 0
 * when the packet goes on, -1 when it could not be written. */
static __always_inline int pc_lb_reverse(struct __sk_buff *skb, struct pc_pkt *p, void *rnat, void *stats, __u32 st_reply)
{
	struct pc_tuple t = {};
	struct pc_conn *c;

	if (!p->lb)
		return 0;
	pc_tuple_of(p, &t);
	if (p->syn) {
		bpf_map_delete_elem(rnat, &t);
		return 0;
	}
	c = pc_live(bpf_map_lookup_elem(rnat, &t), t.proto, bpf_ktime_get_ns());
	if (!c)
		return 0;
	pc_count(stats, st_reply);
	return pc_rewrite(skb, p, c->to.addr, c->to.port, 0);
}

/* ilb_hairpin_reply turns a pod's reply to the service loopback address (a hairpin session's,
 * found in ilb_rnat by its tuple) back into Service -> pod, at the pod's edge port: 1 when it
 * did, 0 when the packet is none, -1 when it could not be written. */
static __always_inline int ilb_hairpin_reply(struct __sk_buff *skb, struct pc_pkt *p, __u32 *flags)
{
	struct pc_tuple t = {};
	struct pc_conn *c;

	if (!svc_loopback || p->daddr != svc_loopback || !p->lb || p->syn)
		return 0;
	pc_tuple_of(p, &t);
	c = pc_live(bpf_map_lookup_elem(&ilb_rnat, &t), t.proto, bpf_ktime_get_ns());
	if (!c || !c->nat_addr)
		return 0;
	pc_count(&ilb_stats, ILB_REPLY);
	*flags |= PC_F_HAIRPIN;
	if (pc_rewrite(skb, p, c->to.addr, c->to.port, 0) || pc_rewrite(skb, p, c->nat_addr, c->nat_port, 1))
		return -1;
	return 1;
}

/* ilb_process is the internal load balancer: from an edge port (a pod), ClusterIP DNAT (or a
 * hairpin session's reply turned back) and on to the server port; from the server port,
 * reverse NAT and on to the destination's edge port (its Ethernet header written), or the
 * stack for a local address without an edge port. */
static __always_inline int ilb_process(struct __sk_buff *skb, struct pc_pkt *p, __u32 in_port, __u32 *flags)
{
	struct pc_edge *e;
	int r;

	pc_count(&ilb_stats, PC_PACKETS);
	if (in_port != ILB_SERVER) {
		r = ilb_hairpin_reply(skb, p, flags);
		if (r < 0)
			return pc_drop(&ilb_stats);
		if (r > 0)
			return ILB_SERVER;
		if (pc_lb_forward(skb, p, &ilb_svc, &ilb_be, &ilb_ct, &ilb_rnat, &ilb_stats, ILB_NEW, ILB_FORWARD,
				  ILB_HAIRPIN, flags))
			return pc_drop(&ilb_stats);
		return ILB_SERVER;
	}
	if (pc_lb_reverse(skb, p, &ilb_rnat, &ilb_stats, ILB_REPLY))
		return pc_drop(&ilb_stats);
	e = bpf_map_lookup_elem(&ilb_edges, &p->daddr);
	if (!e) {
		pc_count(&ilb_stats, ILB_TO_STACK);
		return PC_STACK;
	}
	if (bpf_skb_store_bytes(skb, 0, e->mac, 12, 0)) /* mac, then host_mac */
		return pc_drop(&ilb_stats);
	pc_count(&ilb_stats, ILB_DELIVERED);
	return e->ifindex;
}

/* fw_process is the firewall cube: the NetworkPolicy decision of pol.h on packets between the
 * ILB (port FW_PODS) and the router (FW_NET), once per node. */
static __always_inline int fw_process(struct __sk_buff *skb, struct pc_pkt *p, __u32 in_port, __u32 *flags)
{
	struct pol_tuple t = {};
	__u32 out = in_port == FW_PODS ? FW_NET : FW_PODS;

	pc_count(&fw_stats, PC_PACKETS);
	if (in_port == FW_NET && (*flags & PC_F_JUDGED)) {
		pc_count(&fw_stats, FW_SKIPPED);
		return out;
	}
	if ((*flags & PC_F_HAIRPIN) || p->saddr == p->daddr)
		return out; /* a pod's traffic to itself (through a Service: hairpin) */
	t.saddr = p->saddr;
	t.daddr = p->daddr;
	t.sport = p->sport;
	t.dport = p->dport;
	t.proto = p->proto;
	pc_count(&fw_stats, FW_JUDGED);
	if (pol_judge(&t, p->syn) == TC_ACT_SHOT)
		return pc_drop(&fw_stats);
	if (in_port == FW_PODS)
		*flags |= PC_F_JUDGED;
	return out;
}

/* pc_dec_ttl decrements the TTL as a router does: 0, or -1 when the packet must not be
 * forwarded (TTL expired: the stack answers with ICMP). */
static __always_inline int pc_dec_ttl(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data, *end = (void *)(long)skb->data_end;
	struct iphdr *ip = data + ETH_HLEN;
	__u16 old, new;

	if ((void *)(ip + 1) > end || ip->ttl <= 1)
		return -1;
	old = *(__u16 *)&ip->ttl;
	ip->ttl--;
	new = *(__u16 *)&ip->ttl;
	return bpf_l3_csum_replace(skb, PC_IP_CSUM, old, new, 2) ? -1 : 0;
}

/* rt_process is the router: the out-port of the longest prefix matching the destination. */
static __always_inline int rt_process(struct __sk_buff *skb, struct pc_pkt *p, __u32 in_port)
{
	struct rt_key k = {.prefixlen = 32, .addr = p->daddr};
	struct rt_route *r;
	__u32 port;

	pc_count(&rt_stats, PC_PACKETS);
	r = bpf_map_lookup_elem(&rt_routes, &k);
	if (!r || r->port > RT_VXLAN)
		return pc_drop(&rt_stats);
	port = r->port;
	if ((port == RT_PODS || port == RT_VXLAN) && pc_dec_ttl(skb)) {
		pc_count(&rt_stats, RT_TTL);
		return PC_STACK;
	}
	pc_count(&rt_stats, RT_TO_PODS + port);
	return port;
}

/* elb_process is the external load balancer: NodePort DNAT from DISC-NAT's side, reverse NAT
 * from the router's. */
static __always_inline int elb_process(struct __sk_buff *skb, struct pc_pkt *p, __u32 in_port)
{
	__u32 flags = 0;

	pc_count(&elb_stats, PC_PACKETS);
	if (in_port == ELB_EXT) {
		/* No hairpin: NodePort clients come from outside the cluster. */
		if (pc_lb_forward(skb, p, &elb_svc, &elb_be, &elb_ct, &elb_rnat, &elb_stats, ELB_NEW, ELB_FORWARD, 0,
				  &flags))
			return pc_drop(&elb_stats);
		return ELB_INT;
	}
	if (pc_lb_reverse(skb, p, &elb_rnat, &elb_stats, ELB_REPLY))
		return pc_drop(&elb_stats);
	return ELB_EXT;
}

/* nat_process is DISC-NAT. */
static __always_inline int nat_process(struct __sk_buff *skb, struct pc_pkt *p, __u32 in_port)
{
	struct pc_tuple t = {}, rk = {};
	struct nat_port_key npk = {};
	struct pc_conn fs = {}, rs = {}, *s;
	struct nat_port *np;
	__u16 port;
	__u64 now;
	int i;

	pc_count(&nat_stats, PC_PACKETS);
	if (in_port == NAT_INT) {
		/* Towards the underlay: only NodePort replies (the ELB gave them the node's address). */
		if (p->saddr != node_ip) {
			pc_count(&nat_stats, NAT_TO_STACK);
			return PC_STACK;
		}
		if (p->lb) {
			pc_tuple_of(p, &t);
			s = pc_live(bpf_map_lookup_elem(&nat_rev, &t), t.proto, bpf_ktime_get_ns());
			if (s) {
				if (pc_rewrite(skb, p, s->to.addr, s->to.port, 1))
					return pc_drop(&nat_stats);
				pc_count(&nat_stats, NAT_RNAT);
			}
		}
		pc_count(&nat_stats, NAT_OUT);
		return NAT_EXT;
	}
	/* From the underlay: the stack's, unless it is for a NodePort of the node. */
	if (!p->lb || p->daddr != node_ip) {
		pc_count(&nat_stats, NAT_TO_STACK);
		return PC_STACK;
	}
	pc_tuple_of(p, &t);
	now = bpf_ktime_get_ns();
	if (!p->syn) {
		s = pc_live(bpf_map_lookup_elem(&nat_sess, &t), t.proto, now);
		if (s) {
			if (pc_rewrite(skb, p, s->to.addr, s->to.port, 0))
				return pc_drop(&nat_stats);
			pc_count(&nat_stats, NAT_SNAT);
			return NAT_INT;
		}
	}
	npk.port = t.dport;
	npk.proto = t.proto;
	np = bpf_map_lookup_elem(&nat_ports, &npk);
	if (!np) {
		pc_count(&nat_stats, NAT_TO_STACK);
		return PC_STACK;
	}
	if (np->local) {
		pc_count(&nat_stats, NAT_LOCAL);
		return NAT_INT;
	}
	/* externalTrafficPolicy Cluster: the source becomes the node's fictitious pod, on the
	 * client's port unless another client holds it (then a few random ones are tried). */
	rk.saddr = node_ip;
	rk.daddr = fict_ip;
	rk.sport = t.dport;
	rk.proto = t.proto;
	port = t.sport;
#pragma unroll
	for (i = 0; i < 4; i++) {
		rk.dport = port;
		s = pc_live(bpf_map_lookup_elem(&nat_rev, &rk), t.proto, now);
		if (!s || (s->to.addr == t.saddr && s->to.port == t.sport))
			break;
		port = bpf_htons(32768 + bpf_get_prandom_u32() % 28232);
	}
	rk.dport = port;
	fs.to.addr = fict_ip;
	fs.to.port = port;
	fs.seen = now;
	rs.to.addr = t.saddr;
	rs.to.port = t.sport;
	rs.seen = now;
	if (bpf_map_update_elem(&nat_sess, &t, &fs, BPF_ANY) || bpf_map_update_elem(&nat_rev, &rk, &rs, BPF_ANY) ||
	    pc_rewrite(skb, p, fict_ip, port, 0))
		return pc_drop(&nat_stats);
	pc_count(&nat_stats, NAT_SNAT_NEW);
	return NAT_INT;
}

#endif
