#!/usr/bin/env bash
# Installs what cnibench needs on a Debian machine (run as root). Idempotent: does nothing
# when everything is present. netperf lives in Debian's non-free component; when the machine's
# Debian source entry lacks it, this script adds "non-free" to that entry's Components (it never
# writes a mirror host).
set -euo pipefail

PKGS=(iperf3 netperf containernetworking-plugins iproute2 iputils-ping nftables iptables ipset tcpdump util-linux procps nginx-light curl busybox-static)
# The network functions' packages (Open vSwitch, DPDK: chains' ovs and testpmd functions, the
# ovs-dpdk data plane): large, and the demo runs none of them. --nf installs them; so does --test.
NF_PKGS=(openvswitch-switch openvswitch-common openvswitch-switch-dpdk dpdk-dev)
# --nf: also the network functions' packages (NF_PKGS).
# --kube: also what the project's own Kubernetes test cluster runs on (make e2e), gcc for
# flanneld's cgo build (scripts/kube-build.sh), make and the libelf, zlib and libpcap headers
# for calico-node's (its libbpf, gopacket), bpftool (felix runs it, as Calico's image has it)
# and clang/llvm, with which cilium-agent compiles its datapath when the test cluster runs
# Cilium.
# --test: also what the test suite checks the reports and exports with (a real headless browser,
# promtool and Prometheus) and clang/llvm/libbpf-dev, with which it rebuilds the committed eBPF
# objects and fails if they differ; implies --kube and --nf.
case "${1:-}" in
  --nf) PKGS+=("${NF_PKGS[@]}") ;;
  --kube) PKGS+=(etcd-server containerd runc gcc libc6-dev clang llvm make libelf-dev zlib1g-dev libpcap-dev bpftool) ;;
  --test) PKGS+=("${NF_PKGS[@]}" etcd-server containerd runc gcc libc6-dev chromium prometheus clang llvm libbpf-dev make libelf-dev zlib1g-dev libpcap-dev bpftool) ;;
esac

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if ! command -v go >/dev/null 2>&1; then missing+=(golang-go); fi

if [ "${#missing[@]}" -eq 0 ]; then
  echo "install-deps: all packages present"
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: missing packages (${missing[*]}); run as root to install them" >&2
  exit 2
fi

enable_nonfree() {
  local changed=0
  # deb822 sources (Debian 12+): add non-free to the Components of Debian's own entries.
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    grep -qi 'debian' "$f" || continue
    if awk 'BEGIN{IGNORECASE=1} /^URIs:.*debian/ {d=1} /^Components:/ && d && $0 !~ /(^| )non-free( |$)/ {f=1} /^$/ {d=0} END{exit !f}' "$f"; then
      mkdir -p /var/backups/cnibench && cp -p "$f" "/var/backups/cnibench/$(basename "$f").bak"
      awk 'BEGIN{d=0} /^URIs:/ {d=($0 ~ /debian/)} /^$/ {d=0}
           /^Components:/ && d && $0 !~ /(^| )non-free( |$)/ {print $0 " non-free"; next} {print}' "/var/backups/cnibench/$(basename "$f").bak" > "$f"
      echo "install-deps: enabled the non-free component in $f (backup in /var/backups/cnibench)"
      changed=1
    fi
  done
  # one-line sources.list format
  if [ -f /etc/apt/sources.list ] && grep -Eq '^deb .*debian.* main' /etc/apt/sources.list \
     && ! grep -Eq '^deb .*debian.* non-free( |$)' /etc/apt/sources.list; then
    mkdir -p /var/backups/cnibench && cp -p /etc/apt/sources.list /var/backups/cnibench/sources.list.bak
    sed -Ei '/^deb .*debian/ { / non-free( |$)/! s/$/ non-free/ }' /etc/apt/sources.list
    echo "install-deps: enabled the non-free component in /etc/apt/sources.list"
    changed=1
  fi
  return 0
}

echo "install-deps: installing ${missing[*]}"
for p in "${missing[@]}"; do
  if [ "$p" = netperf ]; then enable_nonfree; fi
done
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
