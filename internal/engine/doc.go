// Package engine names the room of cnibench's data-plane engines that need none of the lab's
// namespaces: they render, compile and load rules and programs into a network namespace they
// are given (bpfdp also pins into a directory it is given, mounting a bpf file system there on
// first use), and build, wire and tear down no namespace. The lab
// (internal/lab, with its parts in internal/lab/dataplane) builds and runs the namespaces and
// calls these engines; their tests that need a namespace make their own.
//
//   - proxy: kube-proxy's Service layouts (iptables, nftables, IPVS), full and partial
//     renderings and their apply;
//   - policy: the NetworkPolicy compiler (Program) and its iptables + ipset, nftables and eBPF
//     renderings and their apply;
//   - bpfdp: the eBPF data paths (bpf2go objects of bpf/*.c), their loaders and maps (Service
//     load balancing, endpoint forwarding, policy, the Polycube-like chain).
//
// This package holds no code; it is the room's index.
package engine
