// SPDX-License-Identifier: (MIT OR GPL-2.0)
/*
 * svc_lb: the lab's eBPF Service load balancer (proxy "ebpf"): lb.h's per-packet DNAT with a
 * connection table, as a tcx ingress program on every interface packets enter a node by
 * (each pod's host side, the overlay device, the underlay), first of the hook: the attach
 * kind's own programs, if any, see the packet after it.
 */
#include "lb.h"

SEC("tc")
int svc_lb(struct __sk_buff *skb)
{
	return lb_packet(skb);
}

char _license[] SEC("license") = "Dual MIT/GPL";
