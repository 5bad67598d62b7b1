// SPDX-License-Identifier: (MIT OR GPL-2.0)
/*
 * The disaggregated build of seed 003's provider (attach kind "ebpf-chain"): one tc program
 * per cube of polycube.h, chained the way Polycube chains cubes.
 *
 *   - Each cube is its own program with its own maps (polycube.h's) and its own forward-chain
 *     map (<cube>_fwd: out-port -> peer), and parses the packet itself.
 *   - The in-port and the metadata flags travel in the packet's control buffer, marked by two
 *     magic words; a packet without them came from the device the cube is attached to (the ILB
 *     on each pod's host veth: the in-port is the veth's ifindex; the router on the VXLAN
 *     device; DISC-NAT on the underlay eth0). The mark is cleared when the packet leaves the
 *     chain, so that nothing after it takes a stale one for its own.
 *   - The post-processor (pc_forward) looks the out-port up in the cube's forward-chain map:
 *     a tail call to the peer cube's program through the node's patch panel (the PROG_ARRAY
 *     `panel`, indexed by enum pc_cube) with the peer's in-port, a bpf_redirect_peer into a pod,
 *     a bpf_redirect_neigh to a device (VXLAN, underlay), or a pass up the node's IP stack. A
 *     port with no peer drops (counted as the cube's drop).
 */
#include "polycube.h"

enum pc_action {
	PC_UNCONNECTED,
	PC_TAIL,           /* target: the peer cube's index in the panel; port: its in-port */
	PC_REDIRECT_PEER,  /* target: a pod's host veth */
	PC_REDIRECT_NEIGH, /* target: a device of the node */
	PC_PASS,           /* up the node's IP stack */
};

struct pc_peer {
	__u16 action;
	__u16 port;
	__u32 target;
};

struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, PC_CUBES);
	__type(key, __u32);
	__type(value, __u32);
} panel SEC(".maps");

#define PC_FWD(name, ports)                                                                        \
	struct {                                                                                   \
		__uint(type, BPF_MAP_TYPE_ARRAY);                                                  \
		__uint(max_entries, ports);                                                        \
		__type(key, __u32);                                                                \
		__type(value, struct pc_peer);                                                     \
	} name SEC(".maps")

PC_FWD(ilb_fwd, 65536); /* edge ports are ifindexes */
PC_FWD(fw_fwd, 2);
PC_FWD(rt_fwd, 4);
PC_FWD(elb_fwd, 2);
PC_FWD(nat_fwd, 2);

#define PC_MAGIC0 0x7063636e /* "pccn" */
#define PC_MAGIC1 0x9e3779b9

/* pc_in_port returns the packet's in-port (dev_port when it came from the device) and its
 * metadata flags. */
static __always_inline __u32 pc_in_port(struct __sk_buff *skb, __u32 dev_port, __u32 *flags)
{
	if (skb->cb[0] == PC_MAGIC0 && skb->cb[1] == PC_MAGIC1) {
		*flags = skb->cb[3];
		return skb->cb[2];
	}
	*flags = 0;
	return dev_port;
}

static __always_inline int pc_leave(struct __sk_buff *skb, int verdict)
{
	skb->cb[0] = 0;
	return verdict;
}

/* pc_forward is the post-processor: the cube function's verdict v (an out-port, PC_DROP or
 * PC_STACK) applied through the cube's forward-chain map. */
static __always_inline int pc_forward(struct __sk_buff *skb, void *fwd, void *stats, int v, __u32 flags)
{
	struct pc_peer *peer;
	__u32 port;

	if (v == PC_DROP)
		return pc_leave(skb, TC_ACT_SHOT);
	if (v < 0)
		return pc_leave(skb, TCX_NEXT);
	port = v;
	peer = bpf_map_lookup_elem(fwd, &port);
	if (peer) {
		switch (peer->action) {
		case PC_TAIL:
			skb->cb[0] = PC_MAGIC0;
			skb->cb[1] = PC_MAGIC1;
			skb->cb[2] = peer->port;
			skb->cb[3] = flags;
			bpf_tail_call(skb, &panel, peer->target);
			break; /* no program at that index */
		case PC_REDIRECT_PEER:
			return pc_leave(skb, bpf_redirect_peer(peer->target, 0));
		case PC_REDIRECT_NEIGH:
			return pc_leave(skb, bpf_redirect_neigh(peer->target, NULL, 0, 0));
		case PC_PASS:
			return pc_leave(skb, TCX_NEXT);
		}
	}
	pc_count(stats, PC_DROPS);
	return pc_leave(skb, TC_ACT_SHOT);
}

SEC("tc")
int pc_ilb(struct __sk_buff *skb)
{
	struct pc_pkt p = {};
	__u32 flags, in = pc_in_port(skb, skb->ingress_ifindex, &flags);
	int v;

	if (pc_parse(skb, &p))
		return pc_leave(skb, TCX_NEXT);
	v = ilb_process(skb, &p, in, &flags);
	return pc_forward(skb, &ilb_fwd, &ilb_stats, v, flags);
}

SEC("tc")
int pc_fw(struct __sk_buff *skb)
{
	struct pc_pkt p = {};
	__u32 flags, in = pc_in_port(skb, FW_PODS, &flags);
	int v;

	if (pc_parse(skb, &p))
		return pc_leave(skb, TCX_NEXT);
	v = fw_process(skb, &p, in, &flags);
	return pc_forward(skb, &fw_fwd, &fw_stats, v, flags);
}

SEC("tc")
int pc_router(struct __sk_buff *skb)
{
	struct pc_pkt p = {};
	__u32 flags, in = pc_in_port(skb, RT_VXLAN, &flags);

	if (pc_parse(skb, &p))
		return pc_leave(skb, TCX_NEXT);
	return pc_forward(skb, &rt_fwd, &rt_stats, rt_process(skb, &p, in), flags);
}

SEC("tc")
int pc_elb(struct __sk_buff *skb)
{
	struct pc_pkt p = {};
	__u32 flags, in = pc_in_port(skb, ELB_EXT, &flags);

	if (pc_parse(skb, &p))
		return pc_leave(skb, TCX_NEXT);
	return pc_forward(skb, &elb_fwd, &elb_stats, elb_process(skb, &p, in), flags);
}

SEC("tc")
int pc_discnat(struct __sk_buff *skb)
{
	struct pc_pkt p = {};
	__u32 flags, in = pc_in_port(skb, NAT_EXT, &flags);

	if (pc_parse(skb, &p))
		return pc_leave(skb, TCX_NEXT);
	return pc_forward(skb, &nat_fwd, &nat_stats, nat_process(skb, &p, in), flags);
}

char _license[] SEC("license") = "Dual MIT/GPL";
