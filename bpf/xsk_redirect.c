// SPDX-License-Identifier: (MIT OR GPL-2.0)
/*
 * xsk_redirect: hands the frames an interface receives to the AF_XDP socket bound to the
 * frame's receive queue (internal/xsk loads it: the userspace-afxdp network function and the
 * packet engine's af_xdp receiver).
 *
 * udp4_only (set by the loader before the program loads):
 *   0: every frame goes to the socket; a frame of a queue without a socket is dropped, so
 *      nothing reaches the interface's own stack (the network function forwards ARP itself);
 *   1: only IPv4 UDP frames go to the socket (the packet engine's receiver: the generator's
 *      frames); the rest, ARP above all, and the frames of a queue without a socket go on to
 *      the stack.
 *
 * The loader loads one copy of the program (and so one XSKMAP) per interface.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define MAX_QUEUES 64

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, MAX_QUEUES);
	__type(key, __u32);
	__type(value, __u32);
} xsks SEC(".maps");

volatile const __u8 udp4_only = 0;

SEC("xdp")
int xsk_redirect(struct xdp_md *ctx)
{
	if (!udp4_only)
		/* The low bits of flags are the action when the map has no socket at the key. */
		return bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_DROP);

	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = (void *)(eth + 1);

	if ((void *)(ip + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP) || ip->protocol != IPPROTO_UDP)
		return XDP_PASS;
	return bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);
}

char _license[] SEC("license") = "Dual MIT/GPL";
