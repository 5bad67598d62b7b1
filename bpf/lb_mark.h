/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/*
 * The marks the per-packet Service load balancer (lb.h) leaves in a packet's control buffer for
 * the programs after it at the same tcx hook (the policy engine):
 *
 *   reply    it has turned a reply back into the Service's address (the reply's tuple is no
 *            longer the one the policy engine admitted);
 *   hairpin  the packet belongs to a hairpin connection, a pod reaching itself through a
 *            Service, whose source the load balancer translated to its service loopback
 *            address: the policy engine lets it pass as it lets a pod's traffic to itself
 *            pass (Cilium skips policy for its loopback traffic as well).
 *
 * Two words each, so that what an earlier layer left in the buffer cannot pass for one.
 */
#ifndef CNIBENCH_LB_MARK_H
#define CNIBENCH_LB_MARK_H

#include <linux/bpf.h>

#define LB_REPLY_MARK0 0x6c627270 /* "lbrp" */
#define LB_REPLY_MARK1 0x9e3779b9
#define LB_HAIRPIN_MARK0 0x6c626870 /* "lbhp" */

static __always_inline void lb_mark_reply(struct __sk_buff *skb)
{
	skb->cb[0] = LB_REPLY_MARK0;
	skb->cb[1] = LB_REPLY_MARK1;
}

static __always_inline int lb_reply_marked(struct __sk_buff *skb)
{
	return skb->cb[0] == LB_REPLY_MARK0 && skb->cb[1] == LB_REPLY_MARK1;
}

static __always_inline void lb_mark_hairpin(struct __sk_buff *skb)
{
	skb->cb[0] = LB_HAIRPIN_MARK0;
	skb->cb[1] = LB_REPLY_MARK1;
}

static __always_inline int lb_hairpin_marked(struct __sk_buff *skb)
{
	return skb->cb[0] == LB_HAIRPIN_MARK0 && skb->cb[1] == LB_REPLY_MARK1;
}

#endif
