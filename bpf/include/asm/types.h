/* Shim: the BPF target has no arch directory of its own; clang -target bpfel does not search
 * /usr/include/<triplet>/, where Debian keeps <asm/*.h>. The generic UAPI headers describe a
 * 64-bit little-endian machine, which is what BPF is. */
#include <asm-generic/types.h>
