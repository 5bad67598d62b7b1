package scenario

import (
	"reflect"
	"testing"
)

// A trial's data-plane counters are what each counter counted during it, per node; a counter
// that appeared or went backwards during the trial (a reloaded program) is left out rather
// than reported wrong.
func TestCounted(t *testing.T) {
	before := map[string]map[string]uint64{
		"node0": {"ilb_packets": 100, "router_to_vxlan": 7, "fw_denied": 5},
		"node1": {"ilb_packets": 3},
	}
	after := map[string]map[string]uint64{
		"node0": {"ilb_packets": 180, "router_to_vxlan": 7, "fw_denied": 2, "elb_new": 4},
		"node1": {"ilb_packets": 9},
	}
	want := map[string]float64{"dp_node0_ilb_packets_count": 80, "dp_node0_router_to_vxlan_count": 0, "dp_node1_ilb_packets_count": 6}
	if got := counted(before, after); !reflect.DeepEqual(got, want) {
		t.Errorf("counted = %v, want %v", got, want)
	}
	if got := counted(nil, nil); len(got) != 0 {
		t.Errorf("no counters: %v", got)
	}
}
