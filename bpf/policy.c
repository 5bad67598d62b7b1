// SPDX-License-Identifier: (MIT OR GPL-2.0)
/*
 * pol_check: the lab's eBPF NetworkPolicy engine (policy "ebpf"), Cilium's scheme: addresses
 * have security identities, rules are keyed by identity, every decision is a few map lookups
 * whatever the number of pods and policies. A tcx ingress program on every interface of a node
 * (after the Service load balancer, before the pod forwarding), fed by the project's policy
 * compiler (internal/engine/policy RenderBPF):
 *
 *   pol_eps    local pod address -> endpoint id and which directions are isolated
 *   ipcache    LPM: address prefix -> identity (the longest prefix decides)
 *   pol_rules  LPM: (endpoint, direction, identity, protocol, port) -> admit; a rule's prefix
 *              stops before the protocol (any protocol) or inside the port (port ranges);
 *              identity 0 is the wildcard (a rule admitting any peer), looked up second
 *   pol_ct     LRU: connections admitted (first packet's tuple): later packets and replies pass
 *
 * The first packet of a connection from an isolated local pod needs a rule of its egress, one
 * to an isolated local pod a rule of its ingress (both for a packet between two local pods);
 * denied packets are dropped. Every connection of a local pod with a firewall is tracked, so
 * that its replies pass whatever the pod's policies say about their direction. Replies the
 * Service load balancer has turned back into the Service's address (their tuple no longer
 * matches the admitted one) are recognised by the load balancer's mark in the packet's control
 * buffer; so are the packets of hairpin connections (a pod reaching itself through a Service),
 * which pass as a pod's traffic to itself does. The maps and the decision are pol.h's (shared
 * with the firewall cube of the polycube data planes, bpf/polycube.h).
 */
#include "lb_mark.h"
#include "pol.h"

SEC("tc")
int pol_check(struct __sk_buff *skb)
{
	struct pol_tuple t = {};
	int syn;

	if (lb_reply_marked(skb))
		return pol_count(POL_ESTABLISHED, TCX_NEXT);
	/* A pod's traffic to itself: its own address both ways, or a hairpin connection through a
	 * Service (the load balancer translated its source to the service loopback address). */
	if (lb_hairpin_marked(skb) || pol_parse(skb, &t, &syn) || t.saddr == t.daddr)
		return TCX_NEXT;
	return pol_judge(&t, syn);
}

char _license[] SEC("license") = "Dual MIT/GPL";
