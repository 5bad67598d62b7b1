/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/*
 * The lab's eBPF NetworkPolicy logic (Cilium's scheme), shared by the programs that include it;
 * each compiled object gets maps of its own:
 *
 *   pol_eps    local pod address -> endpoint id and which directions are isolated
 *   ipcache    LPM: address prefix -> identity (the longest prefix decides)
 *   pol_rules  LPM: (endpoint, direction, identity, protocol, port) -> admit; a rule's prefix
 *              stops before the protocol (any protocol) or inside the port (port ranges);
 *              identity 0 is the wildcard (a rule admitting any peer), looked up second
 *   pol_ct     LRU: connections admitted (first packet's tuple): later packets and replies pass
 *   pol_stats  per-CPU counters (enum pol_stat)
 *
 * pol_judge decides on one packet's tuple: the first packet of a connection from an isolated
 * local pod needs a rule of its egress, one to an isolated local pod a rule of its ingress (both
 * for a packet between two local pods); denied packets are dropped (TC_ACT_SHOT). Every
 * connection of a local pod with a firewall is tracked, so that its replies pass whatever the
 * pod's policies say about their direction. Users: bpf/policy.c (pol_check, policy "ebpf") and
 * the firewall cube of bpf/polycube.h.
 */
#ifndef CNIBENCH_POL_H
#define CNIBENCH_POL_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/in.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#ifndef TCX_NEXT
#define TCX_NEXT -1
#endif
#define IPPROTO_SCTP_ 132

struct pol_ep {
	__u32 id;
	__u8 ingress, egress; /* isolated directions */
	__u8 pad[2];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, struct pol_ep);
} pol_eps SEC(".maps");

struct ipc_key {
	__u32 prefixlen;
	__u32 addr;
};

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 262144);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct ipc_key);
	__type(value, __u32);
} ipcache SEC(".maps");

struct rule_key {
	__u32 prefixlen; /* 72: any protocol; 80: any port; 80 + n: the port's top n bits */
	__u32 ep;
	__u32 identity;
	__u8 egress;
	__u8 proto;
	__u16 port; /* network byte order */
};

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 1048576);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct rule_key);
	__type(value, __u8);
} pol_rules SEC(".maps");

struct pol_tuple {
	__u32 saddr, daddr;
	__u16 sport, dport;
	__u8 proto;
	__u8 pad[3];
};

/* Admitted connections: when last seen (bpf_ktime_get_ns). Lifetimes since the last packet as
 * the load balancer's (lb.h): TCP 6 h, but a TCP SYN is always judged afresh; others 60 s. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct pol_tuple);
	__type(value, __u64);
} pol_ct SEC(".maps");

#define POL_LIFETIME_TCP (21600ULL * 1000000000ULL)
#define POL_LIFETIME_OTHER (60ULL * 1000000000ULL)

enum pol_stat {
	POL_ADMITTED,    /* first packets admitted by a rule */
	POL_DENIED,      /* first packets dropped */
	POL_ESTABLISHED, /* packets of admitted connections (and replies) */
	POL_STATS,
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, POL_STATS);
	__type(key, __u32);
	__type(value, __u64);
} pol_stats SEC(".maps");

static __always_inline int pol_count(__u32 stat, int verdict)
{
	__u64 *v = bpf_map_lookup_elem(&pol_stats, &stat);

	if (v)
		*v += 1;
	return verdict;
}

/* pol_tuple_of reads the packet's addresses, protocol and ports (0 when it has none: not
 * TCP/UDP/SCTP, or a later fragment): 0, or 1 when the headers are not all in reach, or -1
 * when it is not IPv4. *syn is set for a TCP SYN without ACK. */
static __always_inline int pol_tuple_of(void *data, void *end, struct pol_tuple *t, int *syn)
{
	struct ethhdr *eth = data;
	struct iphdr *ip = (void *)(eth + 1);
	__u16 *ports;
	__u32 hl;

	if ((void *)(ip + 1) > end)
		return 1;
	if (eth->h_proto != bpf_htons(ETH_P_IP) || ip->version != 4 || ip->ihl < 5)
		return -1;
	t->saddr = ip->saddr;
	t->daddr = ip->daddr;
	t->proto = ip->protocol;
	t->sport = 0;
	t->dport = 0;
	*syn = 0;
	if ((t->proto != IPPROTO_TCP && t->proto != IPPROTO_UDP && t->proto != IPPROTO_SCTP_) ||
	    (ip->frag_off & bpf_htons(0x1fff)))
		return 0;
	hl = ip->ihl * 4;
	if (hl > 60)
		return -1;
	ports = (void *)ip + hl;
	if ((void *)(ports + 2) > end)
		return 1;
	t->sport = ports[0];
	t->dport = ports[1];
	if (t->proto == IPPROTO_TCP) {
		__u8 *flags = (__u8 *)ports + 13;

		if ((void *)(flags + 1) > end)
			return 1;
		*syn = (*flags & 0x12) == 0x02;
	}
	return 0;
}

static __always_inline int pol_parse(struct __sk_buff *skb, struct pol_tuple *t, int *syn)
{
	int r = pol_tuple_of((void *)(long)skb->data, (void *)(long)skb->data_end, t, syn);

	if (r <= 0)
		return r;
	if (bpf_skb_pull_data(skb, skb->len < ETH_HLEN + 74 ? skb->len : ETH_HLEN + 74))
		return -1;
	return pol_tuple_of((void *)(long)skb->data, (void *)(long)skb->data_end, t, syn) ? -1 : 0;
}

/* pol_established says whether the tuple belongs to an admitted connection still alive. */
static __always_inline int pol_established(const struct pol_tuple *t, __u64 now)
{
	__u64 *seen = bpf_map_lookup_elem(&pol_ct, t);
	__u64 life = t->proto == IPPROTO_TCP ? POL_LIFETIME_TCP : POL_LIFETIME_OTHER;

	if (!seen || now - *seen > life)
		return 0;
	if (now - *seen > 1000000000ULL)
		*seen = now;
	return 1;
}

static __always_inline __u32 pol_identity(__u32 addr)
{
	struct ipc_key k = {.prefixlen = 32, .addr = addr};
	__u32 *id = bpf_map_lookup_elem(&ipcache, &k);

	return id ? *id : 0;
}

/* pol_admits looks the packet up with its far end's identity, then with the wildcard identity 0
 * (a rule admitting any peer). */
static __always_inline int pol_admits(__u32 ep, __u8 egress, __u32 peer, const struct pol_tuple *t)
{
	struct rule_key k = {
		.prefixlen = 96,
		.ep = ep,
		.identity = pol_identity(peer),
		.egress = egress,
		.proto = t->proto,
		.port = t->dport,
	};

	if (bpf_map_lookup_elem(&pol_rules, &k))
		return 1;
	k.identity = 0;
	return bpf_map_lookup_elem(&pol_rules, &k) != NULL;
}

/* pol_judge decides on a packet of tuple t (syn: a TCP SYN without ACK): TCX_NEXT to let it
 * pass, TC_ACT_SHOT to drop it. */
static __always_inline int pol_judge(const struct pol_tuple *t, int syn)
{
	struct pol_tuple r = {};
	struct pol_ep *src, *dst;
	int checked = 0;
	__u64 now;

	now = bpf_ktime_get_ns();
	r.saddr = t->daddr;
	r.daddr = t->saddr;
	r.sport = t->dport;
	r.dport = t->sport;
	r.proto = t->proto;
	if (!syn && (pol_established(t, now) || pol_established(&r, now)))
		return pol_count(POL_ESTABLISHED, TCX_NEXT);
	src = bpf_map_lookup_elem(&pol_eps, &t->saddr);
	if (src && src->egress) {
		if (!pol_admits(src->id, 1, t->daddr, t))
			return pol_count(POL_DENIED, TC_ACT_SHOT);
		checked = 1;
	}
	dst = bpf_map_lookup_elem(&pol_eps, &t->daddr);
	if (dst && dst->ingress) {
		if (!pol_admits(dst->id, 0, t->saddr, t))
			return pol_count(POL_DENIED, TC_ACT_SHOT);
		checked = 1;
	}
	if (!src && !dst)
		return TCX_NEXT;
	/* A connection of a local pod with a firewall is tracked even when this direction was not
	 * checked: its replies must pass that pod's other direction. */
	bpf_map_update_elem(&pol_ct, t, &now, BPF_ANY);
	return checked ? pol_count(POL_ADMITTED, TCX_NEXT) : TCX_NEXT;
}

#endif
