// SPDX-License-Identifier: (MIT OR GPL-2.0)
/*
 * sock_lb: Service load balancing at connect time (Cilium's socket LB, proxy "ebpf-sock"),
 * cgroup/sock_addr programs on the cgroup of a lab node's pod processes, reading the same
 * Service table as the node's per-packet load balancer (lb_maps.h; the loader shares it):
 *
 *   connect4      connect() to a Service address: the socket is connected to a backend picked at
 *                 random instead, so no packet of the connection ever carries the Service
 *                 address and nothing on the path translates it;
 *   sendmsg4      sendto() of an unconnected UDP socket to a Service: the same, the backend kept
 *                 per socket;
 *   recvmsg4      replies of that backend are reported as coming from the Service;
 *   getpeername4  a connected socket reports the Service as its peer.
 *
 * A Service without backends refuses the connect() / sendto() (EPERM).
 */
#include <linux/bpf.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include "lb_maps.h"

#define SOCK_STREAM 1

struct sock_rev {
	struct lb_addr svc;
	struct lb_addr backend;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64); /* socket cookie */
	__type(value, struct sock_rev);
} sock_rev SEC(".maps");

enum sock_stat {
	SOCK_PICKED,     /* connect/sendto to a Service given a backend */
	SOCK_NO_BACKEND, /* refused: the Service has no backend */
	SOCK_STATS,
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SOCK_STATS);
	__type(key, __u32);
	__type(value, __u64);
} sock_stats SEC(".maps");

static __always_inline int count(__u32 stat, int verdict)
{
	__u64 *v = bpf_map_lookup_elem(&sock_stats, &stat);

	if (v)
		*v += 1;
	return verdict;
}

static __always_inline __u8 proto_of(struct bpf_sock_addr *ctx)
{
	return ctx->type == SOCK_STREAM ? IPPROTO_TCP : IPPROTO_UDP;
}

/* pick turns a destination that is a Service into one of its backends: 1 to go on, 0 to
 * refuse. keep reuses the backend the socket already has for that Service. */
static __always_inline int pick(struct bpf_sock_addr *ctx, int keep)
{
	struct lb_backend_key bk = {};
	struct sock_rev rev = {}, *old;
	struct lb_addr *a;
	struct lb_svc *s;
	__u64 cookie;

	bk.svc.addr = ctx->user_ip4;
	bk.svc.port = (__u16)ctx->user_port;
	bk.svc.proto = proto_of(ctx);
	s = bpf_map_lookup_elem(&services, &bk.svc);
	if (!s)
		return 1;
	cookie = bpf_get_socket_cookie(ctx);
	if (keep) {
		old = bpf_map_lookup_elem(&sock_rev, &cookie);
		if (old && old->svc.addr == bk.svc.addr && old->svc.port == bk.svc.port) {
			ctx->user_ip4 = old->backend.addr;
			ctx->user_port = old->backend.port;
			return 1;
		}
	}
	if (s->count == 0)
		return count(SOCK_NO_BACKEND, 0);
	bk.slot = bpf_get_prandom_u32() % s->count;
	a = bpf_map_lookup_elem(&backends, &bk);
	if (!a)
		return count(SOCK_NO_BACKEND, 0);
	rev.svc.addr = bk.svc.addr;
	rev.svc.port = bk.svc.port;
	rev.backend = *a;
	bpf_map_update_elem(&sock_rev, &cookie, &rev, BPF_ANY);
	ctx->user_ip4 = a->addr;
	ctx->user_port = a->port;
	return count(SOCK_PICKED, 1);
}

/* reverse reports a backend's address as the Service's. */
static __always_inline int reverse(struct bpf_sock_addr *ctx)
{
	__u64 cookie = bpf_get_socket_cookie(ctx);
	struct sock_rev *rev = bpf_map_lookup_elem(&sock_rev, &cookie);

	if (rev && rev->backend.addr == ctx->user_ip4 && rev->backend.port == (__u16)ctx->user_port) {
		ctx->user_ip4 = rev->svc.addr;
		ctx->user_port = rev->svc.port;
	}
	return 1;
}

SEC("cgroup/connect4")
int sock_connect4(struct bpf_sock_addr *ctx)
{
	return pick(ctx, 0);
}

SEC("cgroup/sendmsg4")
int sock_sendmsg4(struct bpf_sock_addr *ctx)
{
	return pick(ctx, 1);
}

SEC("cgroup/recvmsg4")
int sock_recvmsg4(struct bpf_sock_addr *ctx)
{
	return reverse(ctx);
}

SEC("cgroup/getpeername4")
int sock_getpeername4(struct bpf_sock_addr *ctx)
{
	return reverse(ctx);
}

char _license[] SEC("license") = "Dual MIT/GPL";
