// SPDX-License-Identifier: (MIT OR GPL-2.0)
/*
 * xdp_vnf: the packet-forwarding VNF of `cnibench pkt xfwd` (internal/pktengine/xfwd.go loads
 * it), attached to a pod's interface. Every IPv4 UDP datagram to the interface's own address
 * (own_addr) on port is sent on to the next target, taken in turn datagram by datagram: its
 * destination address and port become the target's, its source address own_addr, its source
 * MAC the interface's (own_mac) and its destination MAC the target's next hop's (resolved by
 * the loader); TTL is decremented, the IPv4 header checksum and a UDP checksum that is not 0
 * ("none", left so) are updated incrementally, and the frame goes back out of the interface it
 * came in by (XDP_TX). Everything else goes on to the stack (XDP_PASS): ARP, other protocols
 * and ports, IP fragments, a datagram whose TTL would run out.
 *
 * Set by the loader before the program loads: own_addr and port (network order), own_mac,
 * n_targets (1..MAX_TARGETS, the entries of targets in use).
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define MAX_TARGETS 64

struct target {
	__be32 addr;  /* network order */
	__be16 port;  /* network order */
	__u8 mac[6];  /* the next hop's towards addr */
};

struct counter {
	__u64 packets;
	__u64 bytes; /* IPv4 bytes: headers and payload */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_TARGETS);
	__type(key, __u32);
	__type(value, struct target);
} targets SEC(".maps");

/* What went to each target (per CPU: the loader sums them). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MAX_TARGETS);
	__type(key, __u32);
	__type(value, struct counter);
} counters SEC(".maps");

/* The round robin's counter, shared by every CPU (one atomic add per datagram): the datagrams
 * go to the targets in turn whichever CPU receives them. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} turn SEC(".maps");

volatile const __be32 own_addr = 0;
volatile const __be16 port = 0;
volatile const __u8 own_mac[6] = {};
volatile const __u32 n_targets = 1;

/* csum_replace updates a 16-bit one's complement checksum for a change of one 16-bit word from
 * old to new (RFC 1624, eqn. 3); raw network-order words in, raw out. */
static __always_inline __u16 csum_replace(__u16 check, __u16 old, __u16 new)
{
	__u32 s = (__u16)~check + (__u16)~old + (__u32) new;

	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return ~s;
}

static __always_inline __u16 csum_replace4(__u16 check, __be32 old, __be32 new)
{
	check = csum_replace(check, old & 0xffff, new & 0xffff);
	return csum_replace(check, old >> 16, new >> 16);
}

SEC("xdp")
int xdp_vnf(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = (void *)(eth + 1);

	if ((void *)(ip + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP) || ip->version != 4 || ip->ihl < 5 ||
	    ip->protocol != IPPROTO_UDP || ip->daddr != own_addr)
		return XDP_PASS;
	/* A fragment (more fragments, or an offset) goes to the stack, which reassembles it. */
	if (ip->frag_off & bpf_htons(0x3fff))
		return XDP_PASS;
	struct udphdr *udp = (void *)ip + ip->ihl * 4;
	if ((void *)(udp + 1) > end || udp->dest != port)
		return XDP_PASS;
	if (ip->ttl <= 1) /* forwarded, it would die: the stack has it (it is for this address) */
		return XDP_PASS;

	__u32 zero = 0;
	__u64 *t = bpf_map_lookup_elem(&turn, &zero);
	if (!t)
		return XDP_PASS;
	__u32 i = __sync_fetch_and_add(t, 1) % n_targets;
	struct target *to = bpf_map_lookup_elem(&targets, &i);
	struct counter *c = bpf_map_lookup_elem(&counters, &i);
	if (!to || !c)
		return XDP_PASS;

	__u16 old_ttl = *(__u16 *)&ip->ttl; /* ttl and protocol: one checksum word */
	ip->ttl--;
	__u16 check = csum_replace(ip->check, old_ttl, *(__u16 *)&ip->ttl);
	check = csum_replace4(check, ip->saddr, own_addr);
	ip->check = csum_replace4(check, ip->daddr, to->addr);
	if (udp->check) {
		check = csum_replace4(udp->check, ip->saddr, own_addr);
		check = csum_replace4(check, ip->daddr, to->addr);
		check = csum_replace(check, udp->dest, to->port);
		udp->check = check ? check : 0xffff; /* 0 would say "no checksum" */
	}
	ip->saddr = own_addr;
	ip->daddr = to->addr;
	udp->dest = to->port;
	__builtin_memcpy(eth->h_dest, to->mac, ETH_ALEN);
	for (int k = 0; k < ETH_ALEN; k++) /* volatile reads: the loader's value, not the initializer's */
		eth->h_source[k] = own_mac[k];

	c->packets++;
	c->bytes += bpf_ntohs(ip->tot_len);
	return XDP_TX;
}

char _license[] SEC("license") = "Dual MIT/GPL";
