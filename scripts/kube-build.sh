#!/usr/bin/env bash
# Builds the Kubernetes binaries the project's test cluster runs (kube-apiserver,
# kube-controller-manager, kube-scheduler, kubelet, kube-proxy), kwok, flanneld, Cilium's
# agent and CNI plugin (with the eBPF sources the agent compiles at start and its CRDs) and
# kube-router, from
# the Go module proxy, into a cache that later runs reuse (docs/kube-lab.md has the measured
# recipe).
# Usage: scripts/kube-build.sh [CACHE_DIR]   (default /var/cache/cnibench/kube-v1.34.10)
#
# Each binary appears in CACHE_DIR/bin whole (built aside, then moved), in the order the test
# cluster's tests need them: Kubernetes' own and kwok, flanneld, then Cilium's, kube-router's and
# Calico's. While it builds, the script holds an exclusive flock on CACHE_DIR/bin/.build.lock:
# the test cluster's tests wait for a binary still missing while that lock is held, so that
# make test starts them before the whole build is done.
set -euo pipefail

K8S=v1.34.10          # 1.35 kubelets refuse cgroup v1, which this host has
STAGING=v0.34.10
KWOK=v0.8.0
FLANNEL=v0.28.10
CILIUM=v1.20.2
KUBE_ROUTER=v2.1.0    # the only v2 release the module proxy serves
# Calico: the monorepo's release-v3.28 branch just after v3.28.5 (2025-08-13), the only
# version the module proxy serves; its nested api module comes from the standalone
# projectcalico/api at the pseudo-version tigera/operator pins (the proxy serves no other).
CALICO=v1.11.0-cni-plugin.0.20250813170300-a0db560f0520
CALICO_VERSION=v3.28.5-0.20250813-a0db560f0520
CALICO_API=v0.0.0-20240708202104-e3f70b269c2c
CACHE=${1:-${CNIBENCH_KUBE_CACHE:-/var/cache/cnibench/kube-$K8S}}
BIN=$CACHE/bin
BINARIES=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy)

have_all() {
  for b in "${BINARIES[@]}" kwok flanneld cilium-agent cilium-cni kube-router calico-node calico; do [ -x "$BIN/$b" ] || return 1; done
  [ -d "$BIN/cilium-bpf" ] && [ -d "$BIN/cilium-crds" ] && [ -d "$BIN/calico-crds" ]
}
if have_all; then
  echo "kube-build: binaries present in $BIN"
  exit 0
fi

mkdir -p "$CACHE/src/stub/sample-apiserver" "$BIN"
exec 9>"$BIN/.build.lock"
if ! flock -n 9; then
  echo "kube-build: another kube-build.sh is building into $BIN; waiting for it"
  flock 9
  if have_all; then
    echo "kube-build: binaries present in $BIN"
    exit 0
  fi
fi
src=$CACHE/src
# k8s.io/sample-apiserver is not served by the proxy: a stub module stands in for it.
printf 'module k8s.io/sample-apiserver\n\ngo 1.24\n' > "$src/stub/sample-apiserver/go.mod"

staging=(api apiextensions-apiserver apimachinery apiserver cli-runtime client-go cloud-provider
  cluster-bootstrap code-generator component-base component-helpers controller-manager cri-api
  cri-client csi-translation-lib dynamic-resource-allocation endpointslice externaljwt kms
  kube-aggregator kube-controller-manager kube-proxy kube-scheduler kubectl kubelet metrics
  mount-utils pod-security-admission sample-cli-plugin sample-controller)
{
  echo "module cnibench.local/kubebuild"
  echo
  echo "go 1.24"
  echo
  echo "require k8s.io/kubernetes $K8S"
  echo
  echo "replace ("
  for m in "${staging[@]}"; do echo "	k8s.io/$m => k8s.io/$m $STAGING"; done
  echo "	k8s.io/sample-apiserver => ./stub/sample-apiserver"
  echo ")"
} > "$src/go.mod"
printf 'package kubebuild\n' > "$src/doc.go"

ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$K8S -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=34 -X k8s.io/client-go/pkg/version.gitVersion=$K8S"
cd "$src"
export GOFLAGS=-mod=mod CGO_ENABLED=0
start=$(date +%s)
step() { echo "kube-build: building $* (at $(( $(date +%s) - start )) s)"; }
for b in "${BINARIES[@]}"; do
  [ -x "$BIN/$b" ] && continue
  step "$b $K8S"
  go build -trimpath -ldflags "$ldflags" -o "$BIN/$b.tmp" "k8s.io/kubernetes/cmd/$b"
  mv "$BIN/$b.tmp" "$BIN/$b"
done
if [ ! -x "$BIN/kwok" ]; then
  step "kwok $KWOK"
  GOBIN="$BIN" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK"
fi
if [ ! -x "$BIN/flanneld" ]; then
  # flanneld from its module, whole but for one backend: pkg/backend/tencentvpc needs Tencent
  # Cloud's SDK, which the module proxy does not serve, so its import goes from a copy of the
  # source. CGO on, as flannel's own build on amd64 (its UDP backend is C).
  step "flanneld $FLANNEL"
  mod=$(cd / && GOFLAGS= go mod download -json "github.com/flannel-io/flannel@$FLANNEL" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [ -d "$mod" ] || { echo "kube-build: flannel $FLANNEL: module not downloaded" >&2; exit 1; }
  rm -rf "$src/flannel" && cp -r "$mod" "$src/flannel" && chmod -R u+w "$src/flannel"
  sed -i '\#"github.com/flannel-io/flannel/pkg/backend/tencentvpc"#d' "$src/flannel/main.go"
  if grep -q tencentvpc "$src/flannel/main.go"; then echo "kube-build: could not drop the tencentvpc backend" >&2; exit 1; fi
  (cd "$src/flannel" && CGO_ENABLED=1 go build -trimpath \
    -ldflags "-s -w -X github.com/flannel-io/flannel/pkg/version.Version=$FLANNEL" -o "$BIN/flanneld.tmp" .)
  mv "$BIN/flanneld.tmp" "$BIN/flanneld"
fi
if [ ! -x "$BIN/cilium-agent" ] || [ ! -x "$BIN/cilium-cni" ] || [ ! -d "$BIN/cilium-bpf" ] || [ ! -d "$BIN/cilium-crds" ]; then
  # cilium-agent and cilium-cni from the cilium module. Its go.mod pins gobgp v4 to an
  # unreleased commit the proxy does not serve; the release v4.8.0 stands in (the test
  # cluster does not run BGP). CGO off, as Cilium's own images. The agent compiles its
  # datapath from bpf/ with clang at start: the sources go next to it, and so do the CRDs
  # the cilium-operator would otherwise register.
  step "cilium-agent and cilium-cni $CILIUM"
  mod=$(cd / && GOFLAGS= go mod download -json "github.com/cilium/cilium@$CILIUM" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [ -d "$mod" ] || { echo "kube-build: cilium $CILIUM: module not downloaded" >&2; exit 1; }
  rm -rf "$src/cilium" && cp -r "$mod" "$src/cilium" && chmod -R u+w "$src/cilium"
  (cd "$src/cilium" && go mod edit -replace github.com/osrg/gobgp/v4=github.com/osrg/gobgp/v4@v4.8.0 &&
    go build -trimpath -ldflags "-s -w" -o "$BIN/cilium-agent.tmp" ./daemon &&
    go build -trimpath -ldflags "-s -w" -o "$BIN/cilium-cni.tmp" ./plugins/cilium-cni)
  rm -rf "$BIN/cilium-bpf" "$BIN/cilium-crds"
  cp -r "$src/cilium/bpf" "$BIN/cilium-bpf"
  mkdir -p "$BIN/cilium-crds"
  cp "$src/cilium"/pkg/k8s/apis/cilium.io/client/crds/v2*/*.yaml "$BIN/cilium-crds/"
  mv "$BIN/cilium-agent.tmp" "$BIN/cilium-agent"
  mv "$BIN/cilium-cni.tmp" "$BIN/cilium-cni"
  rm -rf "$src/cilium"
fi
if [ ! -x "$BIN/kube-router" ]; then
  # kube-router from its module, as its own release build (CGO off, version stamped); its
  # BGP speaker (gobgp) is a library inside it.
  step "kube-router $KUBE_ROUTER"
  mod=$(cd / && GOFLAGS= go mod download -json "github.com/cloudnativelabs/kube-router/v2@$KUBE_ROUTER" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [ -d "$mod" ] || { echo "kube-build: kube-router $KUBE_ROUTER: module not downloaded" >&2; exit 1; }
  rm -rf "$src/kube-router" && cp -r "$mod" "$src/kube-router" && chmod -R u+w "$src/kube-router"
  (cd "$src/kube-router" && go build -trimpath \
    -ldflags "-s -w -X github.com/cloudnativelabs/kube-router/v2/pkg/version.Version=$KUBE_ROUTER" -o "$BIN/kube-router.tmp" ./cmd/kube-router)
  mv "$BIN/kube-router.tmp" "$BIN/kube-router"
  rm -rf "$src/kube-router"
fi
if [ ! -x "$BIN/calico-node" ] || [ ! -x "$BIN/calico" ] || [ ! -d "$BIN/calico-crds" ]; then
  # calico-node (felix, confd, the startup and tunnel-address steps in one binary) and the
  # calico CNI plugin (calico-ipam is the same binary under that name). calico-node with CGO,
  # as Calico's own build: felix calls libbpf (the copy in its tree, built static first) even
  # in its iptables data plane, where it removes connect-time programs at start (the cgo-less
  # stub panics). The CRDs the manifests install go next to them.
  step "calico-node and the calico CNI plugin $CALICO_VERSION"
  mod=$(cd / && GOFLAGS= go mod download -json "github.com/projectcalico/calico@$CALICO" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [ -d "$mod" ] || { echo "kube-build: calico $CALICO: module not downloaded" >&2; exit 1; }
  rm -rf "$src/calico" && cp -r "$mod" "$src/calico" && chmod -R u+w "$src/calico"
  v="-X github.com/projectcalico/calico/node/pkg/lifecycle/startup.VERSION=$CALICO_VERSION -X github.com/projectcalico/calico/node/buildinfo.GitVersion=$CALICO_VERSION"
  (cd "$src/calico" && go mod edit -replace "github.com/projectcalico/api=github.com/projectcalico/api@$CALICO_API" &&
    mkdir -p felix/bpf-gpl/include/libbpf/src/amd64 &&
    make -s -C felix/bpf-gpl/include/libbpf/src BUILD_STATIC_ONLY=1 OBJDIR=amd64 >/dev/null &&
    CGO_ENABLED=1 go build -trimpath -ldflags "-s -w $v" -o "$BIN/calico-node.tmp" ./node/cmd/calico-node &&
    go build -trimpath -ldflags "-s -w -X main.VERSION=$CALICO_VERSION" -o "$BIN/calico.tmp" ./cni-plugin/cmd/calico)
  rm -rf "$BIN/calico-crds" && mkdir -p "$BIN/calico-crds"
  cp "$src/calico"/libcalico-go/config/crd/*.yaml "$BIN/calico-crds/"
  mv "$BIN/calico-node.tmp" "$BIN/calico-node"
  mv "$BIN/calico.tmp" "$BIN/calico"
  rm -rf "$src/calico"
fi
echo "kube-build: done in $(( $(date +%s) - start )) s: $BIN"
