/* Shim, see types.h. */
#include <asm-generic/swab.h>
