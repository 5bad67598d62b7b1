/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/*
 * The rule table every cnibench firewall program shares, and its first-match scan.
 *
 * The rules are nf.RuleSet in order, one entry per rule in the ARRAY map `rules` (index =
 * position); the loader sets `rule_count` before loading. A packet walks the table from
 * index 0 with bpf_loop until a rule matches (its action decides) or the table ends (drop),
 * so a packet pays for every rule before the one that decides it, as in an iptables chain:
 * this is the cost the benchmark sweeps. ARP passes, other non-IPv4 frames are dropped.
 * Addresses, masks and ports are kept in network byte order, as they are in the packet.
 */
#ifndef CNIBENCH_RULES_H
#define CNIBENCH_RULES_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define MAX_RULES 100000 /* nf.MaxRules; the loader sizes the map to the rule set */

#define PROTO_TCP 6
#define PROTO_UDP 17
#define IP_FRAG_OFFSET 0x1fff

enum rule_action {
	RULE_DROP = 0,
	RULE_ALLOW = 1,
	RULE_NEVER = 2, /* a rule no IPv4 packet matches (its prefix is not IPv4) */
};

struct rule {
	__u32 src, src_mask; /* src is already masked */
	__u32 dst, dst_mask;
	__u16 sport, dport; /* 0: any port */
	__u8 proto;
	__u8 action; /* enum rule_action */
	__u8 pad[2];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_RULES);
	__type(key, __u32);
	__type(value, struct rule);
} rules SEC(".maps");

/* How many entries of `rules` are in use (set by the loader). */
volatile const __u32 rule_count = 0;

/* The fields a rule looks at, and the scan's result. */
struct scan {
	__u32 saddr, daddr;
	__u16 sport, dport; /* 0 when the packet has none (not TCP/UDP, or a later fragment) */
	__u8 proto;
	__u8 allow;
	__u8 pad[2];
};

enum pkt_kind {
	PKT_DROP,  /* not IPv4 nor ARP, or malformed */
	PKT_IPV4,  /* IPv4: the rules decide */
	PKT_ARP,   /* ARP: passes */
	PKT_SHORT, /* the headers end beyond the data at hand */
};

/* parse classifies the frame [data, end) and fills s for IPv4. */
static __always_inline enum pkt_kind parse(void *data, void *end, struct scan *s)
{
	struct ethhdr *eth = data;
	struct iphdr *ip;
	__u16 *ports;

	if ((void *)(eth + 1) > end)
		return PKT_SHORT;
	if (eth->h_proto == bpf_htons(ETH_P_ARP))
		return PKT_ARP;
	if (eth->h_proto != bpf_htons(ETH_P_IP))
		return PKT_DROP;
	ip = (void *)(eth + 1);
	if ((void *)(ip + 1) > end)
		return PKT_SHORT;
	if (ip->version != 4 || ip->ihl < 5)
		return PKT_DROP;
	s->saddr = ip->saddr;
	s->daddr = ip->daddr;
	s->proto = ip->protocol;
	s->sport = 0;
	s->dport = 0;
	s->allow = 0;
	/* Ports only for TCP and UDP, and not in a later fragment (which carries none). */
	if ((s->proto != PROTO_TCP && s->proto != PROTO_UDP) || (ip->frag_off & bpf_htons(IP_FRAG_OFFSET)))
		return PKT_IPV4;
	ports = (void *)ip + ip->ihl * 4;
	if ((void *)(ports + 2) > end)
		return PKT_SHORT;
	s->sport = ports[0];
	s->dport = ports[1];
	return PKT_IPV4;
}

static long scan_one(__u32 i, void *data)
{
	struct scan *s = data;
	struct rule *r = bpf_map_lookup_elem(&rules, &i);

	if (!r)
		return 1;
	if (r->action == RULE_NEVER || r->proto != s->proto ||
	    (s->saddr & r->src_mask) != r->src || (s->daddr & r->dst_mask) != r->dst ||
	    (r->sport && r->sport != s->sport) || (r->dport && r->dport != s->dport))
		return 0; /* next rule */
	s->allow = r->action == RULE_ALLOW;
	return 1; /* first match decides */
}

/* rules_allow is the rule set's verdict for the IPv4 packet s: first match, else drop. */
static __always_inline int rules_allow(struct scan *s)
{
	s->allow = 0;
	bpf_loop(rule_count, scan_one, s, 0);
	return s->allow;
}

/* classify_skb parses a tc program's packet, pulling the headers into the linear part when
 * they are not there yet. */
static __always_inline enum pkt_kind classify_skb(struct __sk_buff *skb, struct scan *s)
{
	enum pkt_kind k = parse((void *)(long)skb->data, (void *)(long)skb->data_end, s);
	__u32 want;

	if (k != PKT_SHORT)
		return k;
	want = sizeof(struct ethhdr) + 60 + 4; /* the longest IPv4 header and the ports */
	if (skb->len < want)
		want = skb->len;
	if (bpf_skb_pull_data(skb, want))
		return PKT_DROP;
	k = parse((void *)(long)skb->data, (void *)(long)skb->data_end, s);
	return k == PKT_SHORT ? PKT_DROP : k;
}

/* skb_allowed is the firewall's decision for a tc program's packet. */
static __always_inline int skb_allowed(struct __sk_buff *skb)
{
	struct scan s = {};

	switch (classify_skb(skb, &s)) {
	case PKT_ARP:
		return 1;
	case PKT_IPV4:
		return rules_allow(&s);
	default:
		return 0;
	}
}

#endif
