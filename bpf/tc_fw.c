// SPDX-License-Identifier: (MIT OR GPL-2.0)
/*
 * tc_fw: the rule set as a tc (tcx ingress) program on both interfaces of a network function:
 * what the rules allow (and ARP) is redirected to the egress of the other interface,
 * in_ifindex <-> out_ifindex; the rest is dropped.
 */
#include <linux/pkt_cls.h>
#include "rules.h"

volatile const __u32 in_ifindex = 0;
volatile const __u32 out_ifindex = 0;

SEC("tc")
int tc_fw(struct __sk_buff *skb)
{
	if (!skb_allowed(skb))
		return TC_ACT_SHOT;
	return bpf_redirect(skb->ifindex == in_ifindex ? out_ifindex : in_ifindex, 0);
}

char _license[] SEC("license") = "Dual MIT/GPL";
