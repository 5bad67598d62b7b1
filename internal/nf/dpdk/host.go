package dpdk

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/cnibench/cnibench/internal/cpupin"
	"github.com/cnibench/cnibench/internal/netns"
)

// linkMTU is the MTU of dev in namespace ns.
func linkMTU(ns, dev string) (int, error) {
	h, err := netns.Netlink(ns)
	if err != nil {
		return 0, err
	}
	defer h.Close()
	lk, err := h.LinkByName(dev)
	if err != nil {
		return 0, fmt.Errorf("%s in %s: %w", dev, ns, err)
	}
	return lk.Attrs().MTU, nil
}

// allowedCPUs lists the CPUs this process may run on, as EAL's --lcores takes a CPU group
// ("0,1,3").
func allowedCPUs() (string, error) {
	cpus, err := cpupin.Allowed()
	if err != nil {
		return "", err
	}
	out := make([]string, len(cpus))
	for i, c := range cpus {
		out[i] = strconv.Itoa(c)
	}
	return strings.Join(out, ","), nil
}
