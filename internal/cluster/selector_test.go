package cluster

import "testing"

// A selector picks a pod when every one of its labels is on the pod with the same value; an
// empty selector picks nothing.
func TestSelects(t *testing.T) {
	pod := map[string]string{"app": "cnibench", "role": "server"}
	for _, c := range []struct {
		sel  map[string]string
		want bool
	}{
		{map[string]string{"role": "server"}, true},
		{map[string]string{"app": "cnibench", "role": "server"}, true},
		{map[string]string{"role": "client"}, false},
		{map[string]string{"role": "server", "tier": "web"}, false},
		{nil, false},
		{map[string]string{}, false},
	} {
		if got := Selects(c.sel, pod); got != c.want {
			t.Errorf("Selects(%v, %v) = %v, want %v", c.sel, pod, got, c.want)
		}
	}
}
