/* The cpu kernel's host memory, which no device tracker sees: kbench adds
 * it to the bytes of the buffers it allocated itself for the mem column. */
#ifndef CPU_H
#define CPU_H
#include <stddef.h>
#include "kernel.h"

extern const struct kern_ops kern_cpu;
size_t cpu_workspace(const void *st);

#endif
