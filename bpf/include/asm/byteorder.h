/* Shim, see types.h: the programs are generated for bpfel only. */
#include <linux/byteorder/little_endian.h>
