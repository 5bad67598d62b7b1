/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/*
 * The mark the per-packet Service load balancer (lb.h) leaves in a packet's control buffer
 * when it has turned a reply back into the Service's address, for the programs after it at the
 * same tcx hook (the policy engine: the reply's tuple is no longer the one it admitted). Two
 * words, so that what an earlier layer left in the buffer cannot pass for it.
 */
#ifndef CNIBENCH_LB_MARK_H
#define CNIBENCH_LB_MARK_H

#include <linux/bpf.h>

#define LB_REPLY_MARK0 0x6c627270 /* "lbrp" */
#define LB_REPLY_MARK1 0x9e3779b9

static __always_inline void lb_mark_reply(struct __sk_buff *skb)
{
	skb->cb[0] = LB_REPLY_MARK0;
	skb->cb[1] = LB_REPLY_MARK1;
}

static __always_inline int lb_reply_marked(struct __sk_buff *skb)
{
	return skb->cb[0] == LB_REPLY_MARK0 && skb->cb[1] == LB_REPLY_MARK1;
}

#endif
