package hoptrace

// The program's C source is bpf/hop_trace.c at the top of the repository; bpf2go compiles it
// (for little-endian BPF only) into the committed hoptrace_bpfel.o and hoptrace_bpfel.go next
// to this file, so building needs no clang (scripts/bpf-gen.sh regenerates and checks them).

//go:generate go tool bpf2go -target bpfel -cflags "-O2 -g -Wall -Werror -mcpu=v3 -I../../bpf/include" hoptrace ../../bpf/hop_trace.c
