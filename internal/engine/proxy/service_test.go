package proxy

import (
	"math/rand"
	"reflect"
	"slices"
	"testing"
)

// sameService must see a change of any of Service's fields, or a partial rendering would keep
// the old rendering of a changed Service.
func TestSameServiceSeesEveryField(t *testing.T) {
	a := Service{Endpoints: []Endpoint{{IP: "10.244.0.2", Port: 80, Node: "node0"}}}
	v := reflect.ValueOf(&a).Elem()
	for i := range v.NumField() {
		b := a
		b.Endpoints = slices.Clone(a.Endpoints)
		f := reflect.ValueOf(&b).Elem().Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString("x")
		case reflect.Int:
			f.SetInt(1)
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Slice:
			b.Endpoints[0].Node = "node1"
		default:
			t.Fatalf("field %s: kind %s not covered here", v.Type().Field(i).Name, f.Kind())
		}
		if sameService(a, b) {
			t.Errorf("a change of %s is not seen", v.Type().Field(i).Name)
		}
	}
	if !sameService(a, a) {
		t.Error("a Service differs from itself")
	}
}

// sortedServices orders Service ports by namespace, name, port name and protocol, whatever
// the caller's order, and copies a list that is in order already.
func TestSortedServices(t *testing.T) {
	g := &svcGen{rng: rand.New(rand.NewSource(1))}
	var svcs []Service
	for range 300 {
		s := g.service()
		s.Namespace = []string{"a", "ab", "a-b", "b"}[g.rng.Intn(4)]
		s.Name = []string{"x", "x2", "x-y", "xy"}[g.rng.Intn(4)] + []string{"", "0", "1"}[g.rng.Intn(3)]
		s.PortName = []string{"", "p", "p2", "http"}[g.rng.Intn(4)]
		s.Protocol = []string{"tcp", "udp", "sctp"}[g.rng.Intn(3)]
		svcs = append(svcs, s)
	}
	id := func(s Service) [4]string { return [4]string{s.Namespace, s.Name, s.PortName, s.Protocol} }
	sorted := sortedServices(svcs)
	if len(sorted) != len(svcs) {
		t.Fatalf("%d Services in, %d out", len(svcs), len(sorted))
	}
	for i := 1; i < len(sorted); i++ {
		a, b := id(sorted[i-1]), id(sorted[i])
		if slices.Compare(a[:], b[:]) > 0 {
			t.Fatalf("%q before %q", a, b)
		}
	}
	again := sortedServices(sorted)
	if &again[0] == &sorted[0] || !slices.EqualFunc(again, sorted, sameService) {
		t.Error("sortedServices of a sorted list is not an equal copy")
	}
}
