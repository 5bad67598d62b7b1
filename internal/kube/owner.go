package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/cnibench/cnibench/internal/owner"
)

// Owner annotations of a run namespace: who runs it, so `kube clean` on a shared cluster
// leaves the namespaces of runs still going alone. A run on another host cannot be asked
// whether it lives; its heartbeat, refreshed while it runs, says so.
const (
	OwnerHostAnnotation  = "cnibench.io/owner-host"
	OwnerPIDAnnotation   = "cnibench.io/owner-pid"
	OwnerStartAnnotation = "cnibench.io/owner-start"
	HeartbeatAnnotation  = "cnibench.io/heartbeat"
)

// Heartbeat timing; variables so tests can shorten them.
var (
	heartbeatEvery = 30 * time.Second
	// heartbeatFresh is how old a heartbeat of a run on another host may be for the run to
	// count as live.
	heartbeatFresh = 3 * time.Minute
)

// ownerAnnotations describe this process as the owner of a namespace.
func ownerAnnotations(now time.Time) map[string]string {
	r := owner.Self("cnibench run")
	return map[string]string{
		OwnerHostAnnotation: r.Host, OwnerPIDAnnotation: strconv.Itoa(r.PID),
		OwnerStartAnnotation: strconv.FormatUint(r.Start, 10), HeartbeatAnnotation: now.UTC().Format(time.RFC3339),
	}
}

// liveOwner tells whether the run owning a namespace still goes, and describes it: on this
// host its process (PID and start time) must exist; on another host its heartbeat must be
// fresh. A namespace without owner annotations (made before them) has no live owner.
func liveOwner(ns corev1.Namespace, now time.Time) (bool, string) {
	a := ns.Annotations
	host, ok := a[OwnerHostAnnotation]
	if !ok {
		return false, ""
	}
	pid, _ := strconv.Atoi(a[OwnerPIDAnnotation])
	start, _ := strconv.ParseUint(a[OwnerStartAnnotation], 10, 64)
	if self, _ := os.Hostname(); host == self {
		r := owner.Record{Host: host, PID: pid, Start: start}
		return r.Alive(), fmt.Sprintf("run by pid %d on this host", pid)
	}
	hb, err := time.Parse(time.RFC3339, a[HeartbeatAnnotation])
	if err != nil {
		return false, ""
	}
	age := now.Sub(hb)
	return age < heartbeatFresh, fmt.Sprintf("run by pid %d on %s, heartbeat %s ago", pid, host, age.Round(time.Second))
}

// heartbeat refreshes the namespace's heartbeat annotation until ctx ends; it returns when it
// has stopped.
func heartbeat(ctx context.Context, cs kubernetes.Interface, ns string, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(heartbeatEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{HeartbeatAnnotation: now.UTC().Format(time.RFC3339)}}})
			// A failed beat is retried at the next tick; a run's namespace is not worth a
			// message per tick.
			_, _ = cs.CoreV1().Namespaces().Patch(ctx, ns, types.MergePatchType, patch, metav1.PatchOptions{})
		}
	}
}
