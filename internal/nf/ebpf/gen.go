package ebpf

// The programs' C sources are in bpf/ at the top of the repository; bpf2go compiles them (for
// little-endian BPF only) into the committed *_bpfel.o and *_bpfel.go files next to this one.
// scripts/bpf-gen.sh runs these directives and checks that the committed files match.

//go:generate go tool bpf2go -target bpfel -cflags "-O2 -g -Wall -Werror -mcpu=v3 -I../../../bpf/include" xdpFw ../../../bpf/xdp_fw.c
//go:generate go tool bpf2go -target bpfel -cflags "-O2 -g -Wall -Werror -mcpu=v3 -I../../../bpf/include" tcFw ../../../bpf/tc_fw.c
//go:generate go tool bpf2go -target bpfel -cflags "-O2 -g -Wall -Werror -mcpu=v3 -I../../../bpf/include" redirectFw ../../../bpf/redirect_fw.c
//go:generate go tool bpf2go -target bpfel -cflags "-O2 -g -Wall -Werror -mcpu=v3 -I../../../bpf/include" redirectFwd ../../../bpf/redirect_fwd.c
