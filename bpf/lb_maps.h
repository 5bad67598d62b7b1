/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/*
 * The Service table every eBPF load balancer of the lab reads (lb.h per packet at tc,
 * sock_lb.c at connect time): a program that includes this gets the two maps; a loader that
 * wants two programs to share one table hands the second the first one's maps.
 *
 *   services  (addr, port, proto) of a Service port  -> how many backends it has
 *   backends  (the service key, slot 0..count-1)      -> backend (addr, port)
 *
 * Addresses and ports in network byte order.
 */
#ifndef CNIBENCH_LB_MAPS_H
#define CNIBENCH_LB_MAPS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#define LB_MAX_SERVICES 65536
#define LB_MAX_BACKENDS 262144

struct lb_svc_key {
	__u32 addr;
	__u16 port;
	__u8 proto;
	__u8 pad;
};

struct lb_svc {
	__u32 count; /* backends in slots 0..count-1 */
	__u32 flags;
};

#define LB_SVC_NODEPORT 1 /* the key is a node's address and a NodePort */

struct lb_backend_key {
	struct lb_svc_key svc;
	__u32 slot;
};

struct lb_addr {
	__u32 addr;
	__u16 port;
	__u16 flags; /* backends: LB_BE_REMOTE */
};

#define LB_BE_REMOTE 1 /* the backend is on another node */

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, LB_MAX_SERVICES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct lb_svc_key);
	__type(value, struct lb_svc);
} services SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, LB_MAX_BACKENDS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct lb_backend_key);
	__type(value, struct lb_addr);
} backends SEC(".maps");

#endif
