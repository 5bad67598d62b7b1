package scenario

import (
	"fmt"
	"strconv"

	"github.com/cnibench/cnibench/internal/cluster"
)

// SilentPods returns n silent pod specs named prefix0, prefix1, ... with the given labels,
// for the backend to spread over its nodes.
func SilentPods(n int, prefix string, labels map[string]string) []cluster.PodSpec {
	specs := make([]cluster.PodSpec, n)
	for i := range specs {
		specs[i] = cluster.PodSpec{Name: fmt.Sprintf("%s%d", prefix, i), Labels: labels, Silent: true}
	}
	return specs
}

// ServicesWithEndpoints returns n silent pods and n Services (prefix0.., each Service
// selecting its own pod alone), the pods declaring TCP targetPort named "http" and each
// Service forwarding port 80 to it: seed 001's extra Services, each with its own endpoint.
func ServicesWithEndpoints(n int, prefix string, labels map[string]string, targetPort int) ([]cluster.PodSpec, []cluster.ServiceSpec) {
	pods := SilentPods(n, prefix, nil)
	svcs := make([]cluster.ServiceSpec, n)
	for i := range pods {
		sel := map[string]string{"cnibench.io/" + prefix: strconv.Itoa(i)}
		for k, v := range labels {
			sel[k] = v
		}
		pods[i].Labels = sel
		pods[i].Ports = []cluster.ContainerPort{{Name: "http", Port: targetPort, Protocol: "tcp"}}
		svcs[i] = cluster.ServiceSpec{Name: fmt.Sprintf("%s%d", prefix, i), Selector: sel,
			Ports: []cluster.ServicePort{{Name: "http", Port: 80, TargetPort: targetPort, Protocol: "tcp"}}}
	}
	return pods, svcs
}
