// SPDX-License-Identifier: (MIT OR GPL-2.0)
/*
 * ep_fwd: the lab's Cilium-like pod forwarding (attach kind "ebpf"), two tcx ingress programs
 * sharing the node's endpoint table:
 *
 *   from_pod  on each pod's host-side veth (cil_from_container): to a pod of this node,
 *             bpf_redirect_peer straight into its namespace; to any other address of the
 *             cluster CIDR, a FIB lookup and bpf_redirect_neigh to the device and next hop the
 *             node's routes give (the VXLAN device for another node's pods); anything else
 *             goes up the node's IP stack.
 *   to_pod    on the node's other interfaces (the overlay device, the underlay;
 *             cil_from_overlay / cil_from_netdev): to a pod of this node, bpf_redirect_peer;
 *             else up the stack.
 *
 * A redirected packet is routed as the node's IP stack would route it (TTL decremented, MACs
 * rewritten) but skips it: netfilter never sees it. When the node's Services or policies are
 * enforced in the IP stack (iptables, nftables), the loader sets `stack` and both programs
 * pass everything up the stack, as Cilium does without BPF host routing.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#ifndef TCX_NEXT
#define TCX_NEXT -1
#endif
#define AF_INET 2

struct endpoint {
	__u32 ifindex; /* the pod's host-side veth */
	__u8 mac[6];   /* the pod's eth0 */
	__u8 host_mac[6];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32); /* the pod's IPv4 address */
	__type(value, struct endpoint);
} endpoints SEC(".maps");

/* config[0]: 1 = pass everything up the IP stack (Services or policies live there). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} config SEC(".maps");

enum fwd_stat {
	FWD_LOCAL,  /* redirected into a local pod */
	FWD_REMOTE, /* redirected to a device and next hop by the FIB */
	FWD_STACK,  /* passed up the node's IP stack */
	FWD_STATS,
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, FWD_STATS);
	__type(key, __u32);
	__type(value, __u64);
} fwd_stats SEC(".maps");

/* The cluster CIDR (network byte order), set by the loader. */
volatile const __u32 cluster_net = 0;
volatile const __u32 cluster_mask = 0;

static __always_inline int count(__u32 stat, int verdict)
{
	__u64 *v = bpf_map_lookup_elem(&fwd_stats, &stat);

	if (v)
		*v += 1;
	return verdict;
}

static __always_inline int stack_mode(void)
{
	__u32 k = 0;
	__u32 *v = bpf_map_lookup_elem(&config, &k);

	return v && *v;
}

/* ipv4 returns the packet's IPv4 header with at least the Ethernet and IP headers in reach,
 * or NULL. */
static __always_inline struct iphdr *ipv4(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data, *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = (void *)(eth + 1);

	if ((void *)(ip + 1) > end) {
		if (skb->len < sizeof(*eth) + sizeof(*ip) || bpf_skb_pull_data(skb, sizeof(*eth) + sizeof(*ip)))
			return NULL;
		data = (void *)(long)skb->data;
		end = (void *)(long)skb->data_end;
		eth = data;
		ip = (void *)(eth + 1);
		if ((void *)(ip + 1) > end)
			return NULL;
	}
	if (eth->h_proto != bpf_htons(ETH_P_IP) || ip->version != 4)
		return NULL;
	return ip;
}

/* dec_ttl decrements the TTL as a router does; 0 when the packet may go on. */
static __always_inline int dec_ttl(struct __sk_buff *skb, struct iphdr *ip)
{
	__u16 old = *(__u16 *)&ip->ttl, new;

	if (ip->ttl <= 1)
		return -1;
	ip->ttl--;
	new = *(__u16 *)&ip->ttl;
	return bpf_l3_csum_replace(skb, ETH_HLEN + __builtin_offsetof(struct iphdr, check), old, new, 2);
}

/* local delivers the packet into a pod of this node, when it is for one: a verdict, or -1. */
static __always_inline int local(struct __sk_buff *skb, struct iphdr *ip)
{
	struct endpoint *ep = bpf_map_lookup_elem(&endpoints, &ip->daddr);

	if (!ep)
		return -1;
	if (dec_ttl(skb, ip))
		return count(FWD_STACK, TCX_NEXT); /* the stack answers with ICMP */
	if (bpf_skb_store_bytes(skb, 0, ep->mac, 6, 0) || bpf_skb_store_bytes(skb, 6, ep->host_mac, 6, 0))
		return TC_ACT_SHOT;
	return count(FWD_LOCAL, bpf_redirect_peer(ep->ifindex, 0));
}

SEC("tc")
int from_pod(struct __sk_buff *skb)
{
	struct bpf_fib_lookup fib = {};
	struct bpf_redir_neigh nh = {};
	struct iphdr *ip;
	__u32 daddr;
	int v;

	if (stack_mode() || !(ip = ipv4(skb)))
		return count(FWD_STACK, TCX_NEXT);
	v = local(skb, ip);
	if (v != -1)
		return v;
	/* local may have pulled data: look again */
	if (!(ip = ipv4(skb)))
		return count(FWD_STACK, TCX_NEXT);
	daddr = ip->daddr;
	if ((daddr & cluster_mask) != cluster_net)
		return count(FWD_STACK, TCX_NEXT);
	fib.family = AF_INET;
	fib.tos = ip->tos;
	fib.l4_protocol = ip->protocol;
	/* No tot_len: the helper then checks the skb against the egress MTU itself, which lets
	 * GSO packets (up to 64 KB from a pod's TCP) through; with tot_len it refuses them. */
	fib.ipv4_src = ip->saddr;
	fib.ipv4_dst = daddr;
	fib.ifindex = skb->ingress_ifindex;
	v = bpf_fib_lookup(skb, &fib, sizeof(fib), 0);
	if (v != BPF_FIB_LKUP_RET_SUCCESS && v != BPF_FIB_LKUP_RET_NO_NEIGH)
		return count(FWD_STACK, TCX_NEXT); /* local, unreachable, too big: the stack decides */
	if (dec_ttl(skb, ip))
		return count(FWD_STACK, TCX_NEXT);
	nh.nh_family = AF_INET;
	nh.ipv4_nh = fib.ipv4_dst; /* the next hop the lookup found */
	return count(FWD_REMOTE, bpf_redirect_neigh(fib.ifindex, &nh, sizeof(nh), 0));
}

SEC("tc")
int to_pod(struct __sk_buff *skb)
{
	struct iphdr *ip;
	int v;

	if (stack_mode() || !(ip = ipv4(skb)))
		return TCX_NEXT;
	v = local(skb, ip);
	return v == -1 ? TCX_NEXT : v;
}

char _license[] SEC("license") = "Dual MIT/GPL";
