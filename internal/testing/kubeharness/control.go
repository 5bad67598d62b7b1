package kubeharness

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cnibench/cnibench/internal/netns"
)

func (h *Harness) apiURL() string { return "https://" + h.nodes[0].ip + ":6443" }

// certs creates the CA, the API server's serving certificate, one client certificate per
// component and the kubeconfigs (components in the node namespaces reach node0's address; the
// admin kubeconfig on the host goes through the relay, set up in controlPlane).
func (h *Harness) certs() error {
	p, err := newPKI(filepath.Join(h.cfg.Dir, "pki"))
	if err != nil {
		return err
	}
	h.pki = p
	hosts := []string{"127.0.0.1", h.nodes[0].ip, "10.96.0.1", "localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"}
	steps := []struct {
		name, cn string
		orgs     []string
		hosts    []string
	}{
		{"apiserver", "kube-apiserver", nil, hosts},
		{"apiserver-kubelet-client", "kube-apiserver-kubelet-client", []string{"system:masters"}, nil},
		{"admin", "cnibench-admin", []string{"system:masters"}, nil},
		{"controller-manager", "system:kube-controller-manager", nil, nil},
		{"scheduler", "system:kube-scheduler", nil, nil},
		{"kube-proxy", "system:kube-proxy", nil, nil},
	}
	// The pod networks' agents (podNetwork.client): each its own certificate, an admin's
	// (flanneld patches Node objects, cilium-agent writes its CRDs' objects and Node
	// annotations, kube-router watches pods, policies and nodes: their ClusterRoles).
	clients := agentClients()
	for _, c := range clients {
		steps = append(steps, struct {
			name, cn string
			orgs     []string
			hosts    []string
		}{c, "cnibench-" + c, []string{"system:masters"}, nil})
	}
	for _, n := range h.nodes {
		steps = append(steps, struct {
			name, cn string
			orgs     []string
			hosts    []string
		}{"kubelet-" + n.name, "system:node:" + n.name, []string{"system:nodes"}, nil})
	}
	for _, s := range steps {
		if err := p.issue(s.name, s.cn, s.orgs, s.hosts); err != nil {
			return err
		}
	}
	if err := p.serviceAccountKey(); err != nil {
		return err
	}
	for _, c := range append([]string{"controller-manager", "scheduler", "kube-proxy", "admin"}, clients...) {
		if err := p.kubeconfig(p.path(c+".kubeconfig"), h.apiURL(), c); err != nil {
			return err
		}
	}
	for _, n := range h.nodes {
		if err := p.kubeconfig(p.path("kubelet-"+n.name+".kubeconfig"), h.apiURL(), "kubelet-"+n.name); err != nil {
			return err
		}
	}
	return nil
}

// nsClient is an HTTPS client whose connections are made inside a namespace, trusting our CA
// and presenting the admin certificate.
func (h *Harness) nsClient(ns string) (*http.Client, error) {
	cert, err := tls.LoadX509KeyPair(h.pki.path("admin.crt"), h.pki.path("admin.key"))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(h.pki.ca)
	tr := &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}},
		DialContext:     func(ctx context.Context, netw, addr string) (net.Conn, error) { return dialIn(ctx, ns, addr) },
	}
	return &http.Client{Transport: tr, Timeout: 5 * time.Second}, nil
}

// dialIn opens a TCP connection from inside a network namespace.
func dialIn(ctx context.Context, ns, addr string) (net.Conn, error) {
	var c net.Conn
	err := netns.Do(ns, func() error {
		var err error
		c, err = (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, "tcp", addr)
		return err
	})
	return c, err
}

// waitHTTP polls url (from inside ns) until it answers 200 with body "ok".
func (h *Harness) waitHTTP(ctx context.Context, ns, url, component string, timeout time.Duration) error {
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) { return dialIn(ctx, ns, addr) }}}
	if strings.HasPrefix(url, "https") {
		var err error
		if client, err = h.nsClient(ns); err != nil {
			return err
		}
	}
	deadline := time.Now().Add(timeout)
	for {
		resp, err := client.Get(url)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
			err = fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(b)))
		}
		if h.exited(component) {
			return fmt.Errorf("%s exited: %s", component, h.logTail(component))
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s not ready after %s: %v (log: %s)", component, timeout, err, h.logTail(component))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// controlPlane starts etcd, the API server, the controller manager and the scheduler in node0's
// namespace, and the host-side relay to the API server.
func (h *Harness) controlPlane(ctx context.Context) error {
	n0 := h.nodes[0]
	p := h.pki.path
	if err := h.start("etcd", n0.ns, "etcd", "--name", "cnibench", "--data-dir", filepath.Join(h.cfg.Dir, "etcd"),
		"--listen-client-urls", "http://127.0.0.1:2379", "--advertise-client-urls", "http://127.0.0.1:2379",
		"--listen-peer-urls", "http://127.0.0.1:2380", "--initial-advertise-peer-urls", "http://127.0.0.1:2380",
		"--initial-cluster", "cnibench=http://127.0.0.1:2380"); err != nil {
		return err
	}
	if err := h.waitHTTP(ctx, n0.ns, "http://127.0.0.1:2379/health", "etcd", 30*time.Second); err != nil {
		return err
	}
	bin := func(b string) string { return filepath.Join(h.cfg.Bin, b) }
	if err := h.start("kube-apiserver", n0.ns, bin("kube-apiserver"),
		"--etcd-servers=http://127.0.0.1:2379", "--bind-address=0.0.0.0", "--secure-port=6443",
		"--advertise-address="+n0.ip, "--service-cluster-ip-range="+serviceCIDR,
		"--client-ca-file="+p("ca.crt"), "--tls-cert-file="+p("apiserver.crt"), "--tls-private-key-file="+p("apiserver.key"),
		"--kubelet-client-certificate="+p("apiserver-kubelet-client.crt"), "--kubelet-client-key="+p("apiserver-kubelet-client.key"),
		"--service-account-issuer=https://kubernetes.default.svc", "--service-account-key-file="+p("sa.pub"),
		"--service-account-signing-key-file="+p("sa.key"), "--authorization-mode=Node,RBAC",
		"--endpoint-reconciler-type=none", "--allow-privileged=true", "--kubelet-preferred-address-types=InternalIP", "--enable-priority-and-fairness=false",
		"--profiling=false"); err != nil {
		return err
	}
	if err := h.waitHTTP(ctx, n0.ns, h.apiURL()+"/readyz", "kube-apiserver", 60*time.Second); err != nil {
		return err
	}
	if err := h.startRelay(); err != nil {
		return err
	}
	cm := []string{bin("kube-controller-manager"),
		"--kubeconfig=" + p("controller-manager.kubeconfig"), "--authentication-kubeconfig=" + p("controller-manager.kubeconfig"),
		"--authorization-kubeconfig=" + p("controller-manager.kubeconfig"), "--leader-elect=false",
		"--service-account-private-key-file=" + p("sa.key"), "--root-ca-file=" + p("ca.crt"),
		"--use-service-account-credentials=true", "--cluster-cidr=" + clusterCIDR, "--service-cluster-ip-range=" + serviceCIDR,
		"--bind-address=127.0.0.1", "--secure-port=10257"}
	if h.podNet().nodeCIDRs {
		// flanneld's --kube-subnet-mgr and Cilium's Kubernetes IPAM take each node's subnet
		// from its Node's pod CIDR (as kubeadm's --pod-network-cidr sets up); the bridge
		// network's subnets are the harness's.
		cm = append(cm, "--allocate-node-cidrs=true", "--node-cidr-mask-size=24")
	}
	if err := h.start("kube-controller-manager", n0.ns, cm...); err != nil {
		return err
	}
	return h.start("kube-scheduler", n0.ns, bin("kube-scheduler"), "--kubeconfig="+p("scheduler.kubeconfig"),
		"--authentication-kubeconfig="+p("scheduler.kubeconfig"), "--authorization-kubeconfig="+p("scheduler.kubeconfig"),
		"--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port=10259")
}

// startRelay listens on the host's loopback and forwards every connection to the API server
// in node0's namespace, so host clients (cnibench run --backend kube) reach it without any
// change to the host's network configuration. It writes the admin kubeconfig for it.
func (h *Harness) startRelay() error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	h.relay = l
	ns, target := h.nodes[0].ns, h.nodes[0].ip+":6443"
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				u, err := dialIn(context.Background(), ns, target)
				if err != nil {
					return
				}
				defer u.Close()
				done := make(chan struct{}, 2)
				go func() { _, _ = io.Copy(u, c); done <- struct{}{} }()
				go func() { _, _ = io.Copy(c, u); done <- struct{}{} }()
				<-done
			}()
		}
	}()
	h.Kubeconfig = filepath.Join(h.cfg.Dir, "admin-host.kubeconfig")
	return h.pki.kubeconfig(h.Kubeconfig, "https://"+l.Addr().String(), "admin")
}

// writeFile writes content to DIR/rel, creating directories.
func (h *Harness) writeFile(path, content string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	// Whole or not at all: containerd reads its CNI directory as files appear in it.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
