// SPDX-License-Identifier: (MIT OR GPL-2.0)
/*
 * redirect_fw: the firewall half of the ebpf-redirect network function (seed 003's Polycube
 * firewall + pbforwarder, disaggregated). A tc (tcx ingress) program on both interfaces: what
 * the rules deny is dropped; what they allow (and ARP) tail-calls the forwarder, the program
 * in slot 0 of `next` (redirect_fwd.c, loaded separately). No forwarder: drop.
 */
#include <linux/pkt_cls.h>
#include "rules.h"

struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} next SEC(".maps");

SEC("tc")
int redirect_fw(struct __sk_buff *skb)
{
	if (!skb_allowed(skb))
		return TC_ACT_SHOT;
	bpf_tail_call(skb, &next, 0);
	return TC_ACT_SHOT;
}

char _license[] SEC("license") = "Dual MIT/GPL";
