package bpfdp

// The programs' C sources are in bpf/ at the top of the repository; bpf2go compiles them (for
// little-endian BPF only) into the committed *_bpfel.o and *_bpfel.go files next to this one.
// scripts/bpf-gen.sh runs these directives and checks that the committed files match.

//go:generate go tool bpf2go -target bpfel -cflags "-O2 -g -Wall -Werror -mcpu=v3 -I../../../bpf/include" svcLb ../../../bpf/svc_lb.c
//go:generate go tool bpf2go -target bpfel -cflags "-O2 -g -Wall -Werror -mcpu=v3 -I../../../bpf/include" epFwd ../../../bpf/ep_fwd.c
//go:generate go tool bpf2go -target bpfel -cflags "-O2 -g -Wall -Werror -mcpu=v3 -I../../../bpf/include" sockLb ../../../bpf/sock_lb.c
//go:generate go tool bpf2go -target bpfel -cflags "-O2 -g -Wall -Werror -mcpu=v3 -I../../../bpf/include" polCheck ../../../bpf/policy.c
//go:generate go tool bpf2go -target bpfel -cflags "-O2 -g -Wall -Werror -mcpu=v3 -I../../../bpf/include" pcChain ../../../bpf/polycube_chain.c
//go:generate go tool bpf2go -target bpfel -cflags "-O2 -g -Wall -Werror -mcpu=v3 -I../../../bpf/include" pcMono ../../../bpf/polycube_mono.c
