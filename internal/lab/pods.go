package lab

// The lab's pods: creating and deleting them (one or many), finding them by name.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"regexp"
	"runtime"
	"sync"
	"time"

	"github.com/cnibench/cnibench/internal/cluster"
)

var podNameRe = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$`)

// freeNames checks that names are valid pod names no pod has yet (call with l.mu held).
func (l *Lab) freeNames(names ...string) error {
	for _, n := range names {
		if _, dup := l.pods[n]; dup || !podNameRe.MatchString(n) {
			return fmt.Errorf("invalid or duplicate pod name %q", n)
		}
	}
	return nil
}

// CreatePod creates one pod (CreatePods with one spec).
func (l *Lab) CreatePod(ctx context.Context, spec cluster.PodSpec) (cluster.Pod, error) {
	return cluster.CreatePod(ctx, l, spec)
}

// createPod creates one pod. An external client (spec.External) is a namespace on the
// underlay, off every node (external.go).
func (l *Lab) createPod(ctx context.Context, spec cluster.PodSpec) (cluster.Pod, error) {
	if !podNameRe.MatchString(spec.Name) {
		return cluster.Pod{}, fmt.Errorf("invalid pod name %q: lowercase letters, digits and '-', at most 40", spec.Name)
	}
	if spec.AnswerPort != 0 && (spec.Silent || spec.HostNetwork || spec.External || spec.AnswerPort < 1 || spec.AnswerPort > 65535) {
		return cluster.Pod{}, fmt.Errorf("pod %s: answer port %d: wants 1-65535 in a pod on the pod network that runs (not silent, host-network or external)", spec.Name, spec.AnswerPort)
	}
	if spec.External && spec.Node == "" {
		spec.Node = l.nodes[0].name
	}
	n, err := l.node(spec.Node)
	if err != nil {
		return cluster.Pod{}, err
	}
	l.mu.Lock()
	if _, dup := l.pods[spec.Name]; dup {
		l.mu.Unlock()
		return cluster.Pod{}, fmt.Errorf("pod %q already exists", spec.Name)
	}
	p := &pod{Pod: cluster.Pod{Name: spec.Name, Node: n.name, Labels: spec.Labels, HostNetwork: spec.HostNetwork, Ports: spec.Ports}}
	l.pods[spec.Name] = p // reserve the name
	l.indexLabels(p, true)
	l.mu.Unlock()
	if spec.CPU != (cluster.CPU{}) {
		if spec.Silent || spec.External {
			l.forget(spec.Name)
			return cluster.Pod{}, cluster.BadInput("pod %s: CPU resources are for a pod that runs in the cluster (not silent or external)", spec.Name)
		}
		if err := l.setupCPU(p, spec.CPU); err != nil {
			l.forget(spec.Name)
			return cluster.Pod{}, err
		}
	}
	if spec.External {
		if err := l.createExternal(p); err != nil {
			l.forget(spec.Name)
			return cluster.Pod{}, fmt.Errorf("external client %s: %w", spec.Name, err)
		}
		p.readyAt = time.Now()
		return p.Pod, nil
	}
	if spec.HostNetwork {
		p.ns, p.IP, p.readyAt = n.ns, n.ip.String(), time.Now()
		return p.Pod, nil
	}
	if !l.dp.Attach.PodNetwork() {
		l.forget(spec.Name)
		return cluster.Pod{}, cluster.Unsupported("dataplane %s has no pod network (host-network pods only)", l.dp.Preset.Name)
	}
	if spec.Silent {
		if err := l.createSilent(ctx, p, n, spec.Ports); err != nil {
			l.forget(spec.Name)
			return cluster.Pod{}, fmt.Errorf("silent pod %s on %s: %w", spec.Name, n.name, err)
		}
		p.readyAt = time.Now()
		return p.Pod, nil
	}
	p.ns = l.cfg.Prefix + "-p-" + spec.Name
	if err := createNS(p.ns); err != nil {
		l.forget(spec.Name)
		return cluster.Pod{}, err
	}
	ip, err := l.attach(ctx, n, p.ns)
	if err != nil {
		_ = l.detach(ctx, n, p.ns)
		_ = deleteNS(p.ns)
		l.forget(spec.Name)
		return cluster.Pod{}, fmt.Errorf("attach pod %s on %s: %w", spec.Name, n.name, err)
	}
	p.IP, p.attached = ip.String(), true
	if spec.AnswerPort > 0 {
		if p.answer, err = answerIn(p.ns, spec.AnswerPort); err != nil {
			err = fmt.Errorf("pod %s: %w", spec.Name, err)
			return cluster.Pod{}, errors.Join(err, l.deletePod(ctx, spec.Name))
		}
	}
	p.readyAt = time.Now()
	return p.Pod, nil
}

// CreatePods implements cluster.Cluster: specs without a node go round-robin over the nodes;
// pods are attached in parallel (CNI plugin runs are process-bound; two per CPU keeps both
// CPUs busy). Then the Services whose selector picks one of them get them as endpoints, with
// one programming of the Services for the call (see endpoints.go). On an error the pods
// created so far are deleted.
func (l *Lab) CreatePods(ctx context.Context, specs []cluster.PodSpec) ([]cluster.Pod, error) {
	out := make([]cluster.Pod, len(specs))
	err := cluster.Parallel(ctx, len(specs), 2*runtime.NumCPU(), func(i int) error {
		spec := specs[i]
		if spec.Node == "" && !spec.External { // an external client is by the first node
			spec.Node = l.nodes[i%len(l.nodes)].name
		}
		p, err := l.createPod(ctx, spec)
		out[i] = p
		return err
	})
	if err == nil {
		err = l.followCreated(out)
	}
	if err != nil {
		var made []string
		for _, p := range out {
			if p.Name != "" {
				made = append(made, p.Name)
			}
		}
		return nil, errors.Join(err, l.DeletePods(context.WithoutCancel(ctx), made))
	}
	return out, nil
}

func (l *Lab) forget(name string) {
	l.mu.Lock()
	p := l.pods[name]
	delete(l.pods, name)
	if p != nil {
		l.indexLabels(p, false)
	}
	l.mu.Unlock()
	if p != nil {
		_ = l.releaseCPU(p) // a pod that failed to come up; deletePod releases first, with errors
	}
}

// DeletePod deletes one pod (DeletePods with one name).
func (l *Lab) DeletePod(ctx context.Context, name string) error {
	return cluster.DeletePod(ctx, l, name)
}

// deletePod stops the pod's processes, releases its address through CNI DEL and removes its
// namespace.
func (l *Lab) deletePod(ctx context.Context, name string) error {
	p, err := l.pod(name)
	if err != nil {
		return err
	}
	l.stopProcs(p.Name)
	if p.answer != nil {
		_ = p.answer.Close()
	}
	if err := l.closeChain(p.Name); err != nil {
		return err
	}
	if p.silent {
		l.forget(name)
		l.holdMu.Lock()
		h := l.holders[p.Node]
		l.holdMu.Unlock()
		if h == nil {
			return nil
		}
		return h.remove(net.ParseIP(p.IP))
	}
	if p.External {
		err := l.deleteExternal(p)
		l.forget(name)
		return err
	}
	var errs []error
	if p.attached {
		n, _ := l.node(p.Node)
		errs = append(errs, l.detach(ctx, n, p.ns))
	}
	if !p.HostNetwork {
		errs = append(errs, killNSProcs(p.ns), deleteNS(p.ns))
	}
	errs = append(errs, l.releaseCPU(p))
	l.forget(name)
	return errors.Join(errs...)
}

// DeletePods implements cluster.Cluster, in parallel. The pods' endpoints leave their Services
// first, with one programming of the Services for the call, while the pods still serve (see
// endpoints.go); then the pods go.
func (l *Lab) DeletePods(ctx context.Context, names []string) error {
	var mu sync.Mutex
	errs := []error{l.followDeleted(names, time.Now())}
	_ = cluster.Parallel(ctx, len(names), 2*runtime.NumCPU(), func(i int) error {
		if err := l.deletePod(ctx, names[i]); err != nil {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}
		return nil
	})
	return errors.Join(append(errs, ctx.Err())...)
}

// Pod returns a pod by name.
func (l *Lab) Pod(name string) (cluster.Pod, error) {
	p, err := l.pod(name)
	if err != nil {
		return cluster.Pod{}, err
	}
	return p.Pod, nil
}

func (l *Lab) pod(name string) (*pod, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p, ok := l.pods[name]
	if !ok {
		return nil, fmt.Errorf("no pod %q in this lab", name)
	}
	return p, nil
}

// PodNS returns the namespace name a pod's processes run in (for tests and tools).
func (l *Lab) PodNS(name string) (string, error) {
	p, err := l.pod(name)
	if err != nil {
		return "", err
	}
	return p.ns, nil
}
