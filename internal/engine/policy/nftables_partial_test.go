package policy

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cnibench/cnibench/internal/netns/netnstest"
)

// The tests of RenderNFTablesPartial. Those that program a kernel need root and run in
// scratch network namespaces (netnstest.Scratch). The random sequence replays with
//
//	NFT_PARTIAL_SEED=<seed> go test -run TestNFTablesPartialMatchesFull ./internal/engine/policy/

// nftPartialListing is the kernel's table, object by object ("chain X", "set X", "map X"):
// a chain's rules in order; a set's or map's declaration lines, then "element E" for each of
// its elements, sorted (the kernel lists a hash set in no particular order).
func nftPartialListing(t *testing.T, ns string) map[string][]string {
	t.Helper()
	out, err := exec.Command("nsenter", "--net="+ns, "nft", "list", "table", "ip", NFTablesTable).CombinedOutput()
	if err != nil {
		t.Fatalf("nft list table: %v: %s", err, out)
	}
	objs := map[string][]string{}
	cur, inElems := "", false
	var elems []string
	addElems := func(s string) {
		if i := strings.IndexByte(s, '}'); i >= 0 {
			s, inElems = s[:i], false
		}
		for _, e := range strings.Split(s, ",") {
			if e = strings.TrimSpace(e); e != "" {
				elems = append(elems, "element "+e)
			}
		}
	}
	for _, l := range strings.Split(string(out), "\n") {
		l = strings.TrimSpace(l)
		switch {
		case inElems:
			addElems(l)
		case l == "":
		case strings.HasPrefix(l, "table "):
		case cur == "" && strings.HasSuffix(l, "{"):
			f := strings.Fields(l)
			cur, elems = f[0]+" "+f[1], nil
			objs[cur] = []string{}
		case l == "}":
			if cur != "" {
				slices.Sort(elems)
				objs[cur] = append(objs[cur], elems...)
			}
			cur = ""
		case strings.HasPrefix(l, "elements = {"):
			inElems = true
			addElems(strings.TrimPrefix(l, "elements = {"))
		default:
			objs[cur] = append(objs[cur], l)
		}
	}
	return objs
}

// sameNFTListing compares two listings object by object and reports the differences.
func nftpSameListing(t *testing.T, got, want map[string][]string) bool {
	t.Helper()
	same := true
	for name, w := range want {
		g, ok := got[name]
		switch {
		case !ok:
			t.Errorf("missing %s", name)
			same = false
		case !slices.Equal(g, w):
			t.Errorf("%s differs:\npartial:\n\t%s\nfull:\n\t%s", name, strings.Join(g, "\n\t"), strings.Join(w, "\n\t"))
			same = false
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("left over: %s %v", name, got[name])
			same = false
		}
	}
	return same
}

func nftpApply(t *testing.T, nsp string, in []byte, what string) {
	t.Helper()
	if err := ApplyNFTables(nsp, in); err != nil {
		t.Fatalf("%s: %v\ninput:\n%s", what, err, in)
	}
}

// nftpCommand is one command of an nft input: its first line and the lines of its block.
type nftpCommand struct {
	line string   // "add chain ip cnibench-policy NAME {"
	verb string   // "add chain", "flush set", "delete element", ...
	name string   // the object's name
	body []string // the block's lines, trimmed
}

// nftpCommands splits a partial input into its commands: a command starts at column 0, a
// block ends with a "}" at column 0.
func nftpCommands(t *testing.T, in string) []nftpCommand {
	t.Helper()
	var cmds []nftpCommand
	open := false
	for _, l := range strings.Split(strings.TrimSuffix(in, "\n"), "\n") {
		switch {
		case l == "":
		case open && l == "}":
			open = false
		case open:
			cmds[len(cmds)-1].body = append(cmds[len(cmds)-1].body, strings.TrimSpace(l))
		case strings.HasPrefix(l, "\t") || l == "}":
			t.Fatalf("line outside of a command: %q", l)
		default:
			f := strings.Fields(l)
			if len(f) < 5 || f[2] != "ip" || f[3] != NFTablesTable {
				t.Fatalf("not a command on table ip %s: %q", NFTablesTable, l)
			}
			cmds = append(cmds, nftpCommand{line: l, verb: f[0] + " " + f[1], name: f[4]})
			open = strings.HasSuffix(l, "{")
		}
	}
	if open {
		t.Fatalf("unterminated block at the end of\n%s", in)
	}
	return cmds
}

var (
	nftpJump   = regexp.MustCompile(`\bjump ([A-Za-z0-9_-]+)`)
	nftpSetRef = regexp.MustCompile(`@([A-Za-z0-9_-]+)`)
)

// elementKeys are the keys of an element list: "10.0.0.1 : jump X, 10.0.0.2" -> addresses.
func nftpElementKeys(s string) []string {
	var keys []string
	for _, e := range strings.Split(s, ",") {
		if e = strings.TrimSpace(e); e != "" {
			keys = append(keys, strings.TrimSpace(strings.Split(e, " : ")[0]))
		}
	}
	return keys
}

// checkNFTPartialOrder checks that a partial input is in an order nft 1.0.6 and the kernel
// accept with only the table in nft's cache: a rule or element names a chain the input adds
// only after adding it; a rule names a set only after the input declared it ("add set"); a
// chain or set is deleted only after being flushed (chains) and is not named after; an
// element is deleted before an element of the same key is added; no command makes nft fetch
// the chains but the deletions ("add rule", "add element", table blocks).
func checkNFTPartialOrder(t *testing.T, in string) {
	t.Helper()
	cmds := nftpCommands(t, in)
	adds := map[string]bool{}
	for _, c := range cmds {
		if c.verb == "add chain" {
			adds[c.name] = true
		}
	}
	added, flushed, deleted, declared, deletedSets := map[string]bool{}, map[string]bool{}, map[string]bool{}, map[string]bool{}, map[string]bool{}
	addedKeys := map[string]bool{}
	for i, c := range cmds {
		text := c.line + " " + strings.Join(c.body, " ")
		for _, m := range nftpJump.FindAllStringSubmatch(text, -1) {
			if deleted[m[1]] || adds[m[1]] && !added[m[1]] {
				t.Errorf("command %d names chain %s, deleted or not added yet: %s", i+1, m[1], c.line)
			}
		}
		for _, m := range nftpSetRef.FindAllStringSubmatch(text, -1) {
			if !declared[m[1]] || deletedSets[m[1]] {
				t.Errorf("command %d names set %s, not declared before in the input (or deleted): %s", i+1, m[1], c.line)
			}
		}
		switch c.verb {
		case "add chain":
			added[c.name] = true
		case "flush chain":
			flushed[c.name] = true
		case "delete chain":
			if !flushed[c.name] {
				t.Errorf("command %d deletes chain %s before flushing it", i+1, c.name)
			}
			deleted[c.name] = true
		case "add set":
			declared[c.name] = true
		case "delete set":
			deletedSets[c.name] = true
		case "delete element":
			inner := c.line[strings.IndexByte(c.line, '{')+1 : strings.LastIndexByte(c.line, '}')]
			for _, k := range nftpElementKeys(inner) {
				if addedKeys[c.name+" "+k] {
					t.Errorf("command %d deletes element %s of %s after adding it", i+1, k, c.name)
				}
			}
		case "add map":
			elems := strings.Join(c.body, " ")
			if j := strings.Index(elems, "elements = {"); j >= 0 {
				for _, k := range nftpElementKeys(strings.TrimSuffix(strings.TrimSpace(elems[j+len("elements = {"):]), "}")) {
					addedKeys[c.name+" "+k] = true
				}
			}
		case "flush set":
		default:
			t.Errorf("command %d: %q (nft fetches every chain for it, or it is not expected)", i+1, c.line)
		}
	}
}

// nftpDiff is what differs between two full renderings: chains and sets present in one
// only or with other lines, map elements ("pod-egress 10.0.0.1") present in one only or with
// another verdict.
type nftpDiff struct {
	chains, sets, elems map[string]bool
}

func (d nftpDiff) size() int { return len(d.chains) + len(d.sets) + len(d.elems) }

// fullObjects reads a full rendering: its chains and sets (their lines) and map elements.
func nftpFullObjects(p *Program) (objs map[string]string, elems map[string]string) {
	text, _ := RenderNFTables(p)
	elems = map[string]string{}
	objs = map[string]string{}
	for name, lines := range nftBlocks(string(text)) {
		if !strings.HasPrefix(name, "map ") {
			objs[name] = strings.Join(lines, "\n")
			continue
		}
		m := strings.TrimPrefix(name, "map ")
		for _, l := range lines {
			if l == "elements = {" || strings.HasPrefix(l, "type ") {
				continue
			}
			for _, e := range strings.Split(l, ",") {
				if e = strings.TrimSpace(e); e != "" {
					kv := strings.SplitN(e, " : ", 2)
					elems[m+" "+kv[0]] = kv[1]
				}
			}
		}
	}
	return objs, elems
}

// diffFull is what differs between the full renderings of a and b.
func nftpDiffFull(a, b *Program) nftpDiff {
	d := nftpDiff{map[string]bool{}, map[string]bool{}, map[string]bool{}}
	ao, ae := nftpFullObjects(a)
	bo, be := nftpFullObjects(b)
	note := func(name string) {
		kind, n, _ := strings.Cut(name, " ")
		if kind == "chain" {
			d.chains[n] = true
		} else {
			d.sets[n] = true
		}
	}
	for name, v := range ao {
		if w, ok := bo[name]; !ok || v != w {
			note(name)
		}
	}
	for name := range bo {
		if _, ok := ao[name]; !ok {
			note(name)
		}
	}
	for k, v := range ae {
		if w, ok := be[k]; !ok || v != w {
			d.elems[k] = true
		}
	}
	for k := range be {
		if _, ok := ae[k]; !ok {
			d.elems[k] = true
		}
	}
	return d
}

// checkMinimal checks that a partial input from prev to p names exactly what differs
// between their full renderings (diffFull): every chain it adds, flushes or deletes, every
// set it fills or deletes, every element it adds or deletes differs, and everything that
// differs is there; a set declared without elements that exists in both is one a rule of the
// input names. Changed counts the differences.
func nftpCheckMinimal(t *testing.T, prev, p *Program, in string, changed int) {
	t.Helper()
	d := nftpDiffFull(prev, p)
	prevObjs, _ := nftpFullObjects(prev)
	seen := nftpDiff{map[string]bool{}, map[string]bool{}, map[string]bool{}}
	named := map[string]bool{} // sets the input's rules name
	var redeclared []string
	for _, c := range nftpCommands(t, in) {
		switch c.verb {
		case "add chain", "flush chain", "delete chain":
			seen.chains[c.name] = true
			for _, m := range nftpSetRef.FindAllStringSubmatch(strings.Join(c.body, "\n"), -1) {
				named[m[1]] = true
			}
		case "add set":
			filled := slices.ContainsFunc(c.body, func(l string) bool { return strings.HasPrefix(l, "elements") })
			if _, existed := prevObjs["set "+c.name]; existed && !filled && !d.sets[c.name] {
				redeclared = append(redeclared, c.name)
			} else {
				seen.sets[c.name] = true
			}
		case "flush set", "delete set":
			seen.sets[c.name] = true
		case "delete element":
			inner := c.line[strings.IndexByte(c.line, '{')+1 : strings.LastIndexByte(c.line, '}')]
			for _, k := range nftpElementKeys(inner) {
				seen.elems[c.name+" "+k] = true
			}
		case "add map":
			elems := strings.Join(c.body, " ")
			if j := strings.Index(elems, "elements = {"); j >= 0 {
				for _, k := range nftpElementKeys(strings.TrimSuffix(strings.TrimSpace(elems[j+len("elements = {"):]), "}")) {
					seen.elems[c.name+" "+k] = true
				}
			}
		}
	}
	for _, kind := range []struct {
		what       string
		want, have map[string]bool
	}{{"chain", d.chains, seen.chains}, {"set", d.sets, seen.sets}, {"element", d.elems, seen.elems}} {
		for n := range kind.have {
			if !kind.want[n] {
				t.Errorf("the input touches %s %s, which did not change", kind.what, n)
			}
		}
		for n := range kind.want {
			if !kind.have[n] {
				t.Errorf("%s %s changed, and the input does not touch it", kind.what, n)
			}
		}
	}
	for _, s := range redeclared {
		if !named[s] {
			t.Errorf("set %s declared again, yet no rule of the input names it", s)
		}
	}
	if changed != d.size() {
		t.Errorf("Changed %d, want %d (%d chains, %d sets, %d elements)", changed, d.size(), len(d.chains), len(d.sets), len(d.elems))
	}
}

// ---- a random cluster and random changes to it ----

// nftpGen makes a realistic cluster (two namespaces, pods on this node and another, with
// labels and named ports) and random NetworkPolicies over it, and changes both.
type nftpGen struct {
	r    *rand.Rand
	nss  []Namespace
	pods []Pod
	pols []networkingv1.NetworkPolicy
	next int // names and addresses never used before
}

var (
	nftpApps  = []string{"api", "web", "db", "cache"}
	nftpTiers = []string{"front", "back"}
	nftpPorts = []NamedPort{{"http", "TCP", 8080}, {"http", "TCP", 80}, {"dns", "UDP", 53}, {"metrics", "TCP", 9090}}
)

func newNFTPGen(seed uint64) *nftpGen {
	g := &nftpGen{r: rand.New(rand.NewPCG(seed, 7))}
	g.nss = []Namespace{ns("shop", "team", "a"), ns("bank", "team", "b")}
	for range 24 {
		g.pods = append(g.pods, g.pod(""))
	}
	for range 6 {
		g.pols = append(g.pols, g.policy())
	}
	return g
}

// pod is a new pod (at address ip, "" for a new one): on this node (10.244.0.0/24, Local) or
// the other (10.244.1.0/24).
func (g *nftpGen) pod(ip string) Pod {
	g.next++
	if ip == "" {
		ip = fmt.Sprintf("10.244.%d.%d", g.r.IntN(2), 2+g.next)
	}
	p := Pod{Name: "p" + strconv.Itoa(g.next), Namespace: pick(g.r, g.nss).Name, IP: ip, Local: strings.HasPrefix(ip, "10.244.0."),
		Labels: map[string]string{"app": pick(g.r, nftpApps)}}
	if g.r.IntN(3) > 0 {
		p.Labels["tier"] = pick(g.r, nftpTiers)
	}
	for range g.r.IntN(3) {
		np := pick(g.r, nftpPorts)
		if !slices.ContainsFunc(p.Ports, func(o NamedPort) bool { return o.Name == np.Name }) {
			p.Ports = append(p.Ports, np)
		}
	}
	return p
}

func (g *nftpGen) selector() metav1.LabelSelector {
	switch g.r.IntN(10) {
	case 0:
		return metav1.LabelSelector{}
	case 1, 2:
		return *expr("tier", metav1.LabelSelectorOpIn, pick(g.r, nftpTiers))
	default:
		return *ml("app", pick(g.r, nftpApps))
	}
}

func (g *nftpGen) peers() []networkingv1.NetworkPolicyPeer {
	if g.r.IntN(7) == 0 {
		return nil // any peer
	}
	var peers []networkingv1.NetworkPolicyPeer
	for range 1 + g.r.IntN(2) {
		switch g.r.IntN(5) {
		case 0, 1:
			s := g.selector()
			peers = append(peers, podPeer(&s))
		case 2:
			peers = append(peers, nsPeer(ml("team", pick(g.r, []string{"a", "b"}))))
		case 3:
			s := g.selector()
			peers = append(peers, networkingv1.NetworkPolicyPeer{NamespaceSelector: ml("kubernetes.io/metadata.name", pick(g.r, g.nss).Name), PodSelector: &s})
		default:
			peers = append(peers, pick(g.r, []networkingv1.NetworkPolicyPeer{
				blockPeer("10.244.0.0/16", "10.244.0.16/28"),
				blockPeer("10.244.0.0/24", "10.244.0.2/32", "10.244.0.4/30"),
				blockPeer("0.0.0.0/0", "10.0.0.0/8"),
				blockPeer("172.16.0.0/12"),
				blockPeer("10.244.1.0/24", fmt.Sprintf("10.244.1.%d/32", 2+g.r.IntN(40))),
			}))
		}
	}
	return peers
}

func (g *nftpGen) ports() []networkingv1.NetworkPolicyPort {
	if g.r.IntN(5) == 0 {
		return nil // any port
	}
	var ports []networkingv1.NetworkPolicyPort
	for range 1 + g.r.IntN(2) {
		switch g.r.IntN(6) {
		case 0:
			ports = append(ports, tcp(pick(g.r, []int{80, 443, 8080})))
		case 1:
			ports = append(ports, networkingv1.NetworkPolicyPort{Protocol: protoPtr("UDP"), Port: intPort(53)})
		case 2:
			ports = append(ports, networkingv1.NetworkPolicyPort{Protocol: protoPtr("TCP"), Port: intPort(8000), EndPort: i32(8100)})
		case 3:
			ports = append(ports, networkingv1.NetworkPolicyPort{Protocol: protoPtr("TCP")})
		default:
			np := pick(g.r, nftpPorts)
			ports = append(ports, networkingv1.NetworkPolicyPort{Protocol: protoPtr(np.Protocol), Port: namedPort(np.Name)})
		}
	}
	return ports
}

func (g *nftpGen) ingress() []networkingv1.NetworkPolicyIngressRule {
	var rules []networkingv1.NetworkPolicyIngressRule
	for range g.r.IntN(3) { // none: deny all
		rules = append(rules, networkingv1.NetworkPolicyIngressRule{From: g.peers(), Ports: g.ports()})
	}
	return rules
}

func (g *nftpGen) egress() []networkingv1.NetworkPolicyEgressRule {
	var rules []networkingv1.NetworkPolicyEgressRule
	for range g.r.IntN(3) {
		rules = append(rules, networkingv1.NetworkPolicyEgressRule{To: g.peers(), Ports: g.ports()})
	}
	return rules
}

func (g *nftpGen) policy() networkingv1.NetworkPolicy {
	g.next++
	p := netpol(pick(g.r, g.nss).Name, "pol"+strconv.Itoa(g.next), networkingv1.NetworkPolicySpec{PodSelector: g.selector()})
	switch g.r.IntN(4) {
	case 0:
		p.Spec.PolicyTypes = types(ingressT)
		p.Spec.Ingress = g.ingress()
	case 1:
		p.Spec.PolicyTypes = types(egressT)
		p.Spec.Egress = g.egress()
	case 2:
		p.Spec.PolicyTypes = types(ingressT, egressT)
		p.Spec.Ingress, p.Spec.Egress = g.ingress(), g.egress()
	default:
		p.Spec.Ingress = g.ingress() // no policyTypes: ingress, and egress if it has rules
		if g.r.IntN(3) == 0 {
			p.Spec.Egress = g.egress()
		}
	}
	return p
}

// change makes one random change and says what it did.
func (g *nftpGen) change() string {
	pols := slices.Clone(g.pols)
	pick1 := func() *networkingv1.NetworkPolicy {
		i := g.r.IntN(len(pols))
		p := pols[i]
		p.Spec = *p.Spec.DeepCopy()
		pols[i] = p
		return &pols[i]
	}
	defer func() { g.pols = pols }()
	if len(pols) < 2 {
		p := g.policy()
		pols = append(pols, p)
		return "add " + p.Name
	}
	switch k := g.r.IntN(20); {
	case k < 5:
		p := g.policy()
		pols = append(pols, p)
		return "add " + p.Name
	case k < 8:
		i := g.r.IntN(len(pols))
		what := "remove " + pols[i].Name
		pols = slices.Delete(pols, i, i+1)
		return what
	case k < 10:
		p := pick1()
		p.Spec.PodSelector = g.selector()
		return p.Name + ": pod selector " + p.Spec.PodSelector.String()
	case k < 12:
		p := pick1()
		if len(p.Spec.Ingress) == 0 {
			p.Spec.Ingress = g.ingress()
			return p.Name + ": ingress rules replaced"
		}
		p.Spec.Ingress[0].Ports = g.ports()
		return p.Name + ": ports of the first ingress rule"
	case k < 14:
		p := pick1()
		if len(p.Spec.Ingress) == 0 {
			p.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{}}
		}
		p.Spec.Ingress[0].From = append(p.Spec.Ingress[0].From, blockPeer("10.244.0.0/24", fmt.Sprintf("10.244.0.%d/31", 2*g.r.IntN(20))))
		return p.Name + ": an ipBlock with except added"
	case k < 15:
		p := pick1()
		np := pick(g.r, nftpPorts)
		p.Spec.Ingress = append(p.Spec.Ingress, networkingv1.NetworkPolicyIngressRule{From: g.peers(),
			Ports: []networkingv1.NetworkPolicyPort{{Protocol: protoPtr(np.Protocol), Port: namedPort(np.Name)}}})
		return p.Name + ": a rule with named port " + np.Name
	case k < 17:
		p := pick1()
		if slices.Contains(p.Spec.PolicyTypes, egressT) {
			p.Spec.PolicyTypes = slices.DeleteFunc(slices.Clone(p.Spec.PolicyTypes), func(t networkingv1.PolicyType) bool { return t == egressT })
			if len(p.Spec.PolicyTypes) == 0 {
				p.Spec.PolicyTypes = types(ingressT)
			}
			p.Spec.Egress = nil
			return p.Name + ": egress removed"
		}
		p.Spec.PolicyTypes = types(ingressT, egressT)
		p.Spec.Egress = g.egress()
		return p.Name + ": egress added"
	case k < 18:
		i := g.r.IntN(len(g.pods))
		g.pods = slices.Clone(g.pods)
		q := g.pods[i]
		q.Labels = map[string]string{"app": pick(g.r, nftpApps), "tier": pick(g.r, nftpTiers)}
		g.pods[i] = q
		return fmt.Sprintf("pod %s relabeled %v", q.Name, q.Labels)
	case k < 19:
		// Another pod at the same address: the map elements' verdicts change.
		i := g.r.IntN(len(g.pods))
		g.pods = slices.Clone(g.pods)
		old := g.pods[i]
		g.pods[i] = g.pod(old.IP)
		return fmt.Sprintf("pod %s replaced by %s (%s)", old.Name, g.pods[i].Name, old.IP)
	default:
		g.pods = slices.Clone(g.pods)
		if g.r.IntN(2) == 0 {
			i := g.r.IntN(len(g.pods))
			what := "pod " + g.pods[i].Name + " removed"
			g.pods = slices.Delete(g.pods, i, i+1)
			return what
		}
		g.pods = append(g.pods, g.pod(""))
		return "pod " + g.pods[len(g.pods)-1].Name + " added"
	}
}

func (g *nftpGen) compile(t testing.TB) *Program {
	t.Helper()
	p, err := Compile(g.pods, g.nss, g.pols)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// ---- the tests ----

// Without a state the partial rendering is the full one, byte for byte; with nothing changed
// it is empty, and nft applies the empty input without changing anything.
func TestNFTablesPartialFull(t *testing.T) {
	for _, p := range []*Program{renderExample(), newNFTPGen(1).compile(t), {}} {
		full, cnt := RenderNFTables(p)
		in, st, pcnt := RenderNFTablesPartial(nil, p)
		if string(in) != string(full) || st == nil || pcnt != cnt || pcnt.Changed != 0 {
			t.Errorf("prev nil: not the full rendering (counts %+v, want %+v)", pcnt, cnt)
		}
		again, st2, acnt := RenderNFTablesPartial(st, p)
		if len(again) != 0 || acnt != cnt || st2 == nil {
			t.Errorf("nothing changed, yet %d changes (counts %+v, want %+v):\n%s", acnt.Changed, acnt, cnt, again)
		}
		if in, _, c := RenderNFTablesPartial(st2, p); len(in) != 0 || c.Changed != 0 {
			t.Errorf("the state of an empty change is not the same: %d changes", c.Changed)
		}
	}

	nsp, _ := netnstest.Scratch(t)
	p := newNFTPGen(1).compile(t)
	in, st, _ := RenderNFTablesPartial(nil, p)
	nftpApply(t, nsp, in, "full rendering")
	before := nftPartialListing(t, nsp)
	again, _, _ := RenderNFTablesPartial(st, p)
	nftpApply(t, nsp, again, "empty change")
	if !nftpSameListing(t, nftPartialListing(t, nsp), before) {
		t.Error("the empty change changed the table")
	}
}

// The partial rendering's model of a Program (its chains, their rules, the counts) is the
// full rendering's.
func TestNFTablesPartialModel(t *testing.T) {
	g := newNFTPGen(2)
	for step := range 30 {
		p := g.compile(t)
		full, cnt := RenderNFTables(p)
		m := nftpBuild(p)
		if m.cnt != cnt {
			t.Errorf("step %d: counts %+v, the full rendering's %+v", step, m.cnt, cnt)
		}
		chains := 0
		for name := range nftBlocks(string(full)) {
			if strings.HasPrefix(name, "chain ") && name != "chain forward" {
				chains++
			}
		}
		if chains != len(m.chains) {
			t.Errorf("step %d: %d chains, the full rendering has %d", step, len(m.chains), chains)
		}
		for _, c := range m.chains {
			if !strings.Contains(string(full), "\tchain "+c.name+" {\n"+c.body+"\t}\n") {
				t.Errorf("step %d: chain %s is not the full rendering's:\n%s", step, c.name, c.body)
			}
			for _, s := range nftpSetRef.FindAllStringSubmatch(c.body, -1) {
				if !slices.Contains(c.sets, s[1]) {
					t.Errorf("step %d: chain %s names set %s, not in its sets %v", step, c.name, s[1], c.sets)
				}
			}
		}
		if len(m.elems[0])+len(m.elems[1]) != strings.Count(string(full), " : jump ") {
			t.Errorf("step %d: %d map elements, the full rendering has %d", step, len(m.elems[0])+len(m.elems[1]), strings.Count(string(full), " : jump "))
		}
		g.change()
	}
}

// A random sequence of changes programmed with partial renderings, one after the other in
// one namespace, leaves the kernel's table exactly as the full rendering of the same Program
// leaves a fresh namespace; each input names only what changed.
func TestNFTablesPartialMatchesFull(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("NFT_PARTIAL_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("NFT_PARTIAL_SEED: %v", err)
		}
	}
	why := fmt.Sprintf("seed %d (replay: NFT_PARTIAL_SEED=%d)", seed, seed)
	t.Log(why)
	const steps = 40
	g := newNFTPGen(seed)
	nsp, _ := netnstest.Scratch(t)
	prog := g.compile(t)
	in, state, _ := RenderNFTablesPartial(nil, prog)
	nftpApply(t, nsp, in, "full rendering")
	partial := 0
	for step := 1; step <= steps; step++ {
		what := g.change()
		p := g.compile(t)
		in, next, cnt := RenderNFTablesPartial(state, p)
		checkNFTPartialOrder(t, string(in))
		nftpCheckMinimal(t, prog, p, string(in), cnt.Changed)
		if again, _, _ := RenderNFTablesPartial(state, p); string(again) != string(in) {
			t.Errorf("step %d: another input the second time:\n%s\n---\n%s", step, in, again)
		}
		if err := ApplyNFTables(nsp, in); err != nil {
			t.Fatalf("step %d (%s, %s): %v\ninput:\n%s", step, what, why, err, in)
		}
		state, prog = next, p
		if cnt.Changed > 0 {
			partial++
		}
		full, fcnt := RenderNFTables(p)
		fresh, del := netnstest.Scratch(t)
		nftpApply(t, fresh, full, "full rendering in a fresh namespace")
		got, want := nftPartialListing(t, nsp), nftPartialListing(t, fresh)
		del()
		if !nftpSameListing(t, got, want) {
			t.Fatalf("step %d (%s, %s): the partial rendering left another table than the full one; input:\n%s", step, what, why, in)
		}
		if fcnt.Changed = cnt.Changed; cnt != fcnt {
			t.Errorf("step %d (%s): counts %+v, the full rendering's %+v", step, what, cnt, fcnt)
		}
		if t.Failed() {
			t.Fatalf("step %d (%s, %s); input:\n%s", step, what, why, in)
		}
		t.Logf("step %d: %s: %d changes, %d bytes", step, what, cnt.Changed, len(in))
	}
	// Many random changes touch nothing this node holds (a policy that selects no local pod):
	// 18 of 40 steps changed something in one CI run. A third still proves the sequence
	// exercised the partial renderings.
	if partial < steps/3 {
		t.Errorf("only %d of %d steps changed something (%s)", partial, steps, why)
	}
}

// standingCluster is n pods in namespace bench (pod i labelled n=i, every other one local)
// plus a local client and a remote server, with the pods 0..pols/2-1 isolated both ways by
// a policy each way from / to the client and server (BenchmarkLab20kPolicies's load), and
// the policy that isolates the client too.
func nftpStandingCluster(n, pols int) ([]Pod, []Namespace, []networkingv1.NetworkPolicy, networkingv1.NetworkPolicy) {
	pods := make([]Pod, 0, n+2)
	for i := range n {
		pods = append(pods, Pod{Name: fmt.Sprintf("s%d", i), Namespace: "bench", IP: fmt.Sprintf("10.%d.%d.%d", 100+i/62500, i/250%250, 2+i%250),
			Local: i%2 == 0, Labels: map[string]string{"role": "silent", "n": strconv.Itoa(i)}})
	}
	pods = append(pods,
		Pod{Name: "client", Namespace: "bench", IP: "10.99.0.2", Local: true, Labels: map[string]string{"role": "client"}},
		Pod{Name: "server", Namespace: "bench", IP: "10.99.1.2", Labels: map[string]string{"role": "server"}})
	pair := []networkingv1.NetworkPolicyPeer{podPeer(expr("role", metav1.LabelSelectorOpIn, "client", "server"))}
	var ps []networkingv1.NetworkPolicy
	for j := range pols / 2 {
		sel := *ml("n", strconv.Itoa(j))
		ps = append(ps,
			netpol("bench", fmt.Sprintf("s%d-in", j), networkingv1.NetworkPolicySpec{PodSelector: sel,
				Ingress: []networkingv1.NetworkPolicyIngressRule{{From: pair}}}),
			netpol("bench", fmt.Sprintf("s%d-out", j), networkingv1.NetworkPolicySpec{PodSelector: sel, PolicyTypes: types(egressT),
				Egress: []networkingv1.NetworkPolicyEgressRule{{To: pair}}}))
	}
	extra := netpol("bench", "client-in", networkingv1.NetworkPolicySpec{PodSelector: *ml("role", "client"),
		Ingress: []networkingv1.NetworkPolicyIngressRule{{From: pair, Ports: []networkingv1.NetworkPolicyPort{tcp(8080)}}}})
	return pods, []Namespace{ns("bench")}, ps, extra
}

// Adding one isolating policy to 200 or 2,000 standing ones (over 1,000 pods) writes the
// same input: the new policy's chain, the client's pod chain, its map element; removing it
// again deletes them. The 2,000 case is applied and checked in a kernel.
func TestNFTablesPartialAddOneSize(t *testing.T) {
	var adds, removes []string
	var big struct { // the 2,000 policies' renderings, and the Program with the added one
		full, add, remove []byte
		with              *Program
	}
	for _, n := range []int{200, 2000} {
		pods, nss, pols, extra := nftpStandingCluster(1000, n)
		base, err := Compile(pods, nss, pols)
		if err != nil {
			t.Fatal(err)
		}
		with, err := Compile(pods, nss, append(slices.Clone(pols), extra))
		if err != nil {
			t.Fatal(err)
		}
		if len(base.Policies) != n/2 { // only the local pods' policies
			t.Fatalf("%d policies: %d compiled", n, len(base.Policies))
		}
		full, st, _ := RenderNFTablesPartial(nil, base)
		add, st2, c := RenderNFTablesPartial(st, with)
		if c.Changed != 3 {
			t.Errorf("%d policies: adding one changes %d objects, want 3 (policy chain, pod chain, element):\n%s", n, c.Changed, add)
		}
		remove, _, rc := RenderNFTablesPartial(st2, base)
		if rc.Changed != 3 {
			t.Errorf("%d policies: removing it changes %d objects, want 3:\n%s", n, rc.Changed, remove)
		}
		client := PodChainName("bench", "client")
		polChain := PolicyChainName("bench", "client-in")
		nftpCheckMinimal(t, base, with, string(add), c.Changed)
		nftpCheckMinimal(t, with, base, string(remove), rc.Changed)
		for _, in := range []string{string(add), string(remove)} {
			for _, l := range strings.Split(strings.TrimSpace(in), "\n") {
				if strings.Contains(l, PolicyChainPrefix) && !strings.Contains(l, polChain) ||
					strings.Contains(l, PodChainPrefix) && !strings.Contains(l, client) {
					t.Errorf("%d policies: a line about another policy or pod: %s", n, l)
				}
			}
			checkNFTPartialOrder(t, in)
		}
		t.Logf("%d policies: full rendering %d bytes, adding one %d bytes, removing it %d bytes", n, len(full), len(add), len(remove))
		adds, removes = append(adds, string(add)), append(removes, string(remove))
		big.full, big.add, big.remove, big.with = full, add, remove, with
	}
	if adds[0] != adds[1] || removes[0] != removes[1] {
		t.Errorf("the input depends on the number of standing policies:\n%s\n---\n%s\n---\n%s\n---\n%s", adds[0], adds[1], removes[0], removes[1])
	}
	t.Logf("adding:\n%s\nremoving:\n%s", adds[0], removes[0])

	// The 2,000 policies in a kernel.
	nsp, _ := netnstest.Scratch(t)
	nftpApply(t, nsp, big.full, "full rendering")
	before := nftPartialListing(t, nsp)
	nftpApply(t, nsp, big.add, "adding one")
	fresh, del := netnstest.Scratch(t)
	fullWith, _ := RenderNFTables(big.with)
	nftpApply(t, fresh, fullWith, "full rendering with it")
	nftpSameListing(t, nftPartialListing(t, nsp), nftPartialListing(t, fresh))
	del()
	nftpApply(t, nsp, big.remove, "removing it")
	nftpSameListing(t, nftPartialListing(t, nsp), before)
}

// The kernel (6.2 and later) lets a transaction delete a chain after deleting, earlier in it,
// the map element that jumped to it, and a set after flushing the chain whose rule used it;
// the other way round both are busy (EBUSY), and an element cannot be added over one with
// another verdict. RenderNFTablesPartial writes the order that works.
func TestNFTablesPartialDeleteOrder(t *testing.T) {
	nsp, _ := netnstest.Scratch(t)
	pods := []Pod{{Name: "a", Namespace: "x", IP: "10.244.0.2", Local: true, Labels: map[string]string{"app": "a"}},
		{Name: "b", Namespace: "x", IP: "10.244.0.3", Labels: map[string]string{"app": "b"}}}
	nss := []Namespace{ns("x")}
	pol := netpol("x", "a-in", networkingv1.NetworkPolicySpec{PodSelector: *ml("app", "a"),
		Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{podPeer(ml("app", "b"))}}}})
	with, err := Compile(pods, nss, []networkingv1.NetworkPolicy{pol})
	if err != nil {
		t.Fatal(err)
	}
	without, _ := Compile(pods, nss, nil)
	full, st, _ := RenderNFTablesPartial(nil, with)
	nftpApply(t, nsp, full, "full rendering")

	podChain := with.Pods[0].Chain + "-ingress"
	polChain := with.Policies[0].Name + "-ingress"
	set := with.Policies[0].Ingress[0].Peers[0].Set
	tbl := "ip " + NFTablesTable
	for what, wrong := range map[string]string{
		"a chain a map element still jumps to": fmt.Sprintf("flush chain %[1]s %[2]s\ndelete chain %[1]s %[2]s\ndelete element %[1]s pod-ingress { 10.244.0.2 }\n", tbl, podChain),
		"a set a rule still uses":              fmt.Sprintf("delete set %[1]s %[2]s\nflush chain %[1]s %[3]s\n", tbl, set, polChain),
		"a chain a rule still jumps to":        fmt.Sprintf("flush chain %[1]s %[2]s\ndelete chain %[1]s %[2]s\nflush chain %[1]s %[3]s\n", tbl, polChain, podChain),
		"an element over one with another verdict": fmt.Sprintf("add map %s pod-ingress { type ipv4_addr : verdict ; elements = { 10.244.0.2 : jump %s } ; }\n",
			tbl, polChain),
	} {
		if err := ApplyNFTables(nsp, []byte(wrong)); err == nil {
			t.Errorf("the kernel accepted %s:\n%s", what, wrong)
		}
	}
	in, _, c := RenderNFTablesPartial(st, without)
	s := string(in)
	for _, want := range []string{
		"delete element " + tbl + " pod-ingress { 10.244.0.2 }\n",
		"delete chain " + tbl + " " + podChain + "\n",
		"delete chain " + tbl + " " + polChain + "\n",
		"delete set " + tbl + " " + set + "\n",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("missing %q in\n%s", want, s)
		}
	}
	if c.Changed != 4 {
		t.Errorf("%d changes, want 4 (2 chains, a set, an element)", c.Changed)
	}
	checkNFTPartialOrder(t, s)
	nftpApply(t, nsp, in, "the partial rendering")
	fresh, _ := netnstest.Scratch(t)
	fullWithout, _ := RenderNFTables(without)
	nftpApply(t, fresh, fullWithout, "full rendering")
	nftpSameListing(t, nftPartialListing(t, nsp), nftPartialListing(t, fresh))
}

// Programs not made by Compile may change a set's members, or its type, under the same name:
// the members are replaced (flush set, then the new elements), a type change gives a full
// rendering.
func TestNFTablesPartialSameNameSets(t *testing.T) {
	prog := func(kind SetKind, members ...Member) *Program {
		return &Program{
			Sets:     []Set{{Name: "KUBE-SRC-HANDMADE", Kind: kind, Members: members}},
			Policies: []PolicyChain{{Name: "KUBE-NWPLCY-HANDMADE", Ingress: []Rule{{Peers: []Peer{{Set: "KUBE-SRC-HANDMADE"}}, Ports: []PortMatch{{Any: true}}}}}},
			Pods:     []PodFirewall{{Pod: "x/a", IP: "10.244.0.2", Chain: "KUBE-POD-FW-HANDMADE", IngressOf: []string{"KUBE-NWPLCY-HANDMADE"}}},
		}
	}
	steps := []*Program{
		prog(SetNets, Member{Addr: "10.244.0.0/16"}, Member{Addr: "10.244.0.0/24", Except: true}),
		prog(SetNets, Member{Addr: "10.244.0.0/16"}, Member{Addr: "10.244.1.0/24", Except: true}),
		prog(SetAddrs, Member{Addr: "10.244.0.7"}),
		prog(SetAddrs, Member{Addr: "10.244.0.7"}, Member{Addr: "10.244.0.8"}),
	}
	nsp, _ := netnstest.Scratch(t)
	in, st, _ := RenderNFTablesPartial(nil, steps[0])
	nftpApply(t, nsp, in, "full rendering")
	for i, p := range steps[1:] {
		in, next, c := RenderNFTablesPartial(st, p)
		full, _ := RenderNFTables(p)
		switch s := string(in); i {
		case 0, 2: // members changed
			if !strings.HasPrefix(s, "flush set ip "+NFTablesTable+" KUBE-SRC-HANDMADE\nadd set ") || c.Changed != 1 {
				t.Errorf("step %d: members changed: %d changes\n%s", i+1, c.Changed, s)
			}
		case 1: // type changed
			if s != string(full) || c.Changed != 0 {
				t.Errorf("step %d: a type change is not a full rendering", i+1)
			}
		}
		nftpApply(t, nsp, in, fmt.Sprintf("step %d", i+1))
		st = next
		fresh, del := netnstest.Scratch(t)
		nftpApply(t, fresh, full, "full rendering")
		nftpSameListing(t, nftPartialListing(t, nsp), nftPartialListing(t, fresh))
		del()
	}
}

// A pod replaced by another at the same address (another name: another pod chain) changes
// the verdict of its map elements: they are deleted, then added again, in one transaction.
func TestNFTablesPartialChangedElement(t *testing.T) {
	nss := []Namespace{ns("x")}
	podsOf := func(name string) []Pod {
		return []Pod{{Name: name, Namespace: "x", IP: "10.244.0.2", Local: true, Labels: map[string]string{"app": "a"}},
			{Name: "b", Namespace: "x", IP: "10.244.0.3", Labels: map[string]string{"app": "b"}}}
	}
	pols := []networkingv1.NetworkPolicy{netpol("x", "a", networkingv1.NetworkPolicySpec{PodSelector: *ml("app", "a"), PolicyTypes: types(ingressT, egressT),
		Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{podPeer(ml("app", "b"))}}},
		Egress:  []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{podPeer(ml("app", "b"))}}}})}
	before, err := Compile(podsOf("a1"), nss, pols)
	if err != nil {
		t.Fatal(err)
	}
	after, _ := Compile(podsOf("a2"), nss, pols)
	full, st, _ := RenderNFTablesPartial(nil, before)
	in, _, c := RenderNFTablesPartial(st, after)
	s := string(in)
	tbl := "ip " + NFTablesTable
	for _, m := range nftpMaps {
		del := strings.Index(s, "delete element "+tbl+" "+m+" { 10.244.0.2 }\n")
		add := strings.Index(s, "add map "+tbl+" "+m+" {")
		if del < 0 || add < del || !strings.Contains(s[add:], "10.244.0.2 : jump "+PodChainName("x", "a2")) {
			t.Errorf("%s: the changed element is not deleted, then added:\n%s", m, s)
		}
	}
	// 2 chains gone, 2 added, 2 elements changed.
	if c.Changed != 6 {
		t.Errorf("%d changes, want 6:\n%s", c.Changed, s)
	}
	checkNFTPartialOrder(t, s)
	nftpCheckMinimal(t, before, after, s, c.Changed)

	nsp, _ := netnstest.Scratch(t)
	nftpApply(t, nsp, full, "full rendering")
	nftpApply(t, nsp, in, "the partial rendering")
	fresh, _ := netnstest.Scratch(t)
	fullAfter, _ := RenderNFTables(after)
	nftpApply(t, fresh, fullAfter, "full rendering")
	nftpSameListing(t, nftPartialListing(t, nsp), nftPartialListing(t, fresh))
}
