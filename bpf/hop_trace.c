// SPDX-License-Identifier: (MIT OR GPL-2.0)
/*
 * hop_trace: `--trace hops` (internal/hoptrace loads it). One copy per attach point: the tcx
 * ingress or egress hook of one device of a trial's path, first in its hook. It stamps a sample
 * of the TCP segments that pass with the kernel's monotonic clock, keyed by the segment's
 * identity and the point: the identity is a hash of the addresses, ports, sequence and
 * acknowledgement numbers of the innermost IPv4/TCP header (a VXLAN frame on the underlay is
 * looked into: outer IPv4/UDP to a tunnel port, VXLAN, inner Ethernet), the same at every
 * device a segment crosses, so user space can line one segment's stamps up in time and take
 * the differences: the time from one point to the next. A segment is sampled when its hash
 * has sample_bits low zero bits, at every point alike (so each is stamped everywhere or
 * nowhere). The first stamp of a key stays (BPF_NOEXIST: a retransmission of the same
 * segment is not stamped again). It never changes the packet nor its fate (TC_ACT_UNSPEC, tcx's TCX_NEXT: the next program decides).
 *
 * Set by the loader: point (the attach point's index), l2 (1: frames start with an Ethernet
 * header; 0: with the IP header, a device without one), sample_bits, tunnel_port1/2 (the VXLAN
 * ports to look into, network order; 0: none).
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

volatile const __u32 point = 0;
volatile const __u8 l2 = 1;
volatile const __u8 sample_bits = 6;
volatile const __be16 tunnel_port1 = 0;
volatile const __be16 tunnel_port2 = 0;

struct stamp_key {
	__u64 pkt;
	__u32 point;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1 << 18);
	__type(key, struct stamp_key);
	__type(value, __u64);
} stamps SEC(".maps");

/* mix is a 64-bit finaliser (MurmurHash3's fmix64). */
static __always_inline __u64 mix(__u64 h)
{
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ULL;
	h ^= h >> 33;
	return h;
}

/* ipv4_at reads the IPv4 header at off; it returns the offset of its payload, or -1. */
static __always_inline int ipv4_at(struct __sk_buff *skb, int off, struct iphdr *ip)
{
	if (bpf_skb_load_bytes(skb, off, ip, sizeof(*ip)) < 0)
		return -1;
	if (ip->version != 4 || ip->ihl < 5)
		return -1;
	if (ip->frag_off & bpf_htons(0x1fff)) /* not the first fragment: no transport header */
		return -1;
	return off + ip->ihl * 4;
}

SEC("tc")
int hop_trace(struct __sk_buff *skb)
{
	struct iphdr ip;
	int off = 0;

	if (l2) {
		__be16 proto;
		if (bpf_skb_load_bytes(skb, 12, &proto, sizeof(proto)) < 0 || proto != bpf_htons(ETH_P_IP))
			return TC_ACT_UNSPEC;
		off = ETH_HLEN;
	} else if (skb->protocol != bpf_htons(ETH_P_IP)) {
		return TC_ACT_UNSPEC;
	}
	off = ipv4_at(skb, off, &ip);
	if (off < 0)
		return TC_ACT_UNSPEC;
	if (ip.protocol == IPPROTO_UDP && (tunnel_port1 || tunnel_port2)) {
		struct udphdr udp;
		__be16 proto;
		if (bpf_skb_load_bytes(skb, off, &udp, sizeof(udp)) < 0)
			return TC_ACT_UNSPEC;
		if (udp.dest != tunnel_port1 && udp.dest != tunnel_port2)
			return TC_ACT_UNSPEC;
		off += sizeof(udp) + 8; /* VXLAN's header */
		if (bpf_skb_load_bytes(skb, off + 12, &proto, sizeof(proto)) < 0 || proto != bpf_htons(ETH_P_IP))
			return TC_ACT_UNSPEC;
		off = ipv4_at(skb, off + ETH_HLEN, &ip);
		if (off < 0)
			return TC_ACT_UNSPEC;
	}
	if (ip.protocol != IPPROTO_TCP)
		return TC_ACT_UNSPEC;
	struct {
		__be16 source, dest;
		__be32 seq, ack_seq;
	} tcp;
	if (bpf_skb_load_bytes(skb, off, &tcp, sizeof(tcp)) < 0)
		return TC_ACT_UNSPEC;
	__u64 h = mix(((__u64)ip.saddr << 32) | ip.daddr);
	h = mix(h ^ (((__u64)tcp.source << 16) | tcp.dest));
	h = mix(h ^ (((__u64)tcp.seq << 32) | tcp.ack_seq));
	if (h & ((1ULL << sample_bits) - 1))
		return TC_ACT_UNSPEC;
	struct stamp_key k = {.pkt = h, .point = point};
	__u64 now = bpf_ktime_get_ns();
	bpf_map_update_elem(&stamps, &k, &now, BPF_NOEXIST);
	return TC_ACT_UNSPEC;
}

char _license[] SEC("license") = "Dual MIT/GPL";
