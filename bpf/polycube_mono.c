// SPDX-License-Identifier: (MIT OR GPL-2.0)
/*
 * The monolithic build of seed 003's provider (attach kind "ebpf-mono"): the same cube
 * functions and maps as the disaggregated build (polycube.h), called in sequence by one
 * program per hook, the way a monolithic eBPF data plane (Cilium's cil_from_container,
 * cil_from_overlay, cil_from_netdev) is built:
 *
 *   pcm_from_pod  on each pod's host veth:  ILB -> [FW] -> router -> ...
 *   pcm_from_ovl  on the VXLAN device:      router -> ...
 *   pcm_from_net  on the underlay eth0:     DISC-NAT -> ELB -> router -> ...
 *
 * and after the router: to the pods, [FW] -> ILB -> bpf_redirect_peer; to VXLAN,
 * bpf_redirect_neigh to the VXLAN device; to the host, up the stack; to the physical side,
 * ELB -> DISC-NAT -> bpf_redirect_neigh to eth0 (or the stack). The packet is parsed once;
 * the metadata lives in local variables; the topology is the code (no tail call, no
 * forward-chain lookup). The firewall is in the path when mono_cfg says so (the disaggregated
 * build connects it through its forward-chain maps instead).
 */
#include "polycube.h"

/* The devices the monolith redirects to, set by the loader. */
volatile const __u32 vxlan_ifindex = 0;
volatile const __u32 eth0_ifindex = 0;

/* mono_cfg[0]: 1 = the firewall is in the path. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} mono_cfg SEC(".maps");

static __always_inline int pcm_fw_on(void)
{
	__u32 k = 0, *v = bpf_map_lookup_elem(&mono_cfg, &k);

	return v && *v;
}

/* pcm_verdict turns a function's PC_DROP or PC_STACK into the hook's verdict. */
static __always_inline int pcm_verdict(int v)
{
	return v == PC_DROP ? TC_ACT_SHOT : TCX_NEXT;
}

static __always_inline int pcm_route(struct __sk_buff *skb, struct pc_pkt *p, __u32 in_port, __u32 *flags, int fw)
{
	int v = rt_process(skb, p, in_port);

	switch (v) {
	case RT_PODS:
		if (fw) {
			v = fw_process(skb, p, FW_NET, flags);
			if (v < 0)
				return pcm_verdict(v);
		}
		v = ilb_process(skb, p, ILB_SERVER, flags);
		if (v < 0)
			return pcm_verdict(v);
		return bpf_redirect_peer(v, 0);
	case RT_VXLAN:
		return bpf_redirect_neigh(vxlan_ifindex, NULL, 0, 0);
	case RT_HOST:
		return TCX_NEXT;
	case RT_PHYS:
		v = elb_process(skb, p, ELB_INT);
		if (v < 0)
			return pcm_verdict(v);
		v = nat_process(skb, p, NAT_INT);
		if (v < 0)
			return pcm_verdict(v);
		return bpf_redirect_neigh(eth0_ifindex, NULL, 0, 0);
	}
	return pcm_verdict(v);
}

SEC("tc")
int pcm_from_pod(struct __sk_buff *skb)
{
	struct pc_pkt p = {};
	__u32 flags = 0;
	int fw, v;

	if (pc_parse(skb, &p))
		return TCX_NEXT;
	fw = pcm_fw_on();
	v = ilb_process(skb, &p, skb->ingress_ifindex, &flags);
	if (v < 0)
		return pcm_verdict(v);
	if (fw) {
		v = fw_process(skb, &p, FW_PODS, &flags);
		if (v < 0)
			return pcm_verdict(v);
	}
	return pcm_route(skb, &p, RT_PODS, &flags, fw);
}

SEC("tc")
int pcm_from_ovl(struct __sk_buff *skb)
{
	struct pc_pkt p = {};
	__u32 flags = 0;

	if (pc_parse(skb, &p))
		return TCX_NEXT;
	return pcm_route(skb, &p, RT_VXLAN, &flags, pcm_fw_on());
}

SEC("tc")
int pcm_from_net(struct __sk_buff *skb)
{
	struct pc_pkt p = {};
	__u32 flags = 0;
	int v;

	if (pc_parse(skb, &p))
		return TCX_NEXT;
	v = nat_process(skb, &p, NAT_EXT);
	if (v < 0)
		return pcm_verdict(v);
	v = elb_process(skb, &p, ELB_EXT);
	if (v < 0)
		return pcm_verdict(v);
	return pcm_route(skb, &p, RT_PHYS, &flags, pcm_fw_on());
}

char _license[] SEC("license") = "Dual MIT/GPL";
