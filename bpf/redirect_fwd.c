// SPDX-License-Identifier: (MIT OR GPL-2.0)
/*
 * redirect_fwd: the forwarder half of the ebpf-redirect network function, reached by tail call
 * from redirect_fw. It looks the packet's ingress interface up in `fwd` (ingress ifindex ->
 * egress ifindex) and redirects it there; an interface with no entry drops.
 */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16);
	__type(key, __u32);
	__type(value, __u32);
} fwd SEC(".maps");

SEC("tc")
int redirect_fwd(struct __sk_buff *skb)
{
	__u32 in = skb->ingress_ifindex;
	__u32 *out = bpf_map_lookup_elem(&fwd, &in);

	if (!out)
		return TC_ACT_SHOT;
	return bpf_redirect(*out, 0);
}

char _license[] SEC("license") = "Dual MIT/GPL";
