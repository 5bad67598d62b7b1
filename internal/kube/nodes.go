package kube

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// selectNodes chooses the run's nodes. With explicit names, each must exist (once) and be
// Ready, and without tolerateTaints must not carry a NoExecute taint (the kubelet would reject
// or evict a pod that does not tolerate it; NoSchedule and cordoning do not apply to pods
// pinned with nodeName). Without names: every Ready, schedulable node without a NoSchedule or
// NoExecute taint (taints ignored with tolerateTaints), sorted by name; at least one.
func selectNodes(all []corev1.Node, names []string, tolerateTaints bool) ([]corev1.Node, error) {
	byName := map[string]corev1.Node{}
	for _, n := range all {
		byName[n.Name] = n
	}
	if len(names) > 0 {
		var out []corev1.Node
		seen := map[string]bool{}
		for _, name := range names {
			if seen[name] {
				return nil, fmt.Errorf("node %q given twice", name)
			}
			seen[name] = true
			n, ok := byName[name]
			if !ok {
				return nil, fmt.Errorf("node %q not found in the cluster (nodes: %s)", name, nodeNames(all))
			}
			if !nodeReady(n) {
				return nil, fmt.Errorf("node %q is not Ready", name)
			}
			if t, bad := blockingTaint(n, corev1.TaintEffectNoExecute); bad && !tolerateTaints {
				return nil, fmt.Errorf("node %q has taint %s (use --tolerate-taints to run there anyway)", name, t)
			}
			out = append(out, n)
		}
		return out, nil
	}
	var out []corev1.Node
	var skipped []string
	for _, n := range all {
		if reason := unusable(n, tolerateTaints); reason != "" {
			skipped = append(skipped, n.Name+": "+reason)
			continue
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		if len(all) == 0 {
			return nil, fmt.Errorf("the cluster has no nodes")
		}
		sort.Strings(skipped)
		return nil, fmt.Errorf("no usable node (%s)", strings.Join(skipped, "; "))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// unusable says why a node is left out of the automatic choice ("" = usable).
func unusable(n corev1.Node, tolerateTaints bool) string {
	if !nodeReady(n) {
		return "not Ready"
	}
	if n.Spec.Unschedulable {
		return "unschedulable (cordoned)"
	}
	if tolerateTaints {
		return ""
	}
	if t, bad := blockingTaint(n, corev1.TaintEffectNoSchedule, corev1.TaintEffectNoExecute); bad {
		return "taint " + t + " (use --tolerate-taints)"
	}
	return ""
}

func nodeReady(n corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// blockingTaint returns the first taint with one of the effects, as key[=value]:effect.
func blockingTaint(n corev1.Node, effects ...corev1.TaintEffect) (string, bool) {
	for _, t := range n.Spec.Taints {
		for _, e := range effects {
			if t.Effect == e {
				s := t.Key
				if t.Value != "" {
					s += "=" + t.Value
				}
				return s + ":" + string(t.Effect), true
			}
		}
	}
	return "", false
}

// nodeIP is the node's first InternalIP (else its first ExternalIP, else "").
func nodeIP(n corev1.Node) string {
	for _, typ := range []corev1.NodeAddressType{corev1.NodeInternalIP, corev1.NodeExternalIP} {
		for _, a := range n.Status.Addresses {
			if a.Type == typ {
				return a.Address
			}
		}
	}
	return ""
}

func nodeNames(all []corev1.Node) string {
	var names []string
	for _, n := range all {
		names = append(names, n.Name)
	}
	sort.Strings(names)
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}
