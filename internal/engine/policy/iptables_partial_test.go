package policy

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cnibench/cnibench/internal/netns/netnstest"
	"github.com/cnibench/cnibench/internal/nftnl/nftnltest"
)

// iptPartialRun runs argv in the namespace at ns and returns its standard output.
func iptPartialRun(t testing.TB, ns string, stdin []byte, argv ...string) string {
	t.Helper()
	cmd := exec.Command("nsenter", append([]string{"--net=" + ns, "--"}, argv...)...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v in %s: %v: %s", argv, ns, err, stderr.String())
	}
	return string(out)
}

// iptSnapshot is what a namespace's filter table and ipsets hold, normalized so that two
// namespaces programmed differently compare equal when they enforce the same rules: chains as
// a sorted list of declarations (name and policy, counters dropped), each chain's rules in
// order; sets by name with their type, family and maxelem (not hashsize, bucketsize nor the
// random initval) and their members sorted.
func iptSnapshot(t testing.TB, ns, backend string) string {
	t.Helper()
	save, _, err := iptTools(backend)
	if err != nil {
		t.Fatal(err)
	}
	var decls []string
	rules := map[string][]string{}
	for _, l := range strings.Split(iptPartialRun(t, ns, nil, save, "-t", "filter"), "\n") {
		switch {
		case strings.HasPrefix(l, ":"):
			f := strings.Fields(l[1:])
			decls = append(decls, f[0]+" "+f[1])
		case strings.HasPrefix(l, "-A "):
			ch := strings.Fields(l)[1]
			rules[ch] = append(rules[ch], l)
		}
	}
	sort.Strings(decls)
	var b strings.Builder
	for _, d := range decls {
		fmt.Fprintf(&b, ":%s\n", d)
		for _, r := range rules[strings.Fields(d)[0]] {
			fmt.Fprintf(&b, "  %s\n", r)
		}
		delete(rules, strings.Fields(d)[0])
	}
	for ch := range rules {
		fmt.Fprintf(&b, "rules of the undeclared chain %s\n", ch)
	}
	creates := map[string]string{}
	members := map[string][]string{}
	for _, l := range strings.Split(iptPartialRun(t, ns, nil, "ipset", "save"), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "create":
			var keep []string
			for i := 2; i < len(f); i++ {
				switch f[i] {
				case "hashsize", "bucketsize", "initval":
					i++
				default:
					keep = append(keep, f[i])
				}
			}
			creates[f[1]] = strings.Join(keep, " ")
		case "add":
			members[f[1]] = append(members[f[1]], strings.Join(f[2:], " "))
		}
	}
	names := make([]string, 0, len(creates))
	for n := range creates {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		m := members[n]
		sort.Strings(m)
		fmt.Fprintf(&b, "set %s %s\n  %s\n", n, creates[n], strings.Join(m, "\n  "))
	}
	return b.String()
}

// iptPartialCluster is a random cluster that changes: two namespaces, pods on this node (Local)
// and on others, policies from the property test's generator (selectors of every kind,
// ipBlocks with excepts, named ports, port ranges, egress).
type iptPartialCluster struct {
	c       propCase
	nextPol int
	nextPod int
}

func newIPTPartialCluster(r *rand.Rand) *iptPartialCluster {
	pc := &iptPartialCluster{}
	pc.c.nss = []Namespace{ns("ns0", "team", "x"), ns("ns1", "team", "y", "env", "x")}
	for range 14 {
		pc.addPod(r)
	}
	for range 3 {
		pc.addPolicy(r)
	}
	return pc
}

// addPod adds a pod at a free address of 10.0.0.1-30 (where the generator's ipBlocks cut).
func (pc *iptPartialCluster) addPod(r *rand.Rand) string {
	used := map[string]bool{}
	for _, p := range pc.c.pods {
		used[p.IP] = true
	}
	var ip string
	for ip == "" || used[ip] {
		ip = addrAt(1 + r.IntN(30)).String()
	}
	pc.nextPod++
	p := Pod{Name: "p" + strconv.Itoa(pc.nextPod), Namespace: pick(r, pc.c.nss).Name, IP: ip, Labels: pc.labels(r), Local: r.IntN(3) != 0}
	for range r.IntN(3) {
		p.Ports = append(p.Ports, NamedPort{Name: pick(r, portNames), Protocol: pick(r, []string{"", "TCP", "UDP"}), Port: pick(r, portNums)})
	}
	pc.c.pods = append(pc.c.pods, p)
	node := 1 // for the dump: this node is node0
	if p.Local {
		node = 0
	}
	pc.c.node = append(pc.c.node, node)
	return fmt.Sprintf("add pod %s/%s %s local=%v", p.Namespace, p.Name, ip, p.Local)
}

func (pc *iptPartialCluster) labels(r *rand.Rand) map[string]string {
	l := map[string]string{}
	for _, k := range podKeys {
		if r.IntN(10) < 7 {
			l[k] = pick(r, podValues)
		}
	}
	return l
}

func (pc *iptPartialCluster) addPolicy(r *rand.Rand) string {
	pc.nextPol++
	p := pc.c.genPolicy(r, "pol"+strconv.Itoa(pc.nextPol))
	pc.c.pols = append(pc.c.pols, p)
	return "add policy " + p.Namespace + "/" + p.Name
}

// step makes one random change and says what it was.
func (pc *iptPartialCluster) step(r *rand.Rand) string {
	pols, pods := pc.c.pols, pc.c.pods
	switch k := r.IntN(10); {
	case k < 3 || len(pols) < 2:
		return pc.addPolicy(r)
	case k < 5: // remove
		i := r.IntN(len(pols))
		p := pols[i]
		pc.c.pols = slices.Delete(slices.Clone(pols), i, i+1)
		return "remove policy " + p.Namespace + "/" + p.Name
	case k < 8: // change: a new spec under the same name
		i := r.IntN(len(pols))
		p := pc.c.genPolicy(r, pols[i].Name)
		p.Namespace = pols[i].Namespace
		pc.c.pols = slices.Clone(pols)
		pc.c.pols[i] = p
		return "change policy " + p.Namespace + "/" + p.Name
	case k == 8: // relabel a pod (sets change, pods come in or out of selections)
		i := r.IntN(len(pods))
		pc.c.pods = slices.Clone(pods)
		pc.c.pods[i].Labels = pc.labels(r)
		return fmt.Sprintf("relabel pod %s to %v", pods[i].Name, pc.c.pods[i].Labels)
	default:
		if r.IntN(2) == 0 && len(pods) > 6 {
			i := r.IntN(len(pods))
			pc.c.pods = slices.Delete(slices.Clone(pods), i, i+1)
			pc.c.node = slices.Delete(slices.Clone(pc.c.node), i, i+1)
			return "remove pod " + pods[i].Name
		}
		return pc.addPod(r)
	}
}

// iptIsolateAll are policies that isolate every pod of both namespaces, both ways, admitting
// everything: adding them grows KUBE-ROUTER-FORWARD by many jumps, removing them shrinks it.
func iptIsolateAll() []networkingv1.NetworkPolicy {
	var out []networkingv1.NetworkPolicy
	for _, n := range []string{"ns0", "ns1"} {
		out = append(out, netpol(n, "isolate-all", networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{},
			PolicyTypes: types(ingressT, egressT),
			Ingress:     []networkingv1.NetworkPolicyIngressRule{{}}, Egress: []networkingv1.NetworkPolicyEgressRule{{}}}))
	}
	return out
}

// iptPartialSeed is the seed of the random sequences: IPT_PARTIAL_SEED, else the clock's.
func iptPartialSeed(t *testing.T) uint64 {
	if s := os.Getenv("IPT_PARTIAL_SEED"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("IPT_PARTIAL_SEED: %v", err)
		}
		return seed
	}
	return uint64(time.Now().UnixNano())
}

// TestIPTablesPartialMatchesFull: a random sequence of changes to a cluster (policies added,
// removed, changed; pods added, removed, relabelled), each compiled and applied as a partial
// rendering over the previous one in one namespace, leaves exactly what a full rendering of
// the same Program leaves in a fresh namespace (filter table and ipsets, normalized: see
// iptSnapshot; an unrelated rule and chain of the table are kept in both), with iptables-nft
// and iptables-legacy. Every step after the first is partial, with the full rendering's
// counts. Two fixed steps add policies isolating every pod, then remove every policy, so that
// the jumps of KUBE-ROUTER-FORWARD are both edited in place and rewritten. With iptables-nft
// the sequence runs twice: with the table fetched in part, as small changes are applied, and
// whole, as big ones are (see ApplyIPTablesPartial). Replay a failure with
// IPT_PARTIAL_SEED=<seed>.
func TestIPTablesPartialMatchesFull(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces)")
	}
	seed := iptPartialSeed(t)
	t.Logf("seed %d (replay: IPT_PARTIAL_SEED=%d)", seed, seed)
	for _, backend := range []string{"nft", "legacy"} {
		t.Run(backend, func(t *testing.T) { testIPTablesPartialMatchesFull(t, backend, seed) })
	}
	// iptables-nft-restore with the whole table fetched (what a big change does).
	t.Run("nft-whole-table", func(t *testing.T) {
		defer func(n int) { iptWholeTableCache = n }(iptWholeTableCache)
		iptWholeTableCache = 0
		testIPTablesPartialMatchesFull(t, "nft", seed)
	})
}

func testIPTablesPartialMatchesFull(t *testing.T, backend string, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	pc := newIPTPartialCluster(r)
	chk := newIPTPartialChecker(t, backend)
	const steps = 30
	var edited, rewritten, setsMade, setsGone, chainsGone int
	for step := 0; step <= steps; step++ {
		what := "initial"
		switch {
		case step == 4:
			pc.c.pols = append(slices.Clone(pc.c.pols), iptIsolateAll()...)
			what = "add isolate-all"
		case step == 9:
			pc.c.pols = nil
			what = "remove every policy"
		case step > 0:
			what = pc.step(r)
		}
		prog, err := Compile(pc.c.pods, pc.c.nss, pc.c.pols)
		if err != nil {
			t.Fatalf("seed %d, step %d (%s): compile: %v", seed, step, what, err)
		}
		rendering := chk.step(prog, fmt.Sprintf("seed %d (IPT_PARTIAL_SEED=%d), step %d (%s)", seed, seed, step, what),
			func() string { return "cluster:\n" + pc.c.dump() })
		in := string(rendering.Filter)
		if !rendering.Full {
			if strings.Contains(in, "\n-I "+IPTablesTopChain+" ") || strings.Contains(in, "\n-D "+IPTablesTopChain+" ") {
				edited++
			}
			if strings.Contains(in, "\n:"+IPTablesTopChain+" ") {
				rewritten++
			}
			setsMade += strings.Count(string(rendering.SetsBefore), "create ")
			setsGone += strings.Count(string(rendering.SetsAfter), "destroy ")
			chainsGone += strings.Count(in, "\n-X ")
		}
	}
	t.Logf("%s: %d steps: KUBE-ROUTER-FORWARD edited in %d, rewritten in %d; %d sets created, %d destroyed, %d chains deleted",
		backend, steps, edited, rewritten, setsMade, setsGone, chainsGone)
	if edited == 0 || rewritten == 0 || setsMade == 0 || setsGone == 0 || chainsGone == 0 {
		t.Errorf("seed %d: the sequence did not exercise every kind of change", seed)
	}
}

// TestIPTablesPartialIdle: hand-written Programs with policies no local pod uses (Compile
// leaves them out, kube-router renders them: KUBE-ROUTER-IDLE jumps to them) changed
// partially leave what a full rendering leaves: KUBE-ROUTER-IDLE edited in place and
// rewritten, chains moving between idle and used.
func TestIPTablesPartialIdle(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces)")
	}
	for _, backend := range []string{"nft", "legacy"} {
		t.Run(backend, func(t *testing.T) {
			chk := newIPTPartialChecker(t, backend)
			var edited, rewritten int
			for i, pi := range [][2]int{{10, 8}, {10, 9}, {11, 9}, {9, 9}, {12, 2}, {12, 0}, {3, 6}} {
				r := chk.step(applyBenchProgram(pi[0], pi[1]), fmt.Sprintf("step %d: %d pods, %d idle", i, pi[0], pi[1]), nil)
				in := string(r.Filter)
				if i > 0 && (strings.Contains(in, "\n-I "+IPTablesIdleChain+" ") || strings.Contains(in, "\n-D "+IPTablesIdleChain+" ")) {
					edited++
				}
				if i > 0 && strings.Contains(in, "\n:"+IPTablesIdleChain+" ") {
					rewritten++
				}
			}
			if edited == 0 || rewritten == 0 {
				t.Errorf("%s edited %d times, rewritten %d times", IPTablesIdleChain, edited, rewritten)
			}
		})
	}
}

// iptPartialChecker applies a sequence of Programs partially in one namespace and checks,
// after each, that it holds what a full rendering leaves in a fresh namespace.
type iptPartialChecker struct {
	t                testing.TB
	ns               string
	backend, restore string
	state            *IPTState
	steps            int
}

// iptOther is a rule and a chain of someone else in the filter table.
const iptOther = "*filter\n:OTHER - [0:0]\n-A OTHER -j RETURN\n-A FORWARD -i lo -j OTHER\nCOMMIT\n"

func newIPTPartialChecker(t testing.TB, backend string) *iptPartialChecker {
	_, restore, err := iptTools(backend)
	if err != nil {
		t.Fatal(err)
	}
	ns, _ := netnstest.Scratch(t)
	iptPartialRun(t, ns, []byte(iptOther), restore, "--noflush")
	return &iptPartialChecker{t: t, ns: ns, backend: backend, restore: restore}
}

// step renders prog as a change from the last step (the first step: a full rendering),
// checks the rendering's kind and counts, applies it, compares the namespace with a fresh
// one programmed with RenderIPTables + ApplyIPTables, and returns the rendering. what
// names the step for failures, detail (if not nil) tells more.
func (c *iptPartialChecker) step(prog *Program, what string, detail func() string) IPTPartial {
	t := c.t
	t.Helper()
	first := c.steps == 0
	c.steps++
	fail := func(format string, args ...any) {
		t.Helper()
		more := ""
		if detail != nil {
			more = "\n" + detail()
		}
		t.Fatalf("%s: %s: %s%s", c.backend, what, fmt.Sprintf(format, args...), more)
	}
	rendering, next, cnt := RenderIPTablesPartial(c.state, prog)
	ipset, filter, full := RenderIPTables(prog)
	if rendering.Full != first {
		fail("Full %v", rendering.Full)
	}
	if first && (!bytes.Equal(rendering.SetsBefore, ipset) || !bytes.Equal(rendering.Filter, filter) || rendering.SetsAfter != nil) {
		fail("the first rendering is not RenderIPTables's")
	}
	in := string(rendering.Filter)
	inputs := func() string { return string(rendering.SetsBefore) + in + string(rendering.SetsAfter) }
	empty := rendering.SetsBefore == nil && rendering.Filter == nil && rendering.SetsAfter == nil
	want := full
	want.Changed = cnt.Changed
	if cnt != want || (first && cnt.Changed != 0) || (!first && (cnt.Changed == 0) != empty) {
		fail("counts %+v, want %+v (Changed 0 for the full rendering, and for an empty change only)", cnt, full)
	}
	if !first {
		// Changed counts what the inputs touch: sets created or destroyed, chains declared
		// (written or deleted), the top and idle chains edited.
		touched := strings.Count(string(rendering.SetsBefore), "create ") + strings.Count(string(rendering.SetsAfter), "destroy ") +
			strings.Count(in, "\n:")
		for _, ch := range []string{IPTablesTopChain, IPTablesIdleChain} {
			if !strings.Contains(in, "\n:"+ch+" ") && (strings.Contains(in, "\n-I "+ch+" ") || strings.Contains(in, "\n-D "+ch+" ")) {
				touched++
			}
		}
		if touched != cnt.Changed {
			fail("Changed %d, the inputs touch %d:\n%s", cnt.Changed, touched, inputs())
		}
	}
	if err := ApplyIPTablesPartial(c.ns, c.backend, rendering); err != nil {
		fail("apply: %v\ninput:\n%s", err, inputs())
	}
	c.state = next

	fresh, del := netnstest.Scratch(t)
	iptPartialRun(t, fresh, []byte(iptOther), c.restore, "--noflush")
	if err := ApplyIPTables(fresh, c.backend, ipset, filter); err != nil {
		fail("full apply: %v", err)
	}
	got, fullSnap := iptSnapshot(t, c.ns, c.backend), iptSnapshot(t, fresh, c.backend)
	del()
	if got != fullSnap {
		fail("the partially programmed namespace differs from a fresh full one: %s\ninput:\n%s", nftnltest.LineDiff("partial", "full", got, fullSnap), inputs())
	}
	return rendering
}

// iptScaleCluster is n pods s0..s(n-1) of namespace t (labelled role=silent, n=<i>; local when
// local(i)), a client and a server (role=client on this node, role=server elsewhere) and a
// local pod "extra" no policy selects; pols policies, two per pod from s0 on as the lab's
// p2p-policies load has them (ingress from the client and server, egress to them), and
// iptExtraPolicy, which isolates "extra".
func iptScaleCluster(n, pols int, local func(int) bool) ([]Pod, []Namespace, []networkingv1.NetworkPolicy) {
	pods := make([]Pod, 0, n+3)
	for i := range n {
		pods = append(pods, Pod{Name: fmt.Sprintf("s%d", i), Namespace: "t", IP: fmt.Sprintf("10.244.%d.%d", i/250, i%250+2),
			Labels: map[string]string{"role": "silent", "n": strconv.Itoa(i)}, Local: local(i)})
	}
	pods = append(pods,
		Pod{Name: "client", Namespace: "t", IP: "10.245.0.2", Labels: map[string]string{"role": "client"}, Local: true},
		Pod{Name: "server", Namespace: "t", IP: "10.245.0.3", Labels: map[string]string{"role": "server"}},
		Pod{Name: "extra", Namespace: "t", IP: "10.245.0.4", Labels: map[string]string{"role": "silent", "n": "extra"}, Local: true})
	var out []networkingv1.NetworkPolicy
	for j := 0; len(out) < pols; j++ {
		sel := metav1.LabelSelector{MatchLabels: map[string]string{"n": strconv.Itoa(j)}}
		out = append(out,
			netpol("t", fmt.Sprintf("s%d-in", j), networkingv1.NetworkPolicySpec{PodSelector: sel,
				Ingress: []networkingv1.NetworkPolicyIngressRule{{From: iptPair()}}}),
			netpol("t", fmt.Sprintf("s%d-out", j), networkingv1.NetworkPolicySpec{PodSelector: sel, PolicyTypes: types(egressT),
				Egress: []networkingv1.NetworkPolicyEgressRule{{To: iptPair()}}}))
	}
	return pods, []Namespace{ns("t")}, out[:pols]
}

func iptPair() []networkingv1.NetworkPolicyPeer {
	return []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: "role", Operator: metav1.LabelSelectorOpIn, Values: []string{"client", "server"}}}}}}
}

// iptExtraPolicy isolates pod "extra" for ingress (from the client and server).
func iptExtraPolicy() networkingv1.NetworkPolicy {
	return netpol("t", "extra-in", networkingv1.NetworkPolicySpec{
		PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"n": "extra"}},
		Ingress:     []networkingv1.NetworkPolicyIngressRule{{From: iptPair()}}})
}

// TestIPTablesPartialSmallChange: adding one policy that isolates one more pod, over 1,000
// local pods, writes the same input whether 200 or 2,000 policies stand: the new policy chain
// and pod chain, one jump inserted into KUBE-ROUTER-FORWARD, no set (the peers' set exists).
// A full rendering grows with them.
func TestIPTablesPartialSmallChange(t *testing.T) {
	inputs := map[int]IPTPartial{}
	fulls := map[int]int{}
	for _, standing := range []int{200, 2000} {
		pods, nss, pols := iptScaleCluster(1000, standing, func(int) bool { return true })
		base, err := Compile(pods, nss, pols)
		if err != nil {
			t.Fatal(err)
		}
		_, state, _ := RenderIPTablesPartial(nil, base)
		prog, err := Compile(pods, nss, append(pols, iptExtraPolicy()))
		if err != nil {
			t.Fatal(err)
		}
		r, _, cnt := RenderIPTablesPartial(state, prog)
		_, filter, full := RenderIPTables(prog)
		full.Changed = 3 // KUBE-ROUTER-FORWARD, the pod chain, the policy chain
		if r.Full || cnt != full || r.SetsBefore != nil || r.SetsAfter != nil {
			t.Errorf("%d policies: full %v, counts %+v (want %+v), sets %q %q", standing, r.Full, cnt, full, r.SetsBefore, r.SetsAfter)
		}
		in := string(r.Filter)
		pod, pol := PodChainName("t", "extra"), PolicyChainName("t", "extra-in")
		if strings.Count(in, "\n:") != 2 || !strings.Contains(in, "\n:"+pod+" ") || !strings.Contains(in, "\n:"+pol+" ") ||
			strings.Count(in, "\n-I "+IPTablesTopChain+" ") != 1 || !strings.Contains(in, " -d 10.245.0.4/32 -j "+pod+"\n") ||
			strings.Contains(in, "\n-D ") || strings.Contains(in, "\n-X ") || strings.Count(in, "\n") != 10 {
			t.Errorf("%d policies: input\n%s", standing, in)
		}
		inputs[standing], fulls[standing] = r, len(filter)
	}
	small, big := inputs[200].Filter, inputs[2000].Filter
	if len(big) > len(small)+8 {
		t.Errorf("the input grows with the standing policies: %d bytes at 200, %d at 2,000", len(small), len(big))
	}
	if fulls[2000] < 5*fulls[200] {
		t.Errorf("full renderings of %d and %d bytes: the scale is wrong", fulls[200], fulls[2000])
	}
	t.Logf("adding one policy: %d bytes of input at 200 standing policies, %d at 2,000 (full renderings: %d, %d bytes)",
		len(small), len(big), fulls[200], fulls[2000])
}

// TestIPTablesPartialEdits: the in-place edits of KUBE-ROUTER-FORWARD / KUBE-ROUTER-IDLE
// leave the new list, the rewrite is chosen when shorter, and a rule listed twice forbids
// edits (-D would delete either copy).
func TestIPTablesPartialEdits(t *testing.T) {
	lines := func(rules ...string) string {
		var b strings.Builder
		for _, r := range rules {
			b.WriteString("-A C " + r + "\n")
		}
		return b.String()
	}
	// apply plays -D / -I over a list, as iptables does.
	apply := func(old []string, edits []string) []string {
		list := slices.Clone(old)
		for _, e := range edits {
			f := strings.Fields(strings.TrimSuffix(e, "\n"))
			switch f[0] {
			case "-D":
				i := slices.Index(list, strings.Join(f[2:], " "))
				if i < 0 {
					t.Fatalf("%q deletes no rule of %v", e, list)
				}
				list = slices.Delete(list, i, i+1)
			case "-I":
				n, _ := strconv.Atoi(f[2])
				if n < 1 || n > len(list)+1 {
					t.Fatalf("%q: position out of %v", e, list)
				}
				list = slices.Insert(list, n-1, strings.Join(f[3:], " "))
			}
		}
		return list
	}
	for _, c := range []struct {
		old, new []string
		edits    int // -1: rewrite
	}{
		{[]string{"a", "z"}, []string{"a", "b", "z"}, 1},
		{[]string{"a", "b", "c", "z"}, []string{"a", "c", "z"}, 1},
		{[]string{"a", "b", "c", "z"}, []string{"a", "x", "c", "y", "z"}, 3},
		{[]string{"a", "c", "b", "z"}, []string{"a", "b", "c", "z"}, 2},
		{[]string{"a", "b", "c", "d", "z"}, []string{"a", "z"}, -1},
		{[]string{"a", "b", "z"}, nil, -1},
		{[]string{"a", "a", "z"}, []string{"a", "z"}, -1},
		{[]string{"a", "z"}, []string{"a", "b", "b", "z"}, -1},
	} {
		edits, ok := iptRuleEdits("C", lines(c.old...), lines(c.new...))
		if !ok {
			if c.edits != -1 {
				t.Errorf("%v -> %v: rewritten, want %d edits", c.old, c.new, c.edits)
			}
			continue
		}
		if len(edits) != c.edits {
			t.Errorf("%v -> %v: edits %q, want %d", c.old, c.new, edits, c.edits)
		}
		if got := apply(c.old, edits); !reflect.DeepEqual(got, c.new) && !(len(got) == 0 && len(c.new) == 0) {
			t.Errorf("%v -> %v: edits %q leave %v", c.old, c.new, edits, got)
		}
	}
}

// TestIPTablesPartialPackets sends packets through partially applied rules: a node namespace
// routing between a client and a server namespace, whose policies are applied first in full
// (none), then changed partially: the server isolated for ingress with TCP 8080 admitted from
// the client (ping dropped, HTTP answered), then denied everything (HTTP dropped), then the
// policy removed (both pass again).
func TestIPTablesPartialPackets(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces)")
	}
	for _, tool := range []string{"busybox", "curl", "ping"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s", tool)
		}
	}
	node, _ := netnstest.Scratch(t)
	client, _ := netnstest.Scratch(t)
	server, _ := netnstest.Scratch(t)
	sh := func(ns, script string) {
		t.Helper()
		iptPartialRun(t, ns, nil, "sh", "-c", script)
	}
	name := func(ns string) string { return filepath.Base(ns) }
	sh(node, "ip link add c0 type veth peer name eth0 netns "+name(client)+
		" && ip link add s0 type veth peer name eth0 netns "+name(server)+
		" && ip addr add 10.77.1.1/24 dev c0 && ip addr add 10.77.2.1/24 dev s0 && ip link set c0 up && ip link set s0 up"+
		" && sysctl -qw net.ipv4.ip_forward=1")
	sh(client, "ip addr add 10.77.1.2/24 dev eth0 && ip link set eth0 up && ip link set lo up && ip route add default via 10.77.1.1")
	sh(server, "ip addr add 10.77.2.2/24 dev eth0 && ip link set eth0 up && ip link set lo up && ip route add default via 10.77.2.1")
	httpd := exec.Command("nsenter", "--net="+server, "--", "busybox", "httpd", "-f", "-p", "8080", "-h", t.TempDir())
	if err := httpd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = httpd.Process.Kill(); _ = httpd.Wait() })

	check := func(phase string, ping, http bool) {
		t.Helper()
		deadline := time.Now().Add(3 * time.Second)
		for {
			var p, h bool
			var wg sync.WaitGroup
			wg.Add(2)
			go func() {
				defer wg.Done()
				p = exec.Command("nsenter", "--net="+client, "--", "ping", "-c1", "-W1", "10.77.2.2").Run() == nil
			}()
			go func() {
				defer wg.Done()
				h = exec.Command("nsenter", "--net="+client, "--", "curl", "-s", "-o", "/dev/null", "--connect-timeout", "1", "http://10.77.2.2:8080/").Run() == nil
			}()
			wg.Wait()
			if p == ping && h == http {
				return
			}
			// Only the first phase waits (for httpd to listen); a policy takes effect at once.
			if phase != "no policy" || time.Now().After(deadline) {
				t.Errorf("%s: ping passes %v (want %v), HTTP passes %v (want %v)", phase, p, ping, h, http)
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	pods := []Pod{pod("t", "client", "10.77.1.2", "app", "client"), pod("t", "server", "10.77.2.2", "app", "server")}
	nss := []Namespace{ns("t")}
	allowHTTP := netpol("t", "server-in", networkingv1.NetworkPolicySpec{PodSelector: *ml("app", "server"),
		Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{podPeer(ml("app", "client"))},
			Ports: []networkingv1.NetworkPolicyPort{tcp(8080)}}}})
	denyAll := netpol("t", "server-in", networkingv1.NetworkPolicySpec{PodSelector: *ml("app", "server"), PolicyTypes: types(ingressT)})

	for _, backend := range []string{"nft", "legacy"} {
		var state *IPTState
		apply := func(pols ...networkingv1.NetworkPolicy) {
			t.Helper()
			prog, err := Compile(pods, nss, pols)
			if err != nil {
				t.Fatal(err)
			}
			r, next, _ := RenderIPTablesPartial(state, prog)
			if r.Full != (state == nil) {
				t.Fatalf("%s: Full %v with state %v", backend, r.Full, state != nil)
			}
			if err := ApplyIPTablesPartial(node, backend, r); err != nil {
				t.Fatalf("%s: %v", backend, err)
			}
			state = next
		}
		apply()
		check(backend+": no policy", true, true)
		apply(allowHTTP)
		check(backend+": HTTP from the client admitted", false, true)
		apply(denyAll)
		check(backend+": all denied", false, false)
		apply()
		check(backend+": policy removed", true, true)
		if err := ClearIPTables(node, backend); err != nil {
			t.Fatal(err)
		}
	}
}
