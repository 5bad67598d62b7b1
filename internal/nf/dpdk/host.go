package dpdk

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

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
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return "", err
	}
	var cpus []string
	for i := 0; i < len(set)*64; i++ {
		if set.IsSet(i) {
			cpus = append(cpus, strconv.Itoa(i))
		}
	}
	if len(cpus) == 0 {
		return "", errors.New("no CPU in this process's affinity")
	}
	return strings.Join(cpus, ","), nil
}
