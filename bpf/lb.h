/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/*
 * Service load balancing per packet, as an eBPF data path does it at tc (Cilium's per-packet
 * LB without socket LB, seed 003's internal load balancer): the maps and the logic, shared by
 * the programs that include it (each compiled object gets maps of its own). The Service table
 * (services, backends) is lb_maps.h's; this adds:
 *
 *   ct4       forward tuple client -> Service (LRU)       -> the backend chosen
 *   rnat4     reply tuple backend -> client (LRU)         -> the Service (addr, port)
 *   lb_stats  per-CPU counters (enum lb_stat)
 *
 * A packet is parsed once; a forward packet of a known connection is DNATed to the backend
 * its first packet was given; a reply is SNATed back to the Service address; the first packet
 * to a Service picks a slot at random (bpf_get_prandom_u32, like kube-proxy's statistic
 * mode and Cilium's random selection) and records both directions. A Service without
 * backends drops. Everything is in network byte order, as in the packet. The lookups are
 * hash lookups: their cost does not grow with the number of Services.
 *
 * Hairpin, a backend reaching its own Service and given itself as the backend, would arrive with
 * its own address as source and destination, which its stack drops as a martian: the connection
 * gets the service loopback address (lb_loopback) as its source instead, as Cilium's tc load
 * balancer does (its "service loopback" SNAT, 169.254.42.1 by default), so that the backend
 * sees a peer that is not itself and replies through its default route, where the connection
 * table turns the reply back into Service -> client. The client's port is kept, as Cilium
 * keeps it: two hairpin connections of one pod from the same port to two Services of the same
 * backend would collide in the pod (a pod's port is unique per destination only).
 *
 * Not handled (the packet passes untouched): IPv4 with options, fragments, protocols other
 * than TCP and UDP.
 */
#ifndef CNIBENCH_LB_H
#define CNIBENCH_LB_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/in.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "lb_maps.h"
#include "lb_mark.h"

#ifndef TCX_NEXT
#define TCX_NEXT -1 /* tcx: go on with the next program of the hook (pass when last) */
#endif

/* Connection table size: LRU maps are preallocated (about 6 MB per map per node at this size);
 * the least recently used connections make room for new ones. */
#define LB_MAX_CONNS 65536
/* The service loopback address (network byte order), set by the loader: the source of hairpin
 * connections (0: hairpin is not translated). */
volatile const __u32 lb_loopback = 0;

/* Lifetimes of a connection entry since its last packet, as Cilium's connection tracking
 * keeps them: TCP 6 h (a new SYN replaces an entry anyway), other protocols 60 s. */
#define LB_LIFETIME_TCP (21600ULL * 1000000000ULL)
#define LB_LIFETIME_OTHER (60ULL * 1000000000ULL)
#define LB_TOUCH_NS 1000000000ULL /* refresh an entry's last use at most once a second */

struct lb_tuple {
	__u32 saddr, daddr;
	__u16 sport, dport;
	__u8 proto;
	__u8 pad[3];
};

/* A connection table entry. ct4 (forward): write `to` as the destination and, when nat_addr
 * is set, nat_addr as the source (the port stays). rnat4 (reply): write `to` as the source
 * and, when nat_addr is set, nat_addr:nat_port as the destination. LB_CONN_REDIRECT: a
 * NodePort connection, whose rewritten packets are sent on by a FIB lookup and
 * bpf_redirect_neigh (the node's IP stack would take a packet whose source is now one of its
 * own addresses for a martian). LB_CONN_HAIRPIN: a hairpin connection (source translated to
 * lb_loopback), whose packets both ways are marked for the programs after this one. */
struct lb_conn {
	struct lb_addr to;
	__u32 nat_addr;
	__u16 nat_port;
	__u16 flags;
	__u64 seen; /* bpf_ktime_get_ns */
};

#define LB_CONN_REDIRECT 1
#define LB_CONN_HAIRPIN 2

enum lb_stat {
	LB_PACKETS,   /* IPv4 TCP/UDP packets looked at */
	LB_NEW,       /* first packets of connections to a Service: a backend chosen */
	LB_FORWARD,   /* later forward packets DNATed by the connection table */
	LB_REPLY,     /* replies SNATed back to the Service address */
	LB_NO_BACKEND, /* dropped: the Service has no backend */
	LB_NODEPORT,   /* NodePort packets sent on by the FIB (forward and reply) */
	LB_HAIRPIN,    /* new hairpin connections: source translated to lb_loopback */
	LB_STATS,
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, LB_MAX_CONNS);
	__type(key, struct lb_tuple);
	__type(value, struct lb_conn);
} ct4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, LB_MAX_CONNS);
	__type(key, struct lb_tuple);
	__type(value, struct lb_conn);
} rnat4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LB_STATS);
	__type(key, __u32);
	__type(value, __u64);
} lb_stats SEC(".maps");

static __always_inline void lb_count(__u32 stat)
{
	__u64 *v = bpf_map_lookup_elem(&lb_stats, &stat);

	if (v)
		*v += 1;
}

#define LB_IP_OFF ETH_HLEN
#define LB_IP_CSUM (LB_IP_OFF + __builtin_offsetof(struct iphdr, check))
#define LB_IP_SADDR (LB_IP_OFF + __builtin_offsetof(struct iphdr, saddr))
#define LB_IP_DADDR (LB_IP_OFF + __builtin_offsetof(struct iphdr, daddr))
#define LB_L4_OFF (LB_IP_OFF + sizeof(struct iphdr))
#define LB_TCP_CSUM (LB_L4_OFF + 16)
#define LB_UDP_CSUM (LB_L4_OFF + 6)

/* lb_tuple_of reads the tuple of an IPv4 TCP/UDP packet without options that is not a
 * fragment from [data, end): 0 when it is one, 1 when the headers are not all there, -1 when
 * the packet is not the load balancer's. *syn is set for a TCP SYN without ACK (the first
 * packet of a new connection). */
static __always_inline int lb_tuple_of(void *data, void *end, struct lb_tuple *t, int *syn)
{
	struct ethhdr *eth = data;
	struct iphdr *ip = (void *)(eth + 1);
	__u16 *ports = (void *)(ip + 1);
	__u8 *flags = (__u8 *)ports + 13; /* TCP: CWR ECE URG ACK PSH RST SYN FIN */

	if ((void *)(ports + 2) > end)
		return 1; /* short: the headers are not all in the linear part */
	if (eth->h_proto != bpf_htons(ETH_P_IP) || ip->version != 4 || ip->ihl != 5 ||
	    (ip->frag_off & bpf_htons(0x3fff)) || (ip->protocol != IPPROTO_TCP && ip->protocol != IPPROTO_UDP))
		return -1; /* not IPv4, options, a fragment, or neither TCP nor UDP */
	t->saddr = ip->saddr;
	t->daddr = ip->daddr;
	t->sport = ports[0];
	t->dport = ports[1];
	t->proto = ip->protocol;
	*syn = 0;
	if (t->proto == IPPROTO_TCP) {
		if ((void *)(flags + 1) > end)
			return 1;
		*syn = (*flags & 0x12) == 0x02;
	}
	return 0;
}

/* lb_parse reads the tuple of an IPv4 TCP/UDP packet without options that is not a fragment:
 * 0 when it is one, else nonzero (the packet is not the load balancer's). The headers are
 * pulled into the linear part only when they are not there. */
static __always_inline int lb_parse(struct __sk_buff *skb, struct lb_tuple *t, int *syn)
{
	int r = lb_tuple_of((void *)(long)skb->data, (void *)(long)skb->data_end, t, syn);
	__u32 want = LB_L4_OFF + 14;

	if (r <= 0)
		return r;
	if (skb->len < want)
		want = skb->len;
	if (bpf_skb_pull_data(skb, want))
		return -1;
	return lb_tuple_of((void *)(long)skb->data, (void *)(long)skb->data_end, t, syn) ? -1 : 0;
}

/* lb_rewrite replaces the packet's destination (dst != 0) or source address and port with a,
 * fixing the IPv4 and TCP/UDP checksums (a UDP checksum of 0, none, stays 0). */
static __always_inline int lb_rewrite(struct __sk_buff *skb, const struct lb_tuple *t, const struct lb_addr *a, int dst)
{
	__u32 addr_off = dst ? LB_IP_DADDR : LB_IP_SADDR;
	__u32 port_off = LB_L4_OFF + (dst ? 2 : 0);
	__u32 csum_off = t->proto == IPPROTO_TCP ? LB_TCP_CSUM : LB_UDP_CSUM;
	__u64 l4flags = t->proto == IPPROTO_UDP ? BPF_F_MARK_MANGLED_0 : 0;
	__u32 old_addr = dst ? t->daddr : t->saddr;
	__u16 old_port = dst ? t->dport : t->sport;

	if (old_addr != a->addr) {
		if (bpf_l4_csum_replace(skb, csum_off, old_addr, a->addr, l4flags | BPF_F_PSEUDO_HDR | 4))
			return -1;
		if (bpf_l3_csum_replace(skb, LB_IP_CSUM, old_addr, a->addr, 4))
			return -1;
		if (bpf_skb_store_bytes(skb, addr_off, &a->addr, 4, 0))
			return -1;
	}
	if (old_port != a->port) {
		if (bpf_l4_csum_replace(skb, csum_off, old_port, a->port, l4flags | 2))
			return -1;
		if (bpf_skb_store_bytes(skb, port_off, &a->port, 2, 0))
			return -1;
	}
	return 0;
}

/* lb_live returns the entry when it has not outlived its lifetime, and refreshes its last
 * use; NULL for no entry or an expired one. */
static __always_inline struct lb_conn *lb_live(struct lb_conn *c, __u8 proto, __u64 now)
{
	__u64 life = proto == IPPROTO_TCP ? LB_LIFETIME_TCP : LB_LIFETIME_OTHER;

	if (!c || now - c->seen > life)
		return NULL;
	if (now - c->seen > LB_TOUCH_NS)
		c->seen = now;
	return c;
}

/* lb_redirect sends a rewritten NodePort packet on where the node's routes say (TTL left as
 * it is), or lets it go up the stack when there is no such route. */
static __always_inline int lb_redirect(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data, *end = (void *)(long)skb->data_end;
	struct iphdr *ip = data + ETH_HLEN;
	struct bpf_fib_lookup fib = {};
	struct bpf_redir_neigh nh = {};
	long r;

	if ((void *)(ip + 1) > end)
		return TC_ACT_SHOT;
	fib.family = 2; /* AF_INET */
	fib.tos = ip->tos;
	fib.l4_protocol = ip->protocol;
	/* No tot_len: the helper then checks the skb against the egress MTU itself, which lets
	 * GSO packets (up to 64 KB from a pod's TCP) through; with tot_len it refuses them. */
	fib.ipv4_src = ip->saddr;
	fib.ipv4_dst = ip->daddr;
	fib.ifindex = skb->ingress_ifindex;
	r = bpf_fib_lookup(skb, &fib, sizeof(fib), 0);
	if (r != BPF_FIB_LKUP_RET_SUCCESS && r != BPF_FIB_LKUP_RET_NO_NEIGH)
		return TCX_NEXT;
	lb_count(LB_NODEPORT);
	nh.nh_family = 2;
	nh.ipv4_nh = fib.ipv4_dst;
	return bpf_redirect_neigh(fib.ifindex, &nh, sizeof(nh), 0);
}

/* lb_forward writes a forward packet as its connection entry says. */
static __always_inline int lb_forward(struct __sk_buff *skb, struct lb_tuple *t, struct lb_conn *c)
{
	struct lb_addr src;

	if (lb_rewrite(skb, t, &c->to, 1))
		return TC_ACT_SHOT;
	if (c->nat_addr) {
		src.addr = c->nat_addr;
		src.port = t->sport;
		if (lb_rewrite(skb, t, &src, 0))
			return TC_ACT_SHOT;
	}
	if (c->flags & LB_CONN_HAIRPIN)
		lb_mark_hairpin(skb);
	return c->flags & LB_CONN_REDIRECT ? lb_redirect(skb) : TCX_NEXT;
}

/* lb_reply writes a reply as its entry says and marks it for the programs after this one. */
static __always_inline int lb_reply(struct __sk_buff *skb, struct lb_tuple *t, struct lb_conn *c)
{
	struct lb_addr dst;

	if (lb_rewrite(skb, t, &c->to, 0))
		return TC_ACT_SHOT;
	if (c->nat_addr) {
		dst.addr = c->nat_addr;
		dst.port = c->nat_port;
		if (lb_rewrite(skb, t, &dst, 1))
			return TC_ACT_SHOT;
	}
	if (c->flags & LB_CONN_HAIRPIN)
		lb_mark_hairpin(skb);
	else
		lb_mark_reply(skb);
	return c->flags & LB_CONN_REDIRECT ? lb_redirect(skb) : TCX_NEXT;
}

/* lb_packet load-balances one packet: TCX_NEXT when it passes on (rewritten or not),
 * TC_ACT_SHOT when it is dropped, a redirect for a NodePort packet. A TCP SYN starts a new
 * connection: it is never a reply and never follows an old entry of the same tuple (ports are
 * reused); it picks a backend afresh when it is for a Service and removes the stale reverse
 * entry of its tuple otherwise. A NodePort Service's connection to a backend on another node
 * (LB_BE_REMOTE, externalTrafficPolicy Cluster) gets the node's address as its source, so that
 * the reply comes back through this node, as Cilium does. A connection given its own client as
 * the backend (hairpin) gets lb_loopback as its source (see the top of this file). */
static __always_inline int lb_packet(struct __sk_buff *skb)
{
	struct lb_tuple t = {}, r = {};
	struct lb_backend_key bk = {};
	struct lb_conn fwd = {}, rev = {}, *c;
	struct lb_addr *a;
	struct lb_svc *s;
	__u64 now;
	int syn;

	if (lb_parse(skb, &t, &syn))
		return TCX_NEXT;
	lb_count(LB_PACKETS);
	now = bpf_ktime_get_ns();
	if (!syn) {
		c = lb_live(bpf_map_lookup_elem(&ct4, &t), t.proto, now);
		if (c) {
			lb_count(LB_FORWARD);
			return lb_forward(skb, &t, c);
		}
		c = lb_live(bpf_map_lookup_elem(&rnat4, &t), t.proto, now);
		if (c) {
			lb_count(LB_REPLY);
			return lb_reply(skb, &t, c);
		}
	}
	bk.svc.addr = t.daddr;
	bk.svc.port = t.dport;
	bk.svc.proto = t.proto;
	s = bpf_map_lookup_elem(&services, &bk.svc);
	if (!s) {
		if (syn)
			bpf_map_delete_elem(&rnat4, &t);
		return TCX_NEXT;
	}
	if (s->count == 0) {
		lb_count(LB_NO_BACKEND);
		return TC_ACT_SHOT;
	}
	bk.slot = bpf_get_prandom_u32() % s->count;
	a = bpf_map_lookup_elem(&backends, &bk);
	if (!a) {
		lb_count(LB_NO_BACKEND);
		return TC_ACT_SHOT;
	}
	fwd.to.addr = a->addr;
	fwd.to.port = a->port;
	fwd.seen = now;
	rev.to.addr = t.daddr;
	rev.to.port = t.dport;
	rev.seen = now;
	r.saddr = a->addr;
	r.daddr = t.saddr;
	r.sport = a->port;
	r.dport = t.sport;
	r.proto = t.proto;
	if (s->flags & LB_SVC_NODEPORT) {
		fwd.flags = rev.flags = LB_CONN_REDIRECT;
		if (a->flags & LB_BE_REMOTE) {
			fwd.nat_addr = t.daddr; /* the node's own address the client reached */
			rev.nat_addr = t.saddr;
			rev.nat_port = t.sport;
			r.daddr = t.daddr;
		}
	}
	if (lb_loopback && a->addr == t.saddr) {
		fwd.nat_addr = lb_loopback;
		fwd.flags |= LB_CONN_HAIRPIN;
		rev.nat_addr = t.saddr;
		rev.nat_port = t.sport;
		rev.flags |= LB_CONN_HAIRPIN;
		r.daddr = lb_loopback;
		lb_count(LB_HAIRPIN);
	}
	if (bpf_map_update_elem(&ct4, &t, &fwd, BPF_ANY) || bpf_map_update_elem(&rnat4, &r, &rev, BPF_ANY))
		return TC_ACT_SHOT;
	lb_count(LB_NEW);
	return lb_forward(skb, &t, &fwd);
}

#endif
