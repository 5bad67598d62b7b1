package kubeharness

import (
	"os"
	"testing"
	"time"
)

// TestHold keeps a harness cluster up for exploration: CNIBENCH_KUBE_HOLD=FILE writes the
// kubeconfig path to FILE and tears down once FILE is removed. CNIBENCH_KUBE_HOLD_PROXY
// chooses kube-proxy's mode: iptables (default), nftables or none (with cilium); CNIBENCH_KUBE_HOLD_CNI the pod
// network: flannel (default), flannel-hostgw, cilium, kube-router, calico or bridge (Config.CNI).
func TestHold(t *testing.T) {
	f := os.Getenv("CNIBENCH_KUBE_HOLD")
	if f == "" {
		t.Skip("CNIBENCH_KUBE_HOLD=FILE holds a cluster up for exploration")
	}
	mode := os.Getenv("CNIBENCH_KUBE_HOLD_PROXY")
	switch mode {
	case "":
		mode = "iptables"
	case "iptables", "nftables", ProxyNone:
	default:
		t.Fatalf("CNIBENCH_KUBE_HOLD_PROXY=%q: want iptables, nftables or %s (no kube-proxy: cilium replaces it)", mode, ProxyNone)
	}
	cni := os.Getenv("CNIBENCH_KUBE_HOLD_CNI")
	if cni == "" {
		cni = CNIFlannel
	}
	h, _ := upForTest(t, mode, cni)
	if err := os.WriteFile(f, []byte(h.Kubeconfig+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(f); err != nil {
			return
		}
		time.Sleep(time.Second)
	}
}

// TestHeld runs the real-cluster checks against a held cluster (CNIBENCH_KUBE_HELD=its admin
// kubeconfig), for iterating on one without bringing a cluster up each time; pick them with
// -run 'TestHeld/NAME'.
func TestHeld(t *testing.T) {
	kc := os.Getenv("CNIBENCH_KUBE_HELD")
	if kc == "" {
		t.Skip("CNIBENCH_KUBE_HELD=KUBECONFIG runs the real-cluster checks on a held cluster")
	}
	h := &Harness{Kubeconfig: kc}
	bin := buildCLI(t)
	t.Run("fake-nodes", func(t *testing.T) { fakeNodesOnCluster(t, h) })
	t.Run("rbac", func(t *testing.T) { rbacOnCluster(t, h, bin) })
	t.Run("backend", func(t *testing.T) { backendOnCluster(t, h) })
	t.Run("cli-fake-nodes", func(t *testing.T) { cliFakeNodes(t, h, bin) })
	t.Run("cli-p2s", func(t *testing.T) { cliOnCluster(t, h, bin, "--scenario", "p2s") })
	t.Run("fidelity", func(t *testing.T) { fidelityOnCluster(t, h, bin) })
	t.Run("n2s", func(t *testing.T) { n2sOnCluster(t, h) })
	t.Run("reaction", func(t *testing.T) { reactionOnCluster(t, h, bin) })
	t.Run("cli-scale", func(t *testing.T) { cliScale(t, h, bin) })
}
