package xsk

// The XDP program's C source is bpf/xsk_redirect.c at the top of the repository; bpf2go
// compiles it (for little-endian BPF only) into the committed xsk_bpfel.o and xsk_bpfel.go next
// to this file, so building needs no clang.

//go:generate go tool bpf2go -target bpfel -cflags "-O2 -g -Wall -Werror -mcpu=v3 -I../../bpf/include" xsk ../../bpf/xsk_redirect.c
