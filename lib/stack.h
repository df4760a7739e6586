/* The software under a measurement, for the result rows' `stack' column:
 * "driver=580.159.03 cuda=13.0 cudnn=9.19.0 nccl=2.28.3", only what the row
 * used, "-" for a row on the CPU.  The versions are those loaded at run time
 * (cudnnGetVersion, ncclGetVersion, ...), not the headers built against:
 * two cuDNN releases behave differently on one mask. */
#ifndef STACK_H
#define STACK_H
#include "kernel.h"

enum {
	STACK_CUDA   = 1 << 0,    /* the driver and the CUDA runtime */
	STACK_CUBLAS = 1 << 1,
	STACK_CUDNN  = 1 << 2,
	STACK_NCCL   = 1 << 3,
};

/* What a kernel's rows run on: nothing for a host kernel; the driver and
 * runtime for a GPU one, with cuBLAS for naive and cuDNN for cudnn. */
unsigned stack_kern(const struct kern_ops *k);

/* The column's text for STACK_* bits; "-" for none.  Static, asked once. */
const char *stack_str(unsigned what);

#endif
