// SPDX-License-Identifier: (MIT OR GPL-2.0)
/*
 * xdp_fw: the rule set as an XDP program on both interfaces of a network function.
 * mode MODE_REDIRECT (the xdp kind): what the rules allow (and ARP) is redirected to the other
 * interface, in_ifindex <-> out_ifindex. mode MODE_PASS (Filter): what they allow goes on to
 * the stack (or an AF_PACKET socket). Denied: XDP_DROP. The program accepts multi-buffer
 * frames (xdp.frags), so the veth peer keeps its GSO packets; only the first buffer's headers
 * are read.
 */
#include "rules.h"

enum fw_mode {
	MODE_REDIRECT = 0, /* allowed: to the other interface */
	MODE_PASS = 1,     /* allowed: on to the stack */
};

volatile const enum fw_mode mode = MODE_REDIRECT;
volatile const __u32 in_ifindex = 0;
volatile const __u32 out_ifindex = 0;

SEC("xdp.frags")
int xdp_fw(struct xdp_md *ctx)
{
	struct scan s = {};

	switch (parse((void *)(long)ctx->data, (void *)(long)ctx->data_end, &s)) {
	case PKT_ARP:
		break;
	case PKT_IPV4:
		if (!rules_allow(&s))
			return XDP_DROP;
		break;
	default:
		return XDP_DROP;
	}
	if (mode == MODE_PASS)
		return XDP_PASS;
	return bpf_redirect(ctx->ingress_ifindex == in_ifindex ? out_ifindex : in_ifindex, 0);
}

char _license[] SEC("license") = "Dual MIT/GPL";
