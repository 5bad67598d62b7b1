# cnibench: two set-up commands on a fresh Debian machine (as root):
#   make demo   installs what is missing, runs plans/quick.yaml on the lab backend, prints the table
#               and writes the run's report.html
#   make test   installs what is missing and runs the whole test suite
GO       ?= go
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -X main.version=$(VERSION)
BIN      := bin/cnibench

.PHONY: all deps kube-deps test-deps build demo test e2e vet fmt-check bpf bpf-check bench clean check-leftovers

all: build

deps:
	bash scripts/install-deps.sh

# The real two-node Kubernetes test cluster (docs/kube-lab.md) needs etcd/containerd/runc from
# Debian and the Kubernetes binaries + kwok built from Go modules into /var/cache/cnibench
# (cold: several minutes; cached after).
kube-deps:
	bash scripts/install-deps.sh --kube
	bash scripts/kube-build.sh

# What the suite needs beyond the cluster's binaries (scripts/test.sh builds those beside the
# first tests): the cluster's Debian packages (install-deps.sh --test implies --kube), headless
# Chromium (the HTML report is opened in a real browser), promtool + Prometheus (the Prometheus
# export is read by them) and FD.io's MLRsearch 1.2.1 in a venv (internal/search compares its
# NDR/PDR search with it).
test-deps:
	bash scripts/install-deps.sh --test
	bash scripts/mlrsearch-venv.sh

build: deps
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/cnibench

# The demo runs on the lab backend only: it builds cnibench without the kube backend (-tags
# labonly leaves client-go out: about 40 s cold instead of 80) while apt installs what is
# missing, then runs the plan. `make build` builds the binary with every backend again.
demo:
	@bash scripts/install-deps.sh & deps=$$!; \
	  $(GO) build -tags labonly -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/cnibench; built=$$?; \
	  wait $$deps && test $$built -eq 0
	./$(BIN) run --plan plans/quick.yaml

vet:
	$(GO) vet ./...
	$(GO) vet -tags labonly ./cmd/cnibench

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# eBPF programs (bpf/*.c) are compiled by clang into objects and Go bindings (bpf2go) that are
# committed next to the packages that load them, so `go build` needs no clang. `make bpf`
# regenerates them; bpf-check (part of make test) regenerates them and fails if they differ.
bpf:
	bash scripts/bpf-gen.sh

bpf-check:
	bash scripts/bpf-gen.sh --check

# The whole suite, the real-cluster tests included (CNIBENCH_KUBE_E2E=1 makes a missing
# Kubernetes binary a failure instead of a skip): scripts/test.sh starts building the cluster's
# binaries in the background first, then installs, builds, vets and checks (build vet fmt-check
# test-deps bpf-check) and runs the other packages, then the cluster's package.
test:
	GO=$(GO) bash scripts/test.sh
	$(MAKE) --no-print-directory check-leftovers

# The suite ends by checking that no test object (prefix cnbt / cnbe2e / cnbdoc) is left on the host.
check-leftovers:
	@left=$$(ls /run/netns 2>/dev/null | grep -E '^cnb(t|e2e|doc)' || true); \
	 kube=$$(ls /var/tmp/cnibench-kube 2>/dev/null || true); \
	 state=$$(ls /run/cnibench 2>/dev/null | grep -E '^cnb(t|e2e)' || true); \
	 procs=$$(pgrep -f '[c]nibench-kube/|[c]nibench-kwok' || true); \
	 cgroups=$$(find /sys/fs/cgroup -maxdepth 3 \( -name 'cnbt*' -o -name 'cnbe2e*' \) 2>/dev/null || true); \
	 mounts=$$(grep -c '[c]nibench-kube' /proc/self/mountinfo || true); \
	 browsers=$$(pgrep -r R,S,D,T -f '[c]nibench-chromium-' || true; ls -d /tmp/cnibench-chrom[i]um-* 2>/dev/null || true); \
	 proms=$$(pgrep -r R,S,D,T -f '[p]rometheus --config.file=/tmp/' || true); \
	 nfs=$$(pgrep -r R,S,D,T -f '([o]vsdb-server|[o]vs-vswitchd|[d]pdk-testpmd).*cnb(t|e2e)' || true; ls -d /var/run/dpdk/cnb* 2>/dev/null || true; grep -E ' /run/cnibench/cnb(t|e2e)' /proc/self/mountinfo || true); \
	 if [ "$$mounts" = 0 ]; then mounts=; fi; \
	 if [ -n "$$left$$state$$kube$$procs$$mounts$$cgroups$$browsers$$proms$$nfs" ]; then \
	   echo "leftovers after tests: netns[$$left] state[$$state] kube[$$kube] pids[$$procs] mounts[$$mounts] cgroups[$$cgroups] chromium[$$browsers] prometheus[$$proms] network functions[$$nfs]"; exit 1; fi; \
	 echo "check-leftovers: nothing with a test prefix left behind (namespaces, state, cluster dirs, processes, mounts, cgroups, browsers, prometheus, network functions: OVS, testpmd, DPDK runtime dirs, bpf mounts)"

# Only the real-cluster tests: brings the cluster up in lab namespaces, runs the kube backend and
# the CLI on it (also kube-proxy in nftables mode), tears down.
e2e: build kube-deps
	CNIBENCH_KUBE_E2E=1 $(GO) test -count=1 -timeout 30m -run TestRealCluster -v ./internal/testing/kubeharness/
	$(MAKE) --no-print-directory check-leftovers

bench: build
	$(GO) test -run '^$$' -bench . -benchtime 1x ./internal/lab/

clean:
	rm -rf bin
