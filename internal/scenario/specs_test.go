package scenario

import (
	"testing"

	"github.com/cnibench/cnibench/internal/cluster"
)

// Each Service of ServicesWithEndpoints selects its own pod and no other, on the port the pod
// declares.
func TestServicesWithEndpoints(t *testing.T) {
	pods, svcs := ServicesWithEndpoints(12, "extra", map[string]string{"role": "extra"}, 8080)
	if len(pods) != 12 || len(svcs) != 12 {
		t.Fatalf("%d pods, %d services", len(pods), len(svcs))
	}
	for i, s := range svcs {
		for j, p := range pods {
			if got := cluster.Selects(s.Selector, p.Labels); got != (i == j) {
				t.Errorf("service %s selects pod %s: %v", s.Name, p.Name, got)
			}
		}
		if !pods[i].Silent || pods[i].Labels["role"] != "extra" || pods[i].Ports[0].Port != s.Ports[0].TargetPort {
			t.Errorf("pod %d: %+v, service %+v", i, pods[i], s)
		}
	}
}
