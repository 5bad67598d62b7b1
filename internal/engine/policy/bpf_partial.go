package policy

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"net/netip"
	"slices"
)

// BPFChange is what changes from one BPFPolicy to the next, as the eBPF policy engine's maps
// see it: the entries to write (new keys, or keys whose value changed) and the keys to delete,
// per map. A map's key is the IP cache entry's prefix, the rule itself (its value is always
// "admit"), the endpoint's address; its value the identity, nothing, the endpoint's ID and
// directions. Written entries come in the next policy's order, deleted keys in the previous
// one's. It marshals to JSON (a partial rendering carries it).
//
// The diff is of the maps' contents, not of what they mean: RenderBPF numbers endpoints and
// identities by their order (see its comment), so a change that shifts the numbering (a pod
// isolated whose address sorts before others' renumbers every later endpoint, and with it all
// their rules; a new class of addresses sorting before others renumbers the later identities,
// their IP cache entries and the rules naming them) is a large change here, every entry whose
// number moved being written again and its old rules deleted. Partial syncs therefore diff
// against the next rendering renumbered like the previous policy (RenumberLike).
type BPFChange struct {
	IPCache       []BPFPrefix    `json:",omitempty"` // IP cache entries written: new prefixes, new identities
	GoneIPCache   []netip.Prefix `json:",omitempty"` // IP cache prefixes deleted
	Rules         []BPFRule      `json:",omitempty"` // rules added
	GoneRules     []BPFRule      `json:",omitempty"` // rules deleted
	Endpoints     []BPFEndpoint  `json:",omitempty"` // endpoints written: new addresses, new ID or directions
	GoneEndpoints []netip.Addr   `json:",omitempty"` // endpoint addresses deleted
}

// DiffBPF is the change that turns the maps holding prev into maps holding next (a nil policy
// is an empty one): applied to prev's entries as maps keyed as the kernel's are (prefix, rule,
// address), with written entries replacing what their key held and deleted keys removed, it
// leaves exactly next's entries. Of entries sharing a key in one policy, the last counts, as
// when the policy is written whole. No key is both written and deleted.
func DiffBPF(prev, next *BPFPolicy) BPFChange {
	if prev == nil {
		prev = &BPFPolicy{}
	}
	if next == nil {
		next = &BPFPolicy{}
	}
	var c BPFChange

	oldIDs := make(map[netip.Prefix]uint32, len(prev.IPCache))
	for _, e := range prev.IPCache {
		oldIDs[e.Prefix.Masked()] = e.Identity
	}
	newIDs := make(map[netip.Prefix]uint32, len(next.IPCache))
	for _, e := range next.IPCache {
		newIDs[e.Prefix.Masked()] = e.Identity
	}
	for _, e := range next.IPCache {
		k := e.Prefix.Masked()
		id, had := oldIDs[k]
		if want := newIDs[k]; want == e.Identity && (!had || id != want) {
			c.IPCache = append(c.IPCache, BPFPrefix{k, want})
			oldIDs[k] = want // written once, even when next names k twice
		}
	}
	for _, e := range prev.IPCache {
		k := e.Prefix.Masked()
		if _, keep := newIDs[k]; !keep {
			c.GoneIPCache = append(c.GoneIPCache, k)
			newIDs[k] = 0 // deleted once
		}
	}

	oldRules := make(map[BPFRule]bool, len(prev.Rules))
	for _, r := range prev.Rules {
		oldRules[r] = true
	}
	newRules := make(map[BPFRule]bool, len(next.Rules))
	for _, r := range next.Rules {
		if !newRules[r] && !oldRules[r] {
			c.Rules = append(c.Rules, r)
		}
		newRules[r] = true
	}
	for _, r := range prev.Rules {
		if !newRules[r] {
			c.GoneRules = append(c.GoneRules, r)
			newRules[r] = true // deleted once
		}
	}

	oldEps := make(map[netip.Addr]BPFEndpoint, len(prev.Endpoints))
	for _, e := range prev.Endpoints {
		oldEps[e.IP] = e
	}
	newEps := make(map[netip.Addr]BPFEndpoint, len(next.Endpoints))
	for _, e := range next.Endpoints {
		newEps[e.IP] = e
	}
	for _, e := range next.Endpoints {
		old, had := oldEps[e.IP]
		if newEps[e.IP] == e && (!had || old != e) {
			c.Endpoints = append(c.Endpoints, e)
			oldEps[e.IP] = e
		}
	}
	for _, e := range prev.Endpoints {
		if _, keep := newEps[e.IP]; !keep {
			c.GoneEndpoints = append(c.GoneEndpoints, e.IP)
			newEps[e.IP] = e
		}
	}
	return c
}

// Size is the map entries the change writes or deletes.
func (c BPFChange) Size() int {
	return len(c.IPCache) + len(c.GoneIPCache) + len(c.Rules) + len(c.GoneRules) + len(c.Endpoints) + len(c.GoneEndpoints)
}

// RenumberLike returns next with prev's endpoint IDs and identities kept where it can, for
// partial syncs: RenderBPF numbers endpoints and identities by their order (see BPFChange), so
// that DiffBPF between two of its renderings rewrites every entry whose number shifted, while
// DiffBPF(prev, RenumberLike(prev, next)) is, as far as numbers allow, what changed in the
// policy itself. As Cilium's identities, numbers stay with what they stand for while it lasts:
//
//   - a class of addresses (an identity of next) keeps the identity that most of its IP cache
//     prefixes had in prev (greedily, most prefixes shared first, each identity of prev going
//     to one class at most; ties to the lower numbers of next, then of prev);
//   - a class none of whose prefixes gave it an identity takes one of prev's left over that
//     prev's rules name as next's name the class (the same directions, protocols and ports,
//     from the same endpoints where these are endpoints of both, from some endpoint coming or
//     going otherwise; the lowest such identity): a pod replaced by another of the same labels
//     at a new address, in a class of its own, is then its IP cache entries alone;
//   - an endpoint keeps its ID when its address was an endpoint in prev; a new one takes the ID
//     of an endpoint gone from prev whose rules are exactly its own (with the identities as
//     renumbered; the lowest such ID): a pod replaced is then its endpoint entries alone;
//   - the other endpoints and identities get the lowest numbers that prev did not use (in its
//     endpoints, IP cache or rules), in next's order, so that a new number means nothing in the
//     maps holding prev; 0 is never given (AnyIdentity stays AnyIdentity; nothing becomes it).
//
// Taking a number over never makes the change larger than a new number would: the entries
// naming it that prev and next share are not rewritten.
//
// The renumbering is one to one on endpoint IDs and on identities, and the kernel only compares
// these numbers for equality, so the result decides every flow as next does. It holds next's
// endpoints and IP cache entries in next's order (RenderBPF's: by address) and its rules
// renumbered, sorted as RenderBPF sorts them and without duplicates; its numbers are not
// RenderBPF's 1..n and 1..m but may have gaps, and none is 0. next is not modified. With prev
// nil (nothing to keep: a full rendering) or next nil, it returns next itself.
func RenumberLike(prev, next *BPFPolicy) *BPFPolicy {
	if prev == nil || next == nil {
		return next
	}

	usedEp := map[uint32]bool{0: true}
	usedID := map[uint32]bool{AnyIdentity: true}
	prevEp := make(map[netip.Addr]uint32, len(prev.Endpoints))
	prevIP := make(map[uint32]netip.Addr, len(prev.Endpoints))
	for _, e := range prev.Endpoints {
		prevEp[e.IP] = e.ID // the last of one address counts, as in the map
		usedEp[e.ID] = true
	}
	for ip, id := range prevEp {
		prevIP[id] = ip
	}
	prevID := make(map[netip.Prefix]uint32, len(prev.IPCache))
	for _, e := range prev.IPCache {
		prevID[e.Prefix.Masked()] = e.Identity
		usedID[e.Identity] = true
	}
	for _, r := range prev.Rules {
		usedEp[r.Endpoint], usedID[r.Identity] = true, true
	}
	// Endpoint addresses as the rules naming an identity are compared: an address that is an
	// endpoint in both, or none (the zero Addr) for an endpoint that comes or goes, whose ID
	// is not known yet.
	nextIP := make(map[uint32]netip.Addr, len(next.Endpoints))
	stays := make(map[netip.Addr]bool, len(next.Endpoints))
	for _, e := range next.Endpoints {
		if _, ok := prevEp[e.IP]; ok {
			nextIP[e.ID], stays[e.IP] = e.IP, true
		}
	}
	for id, ip := range prevIP {
		if !stays[ip] {
			delete(prevIP, id)
		}
	}

	// Identities: by the prefixes they share with prev's.
	type pair struct{ next, prev uint32 }
	votes := make(map[pair]int)
	for _, e := range next.IPCache {
		if old, ok := prevID[e.Prefix.Masked()]; ok && old != AnyIdentity && e.Identity != AnyIdentity {
			votes[pair{e.Identity, old}]++
		}
	}
	pairs := make([]pair, 0, len(votes))
	for p := range votes {
		pairs = append(pairs, p)
	}
	slices.SortFunc(pairs, func(a, b pair) int {
		return cmp.Or(cmp.Compare(votes[b], votes[a]), cmp.Compare(a.next, b.next), cmp.Compare(a.prev, b.prev))
	})
	idOf := map[uint32]uint32{AnyIdentity: AnyIdentity} // next's identity -> the result's
	taken := make(map[uint32]bool, len(pairs))          // prev's identities given
	for _, p := range pairs {
		if _, done := idOf[p.next]; !done && !taken[p.prev] {
			idOf[p.next], taken[p.prev] = p.prev, true
		}
	}

	// Then by the rules naming them: prev's identities left (in its IP cache, not given) and
	// next's classes without one, by (endpoint address, rule but identity).
	left := map[uint32]bool{}
	for _, e := range prev.IPCache {
		if e.Identity != AnyIdentity && !taken[e.Identity] {
			left[e.Identity] = true
		}
	}
	unmatched := map[uint32]bool{}
	for _, e := range next.IPCache {
		if _, done := idOf[e.Identity]; !done {
			unmatched[e.Identity] = true
		}
	}
	if len(left) > 0 && len(unmatched) > 0 {
		byRules := profiles(prev.Rules, func(r BPFRule) (uint32, ruleElem, bool) {
			return r.Identity, byPeer(r, prevIP[r.Endpoint]), left[r.Identity]
		})
		free := map[string][]uint32{}
		for id := range left {
			free[byRules[id]] = append(free[byRules[id]], id)
		}
		for _, ids := range free {
			slices.Sort(ids)
		}
		wants := profiles(next.Rules, func(r BPFRule) (uint32, ruleElem, bool) {
			return r.Identity, byPeer(r, nextIP[r.Endpoint]), unmatched[r.Identity]
		})
		for _, e := range next.IPCache {
			if !unmatched[e.Identity] {
				continue
			}
			unmatched[e.Identity] = false
			k := wants[e.Identity]
			if ids := free[k]; len(ids) > 0 {
				idOf[e.Identity], free[k] = ids[0], ids[1:]
			}
		}
	}

	// Then the lowest numbers prev did not use.
	var freeID uint32 = 1
	freshID := func(id uint32) {
		if _, done := idOf[id]; !done {
			for usedID[freeID] {
				freeID++
			}
			usedID[freeID] = true
			idOf[id] = freeID
		}
	}
	for _, e := range next.IPCache {
		freshID(e.Identity)
	}
	for _, r := range next.Rules {
		freshID(r.Identity) // an identity no prefix of next has (not RenderBPF's)
	}

	// Endpoints: by address, then by their rules (identities as renumbered), then fresh.
	epOf := make(map[uint32]uint32, len(next.Endpoints)) // next's ID -> the result's
	kept := make(map[uint32]bool, len(next.Endpoints))   // prev's IDs given
	for _, e := range next.Endpoints {
		if _, done := epOf[e.ID]; done {
			continue
		}
		if id, ok := prevEp[e.IP]; ok && id != 0 && !kept[id] {
			epOf[e.ID], kept[id] = id, true
		}
	}
	gone := map[uint32]bool{} // prev's endpoints whose ID is not kept
	for _, id := range prevEp {
		if id != 0 && !kept[id] {
			gone[id] = true
		}
	}
	newEps := map[uint32]bool{}
	for _, e := range next.Endpoints {
		if _, done := epOf[e.ID]; !done {
			newEps[e.ID] = true
		}
	}
	if len(gone) > 0 && len(newEps) > 0 {
		byRules := profiles(prev.Rules, func(r BPFRule) (uint32, ruleElem, bool) { return r.Endpoint, byEndpoint(r), gone[r.Endpoint] })
		free := map[string][]uint32{}
		for id := range gone {
			free[byRules[id]] = append(free[byRules[id]], id)
		}
		for _, ids := range free {
			slices.Sort(ids)
		}
		wants := profiles(next.Rules, func(r BPFRule) (uint32, ruleElem, bool) {
			r.Identity = idOf[r.Identity]
			return r.Endpoint, byEndpoint(r), newEps[r.Endpoint]
		})
		for _, e := range next.Endpoints {
			if !newEps[e.ID] {
				continue
			}
			newEps[e.ID] = false
			k := wants[e.ID]
			if ids := free[k]; len(ids) > 0 {
				epOf[e.ID], free[k] = ids[0], ids[1:]
			}
		}
	}
	var freeEp uint32 = 1
	freshEp := func(id uint32) {
		if _, done := epOf[id]; !done {
			for usedEp[freeEp] {
				freeEp++
			}
			usedEp[freeEp] = true
			epOf[id] = freeEp
		}
	}
	for _, e := range next.Endpoints {
		freshEp(e.ID)
	}
	for _, r := range next.Rules {
		freshEp(r.Endpoint) // an endpoint next does not have (not RenderBPF's)
	}

	out := &BPFPolicy{Endpoints: slices.Clone(next.Endpoints), IPCache: slices.Clone(next.IPCache), Rules: slices.Clone(next.Rules)}
	for i := range out.Endpoints {
		out.Endpoints[i].ID = epOf[out.Endpoints[i].ID]
	}
	for i := range out.IPCache {
		out.IPCache[i].Identity = idOf[out.IPCache[i].Identity]
	}
	for i := range out.Rules {
		r := &out.Rules[i]
		r.Endpoint, r.Identity = epOf[r.Endpoint], idOf[r.Identity]
	}
	slices.SortFunc(out.Rules, compareBPFRule)
	out.Rules = slices.Compact(out.Rules)
	return out
}

// ruleElem is a rule as profiles compares it: the fields that matter, as bytes.
type ruleElem [21]byte

// profiles describes the rules pick takes, grouped by the number it gives them (an identity,
// an endpoint ID): a group's string is the sorted set of its rules' elements, so that two
// groups of the same rules have the same string; a number with no rule has none ("").
func profiles(rules []BPFRule, pick func(BPFRule) (uint32, ruleElem, bool)) map[uint32]string {
	type numbered struct {
		n uint32
		e ruleElem
	}
	var es []numbered
	for _, r := range rules {
		if n, e, ok := pick(r); ok {
			es = append(es, numbered{n, e})
		}
	}
	slices.SortFunc(es, func(a, b numbered) int { return cmp.Or(cmp.Compare(a.n, b.n), bytes.Compare(a.e[:], b.e[:])) })
	es = slices.Compact(es)
	out := make(map[uint32]string)
	var buf []byte
	for i := 0; i < len(es); {
		buf = buf[:0]
		j := i
		for ; j < len(es) && es[j].n == es[i].n; j++ {
			buf = append(buf, es[j].e[:]...)
		}
		out[es[i].n] = string(buf)
		i = j
	}
	return out
}

// byPeer is a rule as seen from its identity: the endpoint's address and the rest but the
// identity.
func byPeer(r BPFRule, ep netip.Addr) ruleElem {
	var e ruleElem
	a := ep.As16() // the zero Addr (no such endpoint) is all zeros, unlike any IPv4 address
	copy(e[:16], a[:])
	e[16], e[17] = boolByte(r.Egress), r.Proto
	binary.BigEndian.PutUint16(e[18:], r.Port)
	e[20] = r.PortBits
	return e
}

// byEndpoint is a rule as seen from its endpoint: the rest but the endpoint.
func byEndpoint(r BPFRule) ruleElem {
	var e ruleElem
	binary.BigEndian.PutUint32(e[:], r.Identity)
	e[4], e[5] = boolByte(r.Egress), r.Proto
	binary.BigEndian.PutUint16(e[6:], r.Port)
	e[8] = r.PortBits
	return e
}

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}
