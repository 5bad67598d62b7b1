package dataplane

import (
	"os"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/cnibench/cnibench/internal/engine/policy"
)

// bpfPrograms are Programs of a small cluster (pods a, b, c at 10.0.0.1-3, all local), one per
// step of a run: b admitting a on TCP 80; c isolated the same way (its address sorts last);
// a isolated (it sorts first: b's and c's endpoints are renumbered); back to the first; no
// policy at all.
func bpfPrograms(t *testing.T) []*policy.Program {
	t.Helper()
	nss := []policy.Namespace{{Name: "t", Labels: map[string]string{"kubernetes.io/metadata.name": "t"}}}
	var pods []policy.Pod
	for i, app := range []string{"a", "b", "c"} {
		pods = append(pods, policy.Pod{Name: app, Namespace: "t", IP: "10.0.0." + string(rune('1'+i)), Labels: map[string]string{"app": app}, Local: true})
	}
	tcp, port := corev1.ProtocolTCP, intstr.FromInt32(80)
	from := func(target, peer string) networkingv1.NetworkPolicy {
		return networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "t", Name: target},
			Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": target}},
				Ingress: []networkingv1.NetworkPolicyIngressRule{{
					From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": peer}}}},
					Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &port}}}}}}
	}
	var out []*policy.Program
	for _, pols := range [][]networkingv1.NetworkPolicy{
		{from("b", "a")},
		{from("b", "a"), from("c", "a")},
		{from("b", "a"), from("c", "a"), from("a", "c")},
		{from("b", "a")},
		nil,
	} {
		p, err := policy.Compile(pods, nss, pols)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

// The eBPF policy engines' partial renderings: without a previous state (nil, a nil policy,
// another engine's state) the rendering is Render's, Changed 0, and the state the whole
// policy; with one it is {"Partial": policy.DiffBPF(prev, next)}, next being the program's
// rendering renumbered like prev (policy.RenumberLike), read back as a change by Apply's
// decoder, with the whole program's Counts and Changed the change's size: c isolated, its
// endpoint, rule and IP cache entry (3); a isolated, its address sorting first, likewise a's
// endpoint and rule and c's IP cache entry (c's class changes), 3 where RenderBPF's numbering
// would rewrite b's and c's endpoints and rules too; the same program again is an empty change.
func TestEBPFPolicyRenderPartial(t *testing.T) {
	progs := bpfPrograms(t)
	for _, p := range []PartialPolicy{ebpfPolicy{}, polycubePolicy{}} {
		full, fullCnt := p.Render(progs[0])
		want, _ := policy.RenderBPF(progs[0])
		for _, prev := range []any{nil, (*policy.BPFPolicy)(nil), "another engine's"} {
			r, next, cnt := p.RenderPartial(prev, progs[0])
			if !reflect.DeepEqual(r, full) || cnt != fullCnt || !reflect.DeepEqual(next, want) {
				t.Errorf("%s, prev %#v: not Render's rendering (%s), counts %+v, state %#v", p.Name(), prev, r, cnt, next)
			}
			in, err := decodeBPF(p.Name(), r)
			if err != nil || in.Partial != nil || !reflect.DeepEqual(&in.BPFPolicy, want) {
				t.Errorf("%s: a full rendering decodes to %+v, %v", p.Name(), in, err)
			}
		}
		state := any(want)
		for _, step := range []struct{ prog, changed int }{{1, 3}, {2, 3}} {
			prev := state.(*policy.BPFPolicy)
			r, next, cnt := p.RenderPartial(prev, progs[step.prog])
			b, wantCnt := policy.RenderBPF(progs[step.prog])
			renumbered := policy.RenumberLike(prev, b)
			c := policy.DiffBPF(prev, renumbered)
			wantCnt.Changed = step.changed
			in, err := decodeBPF(p.Name(), r)
			if err != nil || in.Partial == nil || !reflect.DeepEqual(*in.Partial, c) || cnt != wantCnt || c.Size() != step.changed || !reflect.DeepEqual(next, renumbered) {
				t.Errorf("%s: step %d: %s decodes to %+v (%v), counts %+v, state %+v; want the change %+v, counts %+v, state %+v",
					p.Name(), step.prog, r, in.Partial, err, cnt, next, c, wantCnt, renumbered)
			}
			if !strings.HasPrefix(string(r[0]), `{"Partial":`) {
				t.Errorf("%s: a partial rendering is %s", p.Name(), r[0])
			}
			if plain := policy.DiffBPF(prev, b).Size(); step.prog == 2 && plain <= c.Size() {
				t.Errorf("%s: a isolated: RenderBPF's numbering %d entries, renumbered %d: the step shows nothing", p.Name(), plain, c.Size())
			}
			state = next
		}
		r, again, cnt := p.RenderPartial(state, progs[2])
		if in, err := decodeBPF(p.Name(), r); err != nil || in.Partial == nil || in.Partial.Size() != 0 || cnt.Changed != 0 || !reflect.DeepEqual(again, state) {
			t.Errorf("%s: no change: %s, Changed %d, state %+v (was %+v), %v", p.Name(), r, cnt.Changed, again, state, err)
		}
		if _, err := decodeBPF(p.Name(), Rendering{r[0], r[0]}); err == nil || !strings.Contains(err.Error(), "one part") {
			t.Errorf("%s: a rendering of two parts: %v", p.Name(), err)
		}
	}
}

// A partial rendering applied to a node without the policy it was rendered from is an error
// and writes nothing: the lab then forgets its state and renders a full one.
func TestEBPFPolicyPartialApplyWithoutPolicy(t *testing.T) {
	progs := bpfPrograms(t)
	dir := t.TempDir()
	n := Node{Name: "node0", NS: "cnbtnone", BPFDir: dir}
	for _, p := range []PartialPolicy{ebpfPolicy{}, polycubePolicy{}} {
		_, state, _ := p.RenderPartial(nil, progs[0])
		r, _, _ := p.RenderPartial(state, progs[1])
		if err := p.Apply(n, r); err == nil || !strings.Contains(err.Error(), "node") {
			t.Errorf("%s: a change applied to a node without a policy: %v", p.Name(), err)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("the node's bpf directory holds %d entries after the refused changes", len(ents))
	}
}

// Through the engines, on the real kernel: a node programmed with RenderPartial and Apply
// (a full rendering, then changes along bpfPrograms' steps and back, then a full rendering
// again, as the lab renders after a failed Apply, over the renumbered maps, and changes from
// it) holds after each step, in every map pinned in its bpf directory, what a node given the
// step's state whole (Render's rendering of it, applied with Apply) holds: the renumbered
// policy for a change, Render's own for a full rendering. The state has the endpoints, IP
// cache prefixes and rule count of RenderBPF's rendering, Changed is the change's size, and
// isolating a (whose address sorts first) keeps b's and c's numbers, unlike RenderBPF.
func TestEBPFPolicyPartialApply(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (BPF programs)")
	}
	progs := bpfPrograms(t)
	for _, p := range []PartialPolicy{ebpfPolicy{}, polycubePolicy{}} {
		t.Run(p.Name(), func(t *testing.T) {
			if err := p.Usable(); err != nil {
				t.Skip(err)
			}
			part, full := scratchBPFNode(t, "node0"), scratchBPFNode(t, "node0")
			if _, ok := p.(polycubePolicy); ok {
				for _, n := range []Node{part, full} {
					setupPolycube(t, n)
				}
			}
			var state any
			renumbered := 0
			for i, step := range []struct {
				prog  int
				reset bool // a full rendering: the lab forgot the state
			}{{0, false}, {1, false}, {2, false}, {3, false}, {4, false}, {2, false}, {1, true}, {2, false}, {0, false}} {
				prog := progs[step.prog]
				if step.reset {
					state = nil
				}
				prev, _ := state.(*policy.BPFPolicy)
				r, next, cnt := p.RenderPartial(state, prog)
				if err := p.Apply(part, r); err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				b, _ := policy.RenderBPF(prog)
				nb := next.(*policy.BPFPolicy)
				if prev == nil {
					if want, _ := p.Render(prog); !reflect.DeepEqual(r, want) || !reflect.DeepEqual(nb, b) {
						t.Errorf("step %d: a full rendering %s, not Render's %s", i, r[0], want[0])
					}
				} else if want := policy.DiffBPF(prev, nb).Size(); cnt.Changed != want || want == 0 {
					t.Errorf("step %d: Changed %d, want %d (not 0)", i, cnt.Changed, want)
				}
				if len(nb.Endpoints) != len(b.Endpoints) || len(nb.IPCache) != len(b.IPCache) || len(nb.Rules) != len(b.Rules) {
					t.Errorf("step %d: state %+v, RenderBPF's %+v", i, nb, b)
				}
				for j := range min(len(nb.Endpoints), len(b.Endpoints)) {
					if e, w := nb.Endpoints[j], b.Endpoints[j]; e.IP != w.IP || e.Ingress != w.Ingress || e.Egress != w.Egress {
						t.Errorf("step %d: endpoint %+v, RenderBPF's %+v", i, e, w)
					}
				}
				for j := range min(len(nb.IPCache), len(b.IPCache)) {
					if nb.IPCache[j].Prefix != b.IPCache[j].Prefix {
						t.Errorf("step %d: ip cache %s, RenderBPF's %s", i, nb.IPCache[j].Prefix, b.IPCache[j].Prefix)
					}
				}
				if step.prog == 2 && prev != nil && len(prev.Endpoints) == 2 {
					// b and c keep their IDs; a, sorting first, is new.
					if nb.Endpoints[1] != prev.Endpoints[0] || nb.Endpoints[2] != prev.Endpoints[1] || reflect.DeepEqual(nb, b) {
						t.Errorf("step %d: a isolated: endpoints %+v after %+v (RenderBPF's %+v)", i, nb.Endpoints, prev.Endpoints, b.Endpoints)
					}
				}
				if !reflect.DeepEqual(nb, b) {
					renumbered++
				}
				state = next
				if err := p.Apply(full, Rendering{marshalBPF(nb)}); err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				got, want := pinnedMaps(t, part), pinnedMaps(t, full)
				if len(want) == 0 || !reflect.DeepEqual(got, want) {
					for pin := range want {
						if !reflect.DeepEqual(got[pin], want[pin]) {
							t.Errorf("step %d: map %s holds %d entries, %d after a full rendering", i, pin, len(got[pin]), len(want[pin]))
						}
					}
					t.FailNow()
				}
			}
			if renumbered == 0 {
				t.Errorf("no step's state differed from RenderBPF's numbering: the test tried too little")
			}
		})
	}
}
