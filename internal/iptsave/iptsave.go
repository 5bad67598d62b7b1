// Package iptsave reads `iptables-save -c` output: the FORWARD chain's drops and the counters
// of a rule. It sits below the network functions that read their own firewall's counters
// (nf/kernel's route-iptables counts its drops; pktengine's kernel NF reads its mangle rule's
// packets and bytes), so that neither imports the other for it.
package iptsave

import (
	"fmt"
	"strings"
)

// savedRule is a rule line of `iptables-save -c`: its counters and the rule.
type savedRule struct {
	packets, bytes uint64
	rule           string // "-A CHAIN ..."
}

// parseSave reads `iptables-save -c` output: the FORWARD chain's policy and packet counter
// (found false when the table has no FORWARD chain) and every rule with its counter.
func parseSave(save []byte) (policy string, policyPackets uint64, found bool, rules []savedRule, err error) {
	for _, line := range strings.Split(string(save), "\n") {
		line = strings.TrimSpace(line)
		var pk, by uint64
		switch {
		case strings.HasPrefix(line, ":FORWARD "):
			if _, err := fmt.Sscanf(line, ":FORWARD %s [%d:%d]", &policy, &pk, &by); err != nil {
				return "", 0, false, nil, fmt.Errorf("iptables-save: bad chain line %q: %v", line, err)
			}
			policyPackets, found = pk, true
		case strings.HasPrefix(line, "["):
			if _, err := fmt.Sscanf(line, "[%d:%d]", &pk, &by); err != nil {
				return "", 0, false, nil, fmt.Errorf("iptables-save: bad rule line %q: %v", line, err)
			}
			_, rule, _ := strings.Cut(line, "] ")
			rules = append(rules, savedRule{packets: pk, bytes: by, rule: rule})
		}
	}
	return policy, policyPackets, found, rules, nil
}

// ForwardDrops reads `iptables-save -c` output: the FORWARD policy's packet counter when the
// policy is DROP, plus the packet counters of the FORWARD rules that jump to DROP.
func ForwardDrops(save []byte) (uint64, error) {
	policy, sum, found, rules, err := parseSave(save)
	if err != nil {
		return 0, err
	}
	if !found {
		return 0, fmt.Errorf("iptables-save: no FORWARD chain in the filter table")
	}
	if policy != "DROP" {
		sum = 0
	}
	for _, r := range rules {
		if strings.HasPrefix(r.rule, "-A FORWARD ") && strings.HasSuffix(r.rule, " -j DROP") {
			sum += r.packets
		}
	}
	return sum, nil
}

// RulePackets is the packet counter of the first rule of `iptables-save -c` output that
// contains match (found false when none does).
func RulePackets(save []byte, match string) (packets uint64, found bool, err error) {
	packets, _, found, err = RuleCounters(save, match)
	return packets, found, err
}

// RuleCounters are the packet and byte counters of the first rule of `iptables-save -c`
// output that contains match (found false when none does).
func RuleCounters(save []byte, match string) (packets, bytes uint64, found bool, err error) {
	_, _, _, rules, err := parseSave(save)
	if err != nil {
		return 0, 0, false, err
	}
	for _, r := range rules {
		if strings.Contains(r.rule, match) {
			return r.packets, r.bytes, true, nil
		}
	}
	return 0, 0, false, nil
}
