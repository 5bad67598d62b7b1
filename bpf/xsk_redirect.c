// SPDX-License-Identifier: (MIT OR GPL-2.0)
/*
 * xsk_redirect: hands every frame an interface receives to the AF_XDP socket bound to the
 * frame's receive queue (the userspace-afxdp network function). The socket's owner runs the
 * rule set in user space and sends what it allows out of the other interface. A frame of a
 * queue without a socket is dropped: nothing reaches the network function's own stack.
 *
 * The loader loads one copy of the program (and so one XSKMAP) per interface.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#define MAX_QUEUES 64

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, MAX_QUEUES);
	__type(key, __u32);
	__type(value, __u32);
} xsks SEC(".maps");

SEC("xdp")
int xsk_redirect(struct xdp_md *ctx)
{
	/* The low bits of flags are the action when the map has no socket at the key. */
	return bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_DROP);
}

char _license[] SEC("license") = "Dual MIT/GPL";
